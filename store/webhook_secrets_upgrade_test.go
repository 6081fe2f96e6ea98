package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// The previous release's statements on webhook secrets (commit b316924,
// store/webhook_delivery.go and store/webhooks.go), as it runs them beside
// this release on the expanded schema: it signs with the plaintext columns
// and rotates by writing them alone.
const (
	previousReleaseClaimSQL = `
WITH due AS (
	SELECT d.id FROM webhook_deliveries d
	WHERE d.state = 'pending' AND d.next_attempt_at <= now()
		AND EXISTS (SELECT 1 FROM webhook_targets t WHERE t.id = d.target_id AND t.enabled
			AND (t.circuit_open_until IS NULL OR t.circuit_open_until <= now()))
	ORDER BY d.next_attempt_at
	LIMIT $1
	FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d SET attempts = d.attempts + 1, last_attempt_at = now(),
	next_attempt_at = now() + make_interval(secs => $2)
FROM due, webhook_events e, webhook_targets t
WHERE d.id = due.id AND e.id = d.event_id AND t.id = d.target_id
RETURNING d.id, d.event_id, e.event_type, t.id, t.url, d.attempts, e.body, t.secret,
	CASE WHEN t.previous_secret_expires_at > now() THEN t.previous_secret END`
	previousReleaseRotateSQL = `
		UPDATE webhook_targets t SET secret = $2, previous_secret = t.secret,
			previous_secret_expires_at = now() + make_interval(secs => 3600), updated_at = now()
		WHERE t.id = $1 AND t.deleted_at IS NULL`
	previousReleaseCreateSQL = `
		INSERT INTO webhook_targets AS t (organization_id, url, description, event_types, enabled, secret)
		VALUES ($1, 'http://127.0.0.1:9/previous', '', '{task.completed}', true, $2) RETURNING id`
)

// expandedStore is setupStore on a database at this release's expand
// migrations alone: the schema both releases serve on until the contract
// step. Its URL is returned for that step.
func expandedStore(t *testing.T) (*store.Store, *testBundle, string) {
	t.Helper()
	url := storetest.NewEmptyDatabase(t)
	require.NoError(t, migrations.Up(t.Context(), url))
	pool, err := store.OpenPool(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool)
	org := createOrg(t, s, "org-a")
	w := createWorker(t, s, pool, workerOpts{Capacity: 4})
	assign(t, s, org.ID, w.ID)
	return s, &testBundle{pool: pool, org: org, worker: w}, url
}

// previousReleaseClaimedSecrets completes a task and claims the delivery
// to target as the previous release does: the secrets it signs with,
// current first.
func previousReleaseClaimedSecrets(t *testing.T, s *store.Store, b *testBundle, target uuid.UUID) [][]byte {
	t.Helper()
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	rows, err := b.pool.Query(t.Context(), previousReleaseClaimSQL, 100, 60.0)
	require.NoError(t, err)
	defer rows.Close()
	var out [][]byte
	found := false
	for rows.Next() {
		var (
			id, event, targetID uuid.UUID
			eventType, url      string
			attempts            int
			body                []byte
			secret, previous    []byte
		)
		require.NoError(t, rows.Scan(&id, &event, &eventType, &targetID, &url, &attempts, &body, &secret, &previous))
		if targetID != target {
			continue
		}
		require.False(t, found, "one delivery per target")
		found = true
		out = [][]byte{secret}
		if previous != nil {
			out = append(out, previous)
		}
	}
	require.NoError(t, rows.Err())
	require.True(t, found, "a delivery to the target")
	return out
}

