package security

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// signedHook is one delivery a receiver got, by the path it was sent to.
type signedHook struct {
	path, id, timestamp, signature string
	body                           []byte
}

// signedHookReceiver records every delivery and answers 204.
type signedHookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []signedHook
}

func newSignedHookReceiver(t *testing.T) *signedHookReceiver {
	r := &signedHookReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, signedHook{path: req.URL.Path, id: req.Header.Get("webhook-id"),
			timestamp: req.Header.Get("webhook-timestamp"), signature: req.Header.Get("webhook-signature"), body: body})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// to returns the deliveries sent to path.
func (r *signedHookReceiver) to(path string) []signedHook {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []signedHook
	for _, h := range r.got {
		if h.path == path {
			out = append(out, h)
		}
	}
	return out
}

// signedBy reports whether one of a delivery's signatures is the
// Standard Webhooks HMAC under secret (the whsec_ form).
func signedBy(h signedHook, secret string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.id + "." + h.timestamp + "."))
	mac.Write(h.body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.signature) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

// requireNoSecretInTable fails when the webhook_targets table, read as
// text, holds any of the secrets in any form: whsec_, base64, or raw bytes
// (bytea hex).
func requireNoSecretInTable(t *testing.T, g *harness.Gateway, secrets ...string) {
	t.Helper()
	var dump string
	require.NoError(t, g.Pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM webhook_targets t`).Scan(&dump))
	require.NotContains(t, dump, "whsec_")
	for _, s := range secrets {
		b64 := strings.TrimPrefix(s, "whsec_")
		raw, err := base64.StdEncoding.DecodeString(b64)
		require.NoError(t, err)
		require.NotContains(t, dump, b64)
		require.NotContains(t, dump, hex.EncodeToString(raw), "a secret's bytes are stored in plaintext")
	}
}

// revokeWorker makes a worker.revoked event.
func revokeWorker(t *testing.T, g *harness.Gateway, org uuid.UUID) {
	t.Helper()
	w := g.NewWorker(t, "revoked-"+uuid.NewString()[:8], 1, org)
	res, err := g.Control.RevokeWorkerWithResponse(t.Context(), w.ID, apiclient.RevokeRequest{Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
}

func hookConfig(c *server.Config) {
	c.Webhooks.AllowPrivate = true
	c.Webhooks.Timeout = 2 * time.Second
	c.Webhooks.Policy.RetryBase = 20 * time.Millisecond
	c.Webhooks.Policy.RetryMax = 100 * time.Millisecond
	c.Webhooks.Policy.BreakerThreshold = 100
}

// TestWebhookSecretsNotStoredInPlaintext: the secret answered at creation
// and at rotation is nowhere in the webhook_targets table, and deliveries
// are signed with it; a gateway without a secrets key creates no target.
func TestWebhookSecretsNotStoredInPlaintext(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: hookConfig})
	org := g.NewOrganization(t, "sealed-hooks")
	rcv := newSignedHookReceiver(t)
	res, err := g.Control.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: org,
		Url: rcv.srv.URL + "/a", EventTypes: []apiclient.WebhookEventType{apiclient.WorkerRevoked}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	first := res.JSON201.Secret
	requireNoSecretInTable(t, g, first)

	revokeWorker(t, g, org)
	harness.WaitFor(t, 30*time.Second, "the first delivery", func() bool { return len(rcv.to("/a")) == 1 })
	require.True(t, signedBy(rcv.to("/a")[0], first), "signed with the secret answered at creation")

	rot, err := g.Control.RotateWebhookSecretWithResponse(t.Context(), res.JSON201.Id, apiclient.RotateWebhookSecretRequest{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rot.StatusCode(), string(rot.Body))
	second := rot.JSON200.Secret
	requireNoSecretInTable(t, g, first, second)
	revokeWorker(t, g, org)
	harness.WaitFor(t, 30*time.Second, "the second delivery", func() bool { return len(rcv.to("/a")) == 2 })
	d := rcv.to("/a")[1]
	require.True(t, signedBy(d, second), "signed with the new secret")
	require.True(t, signedBy(d, first), "and, during the overlap, the old one")

	// The key check at start-up knows webhook secrets: another key is refused.
	other, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	var wrong *server.WrongSecretsKeyError
	require.True(t, errors.As(server.CheckSecretsKey(t.Context(), g.Store, secretbox.NewKeyring(other)), &wrong))
	require.NoError(t, server.CheckSecretsKey(t.Context(), g.Store, secretbox.NewKeyring(harness.SecretsKey(t))))

	// Without a secrets key a target cannot be created, nor its secret rotated.
	nokey := harness.Start(t, harness.Options{Config: func(c *server.Config) { hookConfig(c); c.Secrets = nil }})
	org2 := nokey.NewOrganization(t, "no-key")
	res, err = nokey.Control.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: org2,
		Url: rcv.srv.URL + "/b", EventTypes: []apiclient.WebhookEventType{apiclient.WorkerRevoked}})
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode(), string(res.Body))
	require.Equal(t, "secrets-disabled", res.ApplicationproblemJSON503.Code)
	var rows int
	require.NoError(t, nokey.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_targets`).Scan(&rows))
	require.Zero(t, rows)
}

