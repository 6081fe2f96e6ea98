package controlplane

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// receivedHook is one request a test receiver got.
type receivedHook struct {
	id, timestamp, signature string
	body                     []byte
	status                   int
}

// hookReceiver is a real HTTP endpoint on 127.0.0.1 whose answer to each
// request the test decides (respond), recording every request.
type hookReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     []receivedHook
	respond func(n int, r *http.Request) int // n counts requests from 1; 0: hang until the client gives up
}

func newHookReceiver(t *testing.T, respond func(n int, r *http.Request) int) *hookReceiver {
	h := &hookReceiver{respond: respond}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		n := len(h.got) + 1
		rec := receivedHook{id: r.Header.Get("webhook-id"), timestamp: r.Header.Get("webhook-timestamp"),
			signature: r.Header.Get("webhook-signature"), body: body}
		h.got = append(h.got, rec)
		h.mu.Unlock()
		status := h.respond(n, r)
		if status == 0 {
			<-r.Context().Done() // the gateway's timeout ends it
			status = -1
		} else {
			w.WriteHeader(status)
		}
		h.mu.Lock()
		h.got[n-1].status = status
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) requests() []receivedHook {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]receivedHook(nil), h.got...)
}

// verifyStandardWebhook checks a request as a receiver would, written from
// the Standard Webhooks specification alone: the secret is the base64 after
// "whsec_", the signed content "id.timestamp.body", and the header a
// space-separated list of "v1,<base64 HMAC-SHA256>" of which one must match.
func verifyStandardWebhook(secret, id, timestamp string, body []byte, header string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return false
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(header) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// webhookTestConfig delivers to loopback receivers, quickly.
func webhookTestConfig(c *server.Config) {
	c.Webhooks.AllowPrivate = true
	c.Webhooks.Timeout = 500 * time.Millisecond
	c.Webhooks.Policy.RetryBase = 20 * time.Millisecond
	c.Webhooks.Policy.RetryMax = 100 * time.Millisecond
	c.Webhooks.Policy.BreakerThreshold = 100
}

func createWebhook(t *testing.T, c *apiclient.ClientWithResponses, org uuid.UUID, url string, types ...apiclient.WebhookEventType) *apiclient.WebhookWithSecret {
	t.Helper()
	res, err := c.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: org, Url: url, EventTypes: types})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201
}