// requireSealed fails unless target's current secret (and previous one,
// when previous) are sealed.
func requireSealed(t *testing.T, b *testBundle, target uuid.UUID, previous bool) {
	t.Helper()
	var current, prev bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT secret_kek_id IS NOT NULL, previous_secret_kek_id IS NOT NULL
		FROM webhook_targets WHERE id = $1`, target).Scan(&current, &prev))
	require.True(t, current, "the current secret is sealed")
	require.Equal(t, previous, prev, "the previous secret is sealed")
}

// TestWebhookSecretsReadableByPreviousRelease: until the contract step, a
// target this release creates or rotates keeps its secrets in plaintext
// beside the seals, so a replica of the previous release, which signs
// with the plaintext, signs with the secrets this release answered (not
// an empty key); the sealing pass keeps them.
func TestWebhookSecretsReadableByPreviousRelease(t *testing.T) {
	t.Parallel()
	s, b, _ := expandedStore(t)
	tenant := store.OneOrganization(b.org.ID)
	w, created, err := s.CreateWebhookTarget(t.Context(), tenant, hookKeyring, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	requireSealed(t, b, w.ID, false)
	require.Equal(t, [][]byte{created}, previousReleaseClaimedSecrets(t, s, b, w.ID))
	require.Equal(t, [][]byte{created}, claimedSecrets(t, s, b, hookKeyring, w.ID))

	_, rotated, err := s.RotateWebhookSecret(t.Context(), tenant, hookKeyring, w.ID, time.Hour)
	require.NoError(t, err)
	requireSealed(t, b, w.ID, true)
	require.Equal(t, [][]byte{rotated, created}, previousReleaseClaimedSecrets(t, s, b, w.ID))
	require.Equal(t, [][]byte{rotated, created}, claimedSecrets(t, s, b, hookKeyring, w.ID))

	// The sealing pass (every replica's start) leaves them as they are.
	n, err := s.SealWebhookSecrets(t.Context(), hookKeyring, 10)
	require.NoError(t, err)
	require.Zero(t, n, "nothing to seal")
	require.Equal(t, [][]byte{rotated, created}, previousReleaseClaimedSecrets(t, s, b, w.ID))
}

// TestPreviousReleaseRotationIsWhatThisReleaseSigns: a rotation written by
// the previous release (plaintext only) on a target this release sealed is
// what this release's deliveries sign with, not the stale seal beside it:
// migration 000029's trigger clears the seals, the deliverer falls back to
// the plaintext, and the next sealing pass seals the new secrets.
func TestPreviousReleaseRotationIsWhatThisReleaseSigns(t *testing.T) {
	t.Parallel()
	s, b, _ := expandedStore(t)
	tenant := store.OneOrganization(b.org.ID)
	w, created, err := s.CreateWebhookTarget(t.Context(), tenant, hookKeyring, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	byPrevious := []byte(strings.Repeat("r", 32))
	_, err = b.pool.Exec(t.Context(), previousReleaseRotateSQL, w.ID, byPrevious)
	require.NoError(t, err)

	require.Equal(t, [][]byte{byPrevious, created}, claimedSecrets(t, s, b, hookKeyring, w.ID),
		"this release signs with the previous release's rotation")
	require.Equal(t, [][]byte{byPrevious, created}, previousReleaseClaimedSecrets(t, s, b, w.ID))
	unsealed, err := s.UnsealedWebhookSecrets(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, unsealed)

	n, err := s.SealWebhookSecrets(t.Context(), hookKeyring, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireSealed(t, b, w.ID, true)
	require.Equal(t, [][]byte{byPrevious, created}, claimedSecrets(t, s, b, hookKeyring, w.ID))
	require.Equal(t, [][]byte{byPrevious, created}, previousReleaseClaimedSecrets(t, s, b, w.ID))

	// This release rotates after it: the secret it replaces is the
	// previous release's.
	_, rotated, err := s.RotateWebhookSecret(t.Context(), tenant, hookKeyring, w.ID, time.Hour)
	require.NoError(t, err)
	require.Equal(t, [][]byte{rotated, byPrevious}, claimedSecrets(t, s, b, hookKeyring, w.ID))
	require.Equal(t, [][]byte{rotated, byPrevious}, previousReleaseClaimedSecrets(t, s, b, w.ID))
}

// TestContractStepEndsPlaintextWebhookSecrets: the contract step refuses
// while a live target's secret is in plaintext only (it would erase it),
// and once the secrets are sealed it leaves no plaintext anywhere; after
// it this release creates and rotates without plaintext, and a write of
// plaintext (the previous release's) fails.
func TestContractStepEndsPlaintextWebhookSecrets(t *testing.T) {
	t.Parallel()
	s, b, url := expandedStore(t)
	tenant := store.OneOrganization(b.org.ID)
	w, created, err := s.CreateWebhookTarget(t.Context(), tenant, hookKeyring, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	byPrevious := []byte(strings.Repeat("o", 32))
	var old uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), previousReleaseCreateSQL, b.org.ID, byPrevious).Scan(&old))

	err = migrations.UpContract(t.Context(), url)
	require.ErrorContains(t, err, "contract step refused: 1 webhook target(s) have a signing secret stored in plaintext only")
	contracted, _, err := migrations.ContractVersion(url)
	require.NoError(t, err)
	require.Zero(t, contracted)
	require.Equal(t, [][]byte{byPrevious}, previousReleaseClaimedSecrets(t, s, b, old), "the refused step changed nothing")

	n, err := s.SealWebhookSecrets(t.Context(), hookKeyring, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, migrations.UpContract(t.Context(), url))

	var plaintext, triggers int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_targets
		WHERE secret IS NOT NULL OR previous_secret IS NOT NULL`).Scan(&plaintext))
	require.Zero(t, plaintext, "no plaintext secret after the contract step")
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_trigger
		WHERE tgname = 'webhook_targets_plaintext_rotated'`).Scan(&triggers))
	require.Zero(t, triggers)
	requireNoPlaintext(t, b.pool, w.ID, created)
	requireNoPlaintext(t, b.pool, old, byPrevious)
	require.Equal(t, [][]byte{created}, claimedSecrets(t, s, b, hookKeyring, w.ID))
	require.Equal(t, [][]byte{byPrevious}, claimedSecrets(t, s, b, hookKeyring, old))

	// This release writes no plaintext after it.
	after, secret, err := s.CreateWebhookTarget(t.Context(), tenant, hookKeyring, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/after", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	requireNoPlaintext(t, b.pool, after.ID, secret)
	_, rotated, err := s.RotateWebhookSecret(t.Context(), tenant, hookKeyring, w.ID, time.Hour)
	require.NoError(t, err)
	requireNoPlaintext(t, b.pool, w.ID, created, rotated)
	require.Equal(t, [][]byte{rotated, created}, claimedSecrets(t, s, b, hookKeyring, w.ID))

	// A write of plaintext fails loudly.
	_, err = b.pool.Exec(t.Context(), previousReleaseCreateSQL, b.org.ID, byPrevious)
	require.ErrorContains(t, err, "webhook_targets_no_plaintext_secret")
	_, err = b.pool.Exec(t.Context(), previousReleaseRotateSQL, w.ID, byPrevious)
	require.ErrorContains(t, err, "webhook_targets_no_plaintext_secret")
}