// TestWebhookSecretsOldRowsSealedAndRewrapped: on the expanded schema
// both releases serve on, a target written in the shape before sealing
// (plaintext secret) still delivers; a replica that starts with the
// secrets key seals it; the contract step (`gateway migrate up
// -contract`) leaves no secret in plaintext; `gateway secrets rotate-kek`
// re-wraps every webhook secret under the new key; and a replica holding
// only the new key delivers to both targets, signed with the secrets
// answered at creation.
func TestWebhookSecretsOldRowsSealedAndRewrapped(t *testing.T) {
	t.Parallel()
	oldKey, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	newKey, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	dir := t.TempDir()
	oldFile, newFile := filepath.Join(dir, "old.key"), filepath.Join(dir, "new.key")
	require.NoError(t, os.WriteFile(oldFile, []byte(oldKey.Encode()), 0o600))
	require.NoError(t, os.WriteFile(newFile, []byte(newKey.Encode()), 0o600))
	hookEnv := []string{"GATEWAY_WEBHOOKS_ALLOW_PRIVATE=true", "GATEWAY_WEBHOOKS_RETRY_BASE=50ms", "GATEWAY_WEBHOOKS_RETRY_MAX=200ms"}

	url := storetest.NewEmptyDatabase(t)
	require.NoError(t, migrations.Up(t.Context(), url))
	g, procs := harness.StartProcessesOn(t, 1, harness.Database{URL: url}, "-secrets-key-file", oldFile, "-webhooks-allow-private")
	org := g.NewOrganization(t, "old-hooks")
	rcv := newSignedHookReceiver(t)
	res, err := g.Control.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: org,
		Url: rcv.srv.URL + "/new", EventTypes: []apiclient.WebhookEventType{apiclient.WorkerRevoked}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	created := res.JSON201.Secret

	// A target as a release before migration 000027 wrote it.
	oldRaw := []byte("an old release's plaintext secret")
	oldSecret := "whsec_" + base64.StdEncoding.EncodeToString(oldRaw)
	var oldID uuid.UUID
	require.NoError(t, g.Pool.QueryRow(t.Context(), `INSERT INTO webhook_targets (organization_id, url, event_types, secret)
		VALUES ($1, $2, '{worker.revoked}', $3) RETURNING id`, org, rcv.srv.URL+"/old", oldRaw).Scan(&oldID))
	revokeWorker(t, g, org)
	harness.WaitFor(t, 30*time.Second, "the old row delivers", func() bool { return len(rcv.to("/old")) == 1 })
	require.True(t, signedBy(rcv.to("/old")[0], oldSecret))

	// A replica starting with the key seals it.
	sealing := g.StartProcess(t, append([]string{"GATEWAY_SECRETS_KEY_FILE=" + oldFile}, hookEnv...)...)
	harness.WaitFor(t, 30*time.Second, "the start-up step sealed the old row", func() bool {
		var unsealed int
		require.NoError(t, g.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_targets WHERE secret_kek_id IS NULL`).Scan(&unsealed))
		return unsealed == 0
	})
	// The plaintext stays for the previous release until the contract step.
	out, err := exec.Command(harness.Binary(t, "gateway"), "migrate", "up", "-contract", "-database-url", g.DatabaseURL).CombinedOutput()
	require.NoError(t, err, string(out))
	requireNoSecretInTable(t, g, created, oldSecret)

	out, err = exec.Command(harness.Binary(t, "gateway"), "secrets", "rotate-kek", "-database-url", g.DatabaseURL,
		"-secrets-key-file", newFile, "-secrets-old-key-file", oldFile).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "re-wrapped 2 webhook signing secrets")
	var stale int
	require.NoError(t, g.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_targets WHERE secret_kek_id <> $1`, newKey.ID).Scan(&stale))
	require.Zero(t, stale)

	// Only the new key from now on.
	require.NoError(t, procs[0].Stop(syscall.SIGTERM))
	require.NoError(t, sealing.Stop(syscall.SIGTERM))
	p := g.StartProcess(t, append([]string{"GATEWAY_SECRETS_KEY_FILE=" + newFile}, hookEnv...)...)
	g.URL = p.URL
	g.Control = g.ControlClient(t, g.AdminToken)
	revokeWorker(t, g, org)
	harness.WaitFor(t, 30*time.Second, "both targets delivered", func() bool {
		return len(rcv.to("/new")) == 2 && len(rcv.to("/old")) == 2
	})
	require.True(t, signedBy(rcv.to("/new")[1], created), "signed with the secret answered at creation")
	require.True(t, signedBy(rcv.to("/old")[1], oldSecret), "signed with the old row's secret")
	requireNoSecretInTable(t, g, created, oldSecret)
}