func webhookDeliveries(t *testing.T, g *harness.Gateway, id uuid.UUID) []apiclient.WebhookDelivery {
	t.Helper()
	res, err := g.Control.ListWebhookDeliveriesWithResponse(t.Context(), id, &apiclient.ListWebhookDeliveriesParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200.Items
}

// TestWebhooksDeliverSignedEvents: a task's completion reaches a receiver
// that fails, times out and answers 5xx before it recovers; every try
// carries the same event id and the same bytes, signed as the spec says,
// and the delivery log tells the story.
func TestWebhooksDeliverSignedEvents(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: webhookTestConfig})
	org := g.NewOrganization(t, "hooks")
	rcv := newHookReceiver(t, func(n int, _ *http.Request) int {
		switch n {
		case 1:
			return http.StatusInternalServerError
		case 2:
			return 0 // times out
		case 3:
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	hook := createWebhook(t, g.Control, org, rcv.srv.URL+"/hook?token=abc", apiclient.TaskCompleted, apiclient.TaskFailedTerminal)
	require.True(t, strings.HasPrefix(hook.Secret, "whsec_"))

	w := g.NewWorker(t, "hook-worker", 1, org)
	w.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error { return nil })
	task := g.CreateTask(t, org, harness.TaskSpec{})
	g.WaitTaskState(t, task, "completed")

	harness.WaitFor(t, 30*time.Second, "a delivery answered 204", func() bool {
		got := rcv.requests()
		return len(got) > 0 && got[len(got)-1].status == http.StatusNoContent
	})
	got := rcv.requests()
	require.Len(t, got, 4)
	for _, r := range got {
		require.Equal(t, got[0].id, r.id, "the event id is stable across retries")
		require.True(t, bytes.Equal(got[0].body, r.body), "the body is identical on every retry")
		require.True(t, verifyStandardWebhook(hook.Secret, r.id, r.timestamp, r.body, r.signature), "signature of try %+v", r)
		require.False(t, verifyStandardWebhook("whsec_"+base64.StdEncoding.EncodeToString([]byte("another secret, 32 bytes long...")),
			r.id, r.timestamp, r.body, r.signature))
	}
	var event struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Org  string `json:"organization_id"`
		Data struct {
			TaskID string `json:"task_id"`
			State  string `json:"state"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got[0].body, &event))
	require.Equal(t, got[0].id, event.ID)
	require.Equal(t, "task.completed", event.Type)
	require.Equal(t, org.String(), event.Org)
	require.Equal(t, task.String(), event.Data.TaskID)

	// The delivery log: delivered on the fourth try, with its answer.
	harness.WaitFor(t, 10*time.Second, "the delivery recorded", func() bool {
		d := webhookDeliveries(t, g, hook.Id)
		return len(d) == 1 && d[0].State == apiclient.WebhookDeliveryStateDelivered
	})
	d := webhookDeliveries(t, g, hook.Id)[0]
	require.Equal(t, 4, d.Attempts)
	require.Equal(t, http.StatusNoContent, *d.LastStatusCode)
	require.Equal(t, got[0].id, d.EventId.String())
	require.Equal(t, apiclient.TaskCompleted, d.EventType)
	require.NotNil(t, d.DeliveredAt)
	require.NotNil(t, d.LastLatencyMs)

	// The tries by outcome, which the webhook alert watches.
	m := scrape(t, g, g.AdminToken)
	require.Equal(t, 3.0, m[`gateway_webhook_tries_total{outcome="failed"}`])
	require.Equal(t, 1.0, m[`gateway_webhook_tries_total{outcome="delivered"}`])
}

// TestWebhooksTerminalFailureAndRotation: a task that fails for good sends
// task.failed_terminal; after a rotation with an overlap every delivery is
// signed with both secrets, and only the new one is answered.
func TestWebhooksTerminalFailureAndRotation(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: webhookTestConfig})
	org := g.NewOrganization(t, "rotation")
	rcv := newHookReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	hook := createWebhook(t, g.Control, org, rcv.srv.URL, apiclient.TaskFailedTerminal)
	old := hook.Secret

	rot, err := g.Control.RotateWebhookSecretWithResponse(t.Context(), hook.Id, apiclient.RotateWebhookSecretRequest{OverlapSeconds: ptr(3600)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rot.StatusCode(), string(rot.Body))
	require.NotEqual(t, old, rot.JSON200.Secret)
	require.NotNil(t, rot.JSON200.PreviousSecretExpiresAt)

	get, err := g.Control.GetWebhookWithResponse(t.Context(), hook.Id)
	require.NoError(t, err)
	require.NotContains(t, string(get.Body), "whsec_", "a target read never holds its secret")

	w := g.NewWorker(t, "failing-worker", 1, org)
	w.Runtime(t, 1, func(context.Context, *workerclient.LeasedTask) error {
		return workerclient.Permanent("broken", "it broke")
	})
	task := g.CreateTask(t, org, harness.TaskSpec{})
	g.WaitTaskState(t, task, "failed_terminal")
	r := deliveryAbout(t, rcv, task)
	require.Len(t, strings.Fields(r.signature), 2, "two signatures during the overlap")
	require.True(t, verifyStandardWebhook(rot.JSON200.Secret, r.id, r.timestamp, r.body, r.signature))
	require.True(t, verifyStandardWebhook(old, r.id, r.timestamp, r.body, r.signature))
	require.Contains(t, string(r.body), `"type": "task.failed_terminal"`)
	require.Contains(t, string(r.body), `"error_code": "broken"`)

	// No overlap: the old secret stops at once.
	rot2, err := g.Control.RotateWebhookSecretWithResponse(t.Context(), hook.Id, apiclient.RotateWebhookSecretRequest{OverlapSeconds: ptr(0)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rot2.StatusCode(), string(rot2.Body))
	task2 := g.CreateTask(t, org, harness.TaskSpec{})
	g.WaitTaskState(t, task2, "failed_terminal")
	r = deliveryAbout(t, rcv, task2)
	require.Len(t, strings.Fields(r.signature), 1)
	require.True(t, verifyStandardWebhook(rot2.JSON200.Secret, r.id, r.timestamp, r.body, r.signature))
	require.False(t, verifyStandardWebhook(rot.JSON200.Secret, r.id, r.timestamp, r.body, r.signature))
}

// deliveryAbout waits for a delivery whose event names task and returns
// the first one received. Deliveries are at least once: a slow answer may
// bring a repeat of an earlier event, so a test finds its event by content,
// not by position.
func deliveryAbout(t *testing.T, rcv *hookReceiver, task uuid.UUID) receivedHook {
	t.Helper()
	var found receivedHook
	harness.WaitFor(t, 30*time.Second, "a delivery about task "+task.String(), func() bool {
		for _, r := range rcv.requests() {
			if strings.Contains(string(r.body), task.String()) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// TestWebhooksRefusePrivateTargets: without -webhooks-allow-private a
// target on a loopback, link-local or private address is refused when it
// is created, and a delivery whose host resolves to one (here: a target
// whose URL was changed in the database behind the API's back, as DNS
// rebinding would) is refused when dialing.
func TestWebhooksRefusePrivateTargets(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "ssrf")
	for _, url := range []string{"http://127.0.0.1:9/", "http://localhost:9/", "http://10.1.2.3/", "http://169.254.169.254/latest/meta-data",
		"http://[::1]:9/", "http://192.168.0.1/", "http://[::ffff:127.0.0.1]/", "ftp://example.com/", "not a url"} {
		res, err := g.Control.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: org, Url: url,
			EventTypes: []apiclient.WebhookEventType{apiclient.WorkerRevoked}})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, res.StatusCode(), "%s: %s", url, res.Body)
		require.Equal(t, "bad-request", res.ApplicationproblemJSON400.Code, url)
	}

	// A public literal address passes creation; the dial-time check then
	// stops the delivery to the loopback receiver it is pointed at.
	rcv := newHookReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	hook := createWebhook(t, g.Control, org, "http://9.9.9.9/hook", apiclient.WorkerRevoked)
	_, err := g.Pool.Exec(t.Context(), `UPDATE webhook_targets SET url = $2 WHERE id = $1`, hook.Id, rcv.srv.URL)
	require.NoError(t, err)
	w := g.NewWorker(t, "revoked", 1, org)
	res, err := g.Control.RevokeWorkerWithResponse(t.Context(), w.ID, apiclient.RevokeRequest{Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	harness.WaitFor(t, 30*time.Second, "the refused try logged", func() bool {
		d := webhookDeliveries(t, g, hook.Id)
		return len(d) == 1 && d[0].LastError != nil
	})
	d := webhookDeliveries(t, g, hook.Id)[0]
	require.Contains(t, *d.LastError, "does not resolve to a public address")
	require.Empty(t, rcv.requests(), "nothing reached the loopback receiver")
}

// TestWebhooksIsolationAndAudit: another organization's target is 404 on
// every route, and every change to a target is audited.
func TestWebhooksIsolationAndAudit(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: webhookTestConfig})
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	tokenA, _, err := g.Store.CreateAPIToken(t.Context(), store.EveryOrganization(),
		store.CreateAPITokenParams{Name: "a admin", Permissions: []string{"admin"}, OrganizationID: &orgA})
	require.NoError(t, err)
	a := g.ControlClient(t, tokenA)
	hookB := createWebhook(t, g.Control, orgB, "http://127.0.0.1:9/b", apiclient.ScanCompleted)

	get, err := a.GetWebhookWithResponse(t.Context(), hookB.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, get.StatusCode())
	upd, err := a.UpdateWebhookWithResponse(t.Context(), hookB.Id, apiclient.UpdateWebhookRequest{Url: "http://127.0.0.1:9/x",
		EventTypes: []apiclient.WebhookEventType{apiclient.ScanFailed}, Enabled: true})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, upd.StatusCode())
	rot, err := a.RotateWebhookSecretWithResponse(t.Context(), hookB.Id, apiclient.RotateWebhookSecretRequest{})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, rot.StatusCode())
	del, err := a.DeleteWebhookWithResponse(t.Context(), hookB.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, del.StatusCode())
	dl, err := a.ListWebhookDeliveriesWithResponse(t.Context(), hookB.Id, &apiclient.ListWebhookDeliveriesParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, dl.StatusCode())
	create, err := a.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: orgB, Url: "http://127.0.0.1:9/",
		EventTypes: []apiclient.WebhookEventType{apiclient.ScanFailed}})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, create.StatusCode())
	list, err := a.ListWebhooksWithResponse(t.Context(), &apiclient.ListWebhooksParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode())
	require.Empty(t, list.JSON200.Items)

	// Organization A's own target: create, update, rotate, delete, audited.
	hookA := createWebhook(t, a, orgA, "http://127.0.0.1:9/a?token=receiver-secret", apiclient.ScanCompleted)
	upd, err = a.UpdateWebhookWithResponse(t.Context(), hookA.Id, apiclient.UpdateWebhookRequest{Url: "http://127.0.0.1:9/a2",
		EventTypes: []apiclient.WebhookEventType{apiclient.ScanFailed}, Enabled: false})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, upd.StatusCode(), string(upd.Body))
	require.False(t, upd.JSON200.Enabled)
	rot, err = a.RotateWebhookSecretWithResponse(t.Context(), hookA.Id, apiclient.RotateWebhookSecretRequest{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rot.StatusCode(), string(rot.Body))
	del, err = a.DeleteWebhookWithResponse(t.Context(), hookA.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode())
	del, err = a.DeleteWebhookWithResponse(t.Context(), hookA.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode(), "DELETE is idempotent")
	get, err = a.GetWebhookWithResponse(t.Context(), hookA.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, get.StatusCode())

	var actions []string
	var details []string
	rows, err := g.Pool.Query(t.Context(), `SELECT action, coalesce(details::text, '') FROM audit_events WHERE target_id = $1 ORDER BY id`,
		hookA.Id.String())
	require.NoError(t, err)
	for rows.Next() {
		var action, detail string
		require.NoError(t, rows.Scan(&action, &detail))
		actions, details = append(actions, action), append(details, detail)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"webhook.create", "webhook.update", "webhook.rotate_secret", "webhook.delete", "webhook.delete"}, actions)
	for _, d := range details {
		require.NotContains(t, d, "receiver-secret", "the audit log keeps no URL query")
		require.NotContains(t, d, "whsec_")
	}
}

// TestWebhooksSurviveKill9: a gateway killed (SIGKILL) while its deliveries
// are in flight loses none of them: once its claims run out another
// replica delivers every event, each try with the event's id and stored
// bytes.
func TestWebhooksSurviveKill9(t *testing.T) {
	t.Setenv("GATEWAY_TEST_ARGS", "-webhooks-allow-private -webhooks-timeout 2s -webhooks-retry-base 50ms "+
		"-webhooks-retry-max 200ms -webhooks-breaker-threshold 1000")
	// Signing secrets are sealed: the gateways need the secrets key.
	t.Setenv("GATEWAY_SECRETS_KEY", harness.SecretsKey(t).Encode())
	g, procs := harness.StartProcesses(t, 1)
	org := g.NewOrganization(t, "kill")
	var hold sync.Mutex
	holding := true
	rcv := newHookReceiver(t, func(int, *http.Request) int {
		hold.Lock()
		defer hold.Unlock()
		if holding {
			return 0 // hangs until the gateway gives up or dies
		}
		return http.StatusOK
	})
	createWebhook(t, g.Control, org, rcv.srv.URL, apiclient.WorkerRevoked)
	const events = 5
	for i := range events {
		w := g.NewWorker(t, "doomed-"+strconv.Itoa(i), 1, org)
		res, err := g.Control.RevokeWorkerWithResponse(t.Context(), w.ID, apiclient.RevokeRequest{Reason: "test"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	}
	harness.WaitFor(t, 30*time.Second, "a delivery in flight", func() bool { return len(rcv.requests()) > 0 })
	_ = procs[0].Stop(syscall.SIGKILL) // "signal: killed"
	exited, _ := procs[0].Exited()
	require.True(t, exited)
	hold.Lock()
	holding = false
	hold.Unlock()
	g.StartProcess(t)

	harness.WaitFor(t, 60*time.Second, "every event delivered", func() bool {
		var n int
		require.NoError(t, g.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`).Scan(&n))
		return n == events
	})
	byID := map[string][][]byte{}
	for _, r := range rcv.requests() {
		byID[r.id] = append(byID[r.id], r.body)
	}
	require.Len(t, byID, events)
	for id, bodies := range byID {
		stored, err := g.Store.WebhookEventBody(t.Context(), uuid.MustParse(id))
		require.NoError(t, err)
		for _, b := range bodies {
			require.Equal(t, string(stored), string(b), "event %s: every try sends the stored bytes", id)
		}
		require.Contains(t, string(stored), `"type": "worker.revoked"`)
	}
}

// TestWebhooksWorkerOffline: the watcher notices a worker that stopped
// being seen and announces it once, through the same delivery path.
func TestWebhooksWorkerOffline(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		webhookTestConfig(c)
		c.HeartbeatInterval = 200 * time.Millisecond // online = seen within 600 ms
	}})
	org := g.NewOrganization(t, "offline")
	rcv := newHookReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	createWebhook(t, g.Control, org, rcv.srv.URL, apiclient.WorkerOffline)
	w := g.NewWorker(t, "flaky", 1, org)
	_, err := g.Pool.Exec(t.Context(), `UPDATE workers SET last_seen_at = now() WHERE id = $1`, w.ID) // as a poll would
	require.NoError(t, err)

	harness.WaitFor(t, 30*time.Second, "worker.offline delivered", func() bool { return len(rcv.requests()) > 0 })
	r := rcv.requests()[0]
	require.Contains(t, string(r.body), `"type": "worker.offline"`)
	require.Contains(t, string(r.body), w.ID.String())
	var reported int
	require.NoError(t, g.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_events WHERE event_type = 'worker.offline'`).Scan(&reported))
	require.Equal(t, 1, reported, "once per transition")
}
