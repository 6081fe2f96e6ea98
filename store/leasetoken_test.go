package store_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// leaseTokenHashMigration is the migration that replaced the plaintext
// lease token with its hash.
const leaseTokenHashMigration = 11

// TestLeaseTokensAreStoredOnlyAsHashes: no column of an attempt holds its
// token, however it was issued (a poll or a poll's replay); the row holds its
// SHA-256.
func TestLeaseTokensAreStoredOnlyAsHashes(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	createTasks(t, s, b.org.ID, 2, store.CreateTaskParams{})
	p := store.AcquireParams{WorkerID: b.worker.ID, MaxTasks: 2, IdempotencyKey: "poll-1"}
	first, err := s.AcquireLeases(t.Context(), p)
	require.NoError(t, err)
	require.Len(t, first.Leases, 2)
	replay, err := s.AcquireLeases(t.Context(), p)
	require.NoError(t, err)
	require.True(t, replay.Replayed)

	for _, l := range append(first.Leases, replay.Leases...) {
		require.Len(t, l.LeaseToken, 64, "256 random bits in hex")
		var row string
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`SELECT to_jsonb(a)::text FROM worker_task_attempts a WHERE id = $1`, l.AttemptID).Scan(&row))
		require.NotContains(t, row, l.LeaseToken)
		require.NotContains(t, strings.ToLower(row), l.LeaseToken[:16], "not even a part of it")
	}
	for _, l := range replay.Leases {
		var stored []byte
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`SELECT lease_token_hash FROM worker_task_attempts WHERE id = $1`, l.AttemptID).Scan(&stored))
		want := sha256.Sum256([]byte(l.LeaseToken))
		require.Equal(t, want[:], stored)
	}
}

// TestLeaseTokenMigrationKeepsLiveLeases moves live data across the
// migration that hashes lease tokens: a lease granted before the upgrade is
// still held by its token after it, a completion made before it is still
// recognised when repeated, and wrong tokens are refused.
func TestLeaseTokenMigrationKeepsLiveLeases(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// The schema before the migration: tokens in plaintext.
	url, oldPool := beforeMigration(t, leaseTokenHashMigration)
	old := store.New(oldPool)
	org := createOldOrg(t, oldPool, "org-a")
	worker := createOldWorker(t, oldPool, 2)
	assign(t, old, org.ID, worker.ID)
	// Tasks inserted as that schema's gateway did (its store code is gone).
	live, done := insertOldTask(t, oldPool, org.ID), insertOldTask(t, oldPool, org.ID)
	liveToken := strings.Repeat("0123456789abcdef", 4)
	doneToken := strings.ReplaceAll(uuid.NewString()+uuid.NewString(), "-", "")
	var liveAttempt, doneAttempt uuid.UUID
	require.NoError(t, oldPool.QueryRow(ctx, `
		WITH t AS (
			UPDATE worker_tasks SET state = 'leased', attempt_count = 1, attempts_started = 1 WHERE id = $1 RETURNING id, organization_id
		)
		INSERT INTO worker_task_attempts (task_id, worker_id, organization_id, attempt_number, lease_token, status, lease_expires_at, deadline_at)
		SELECT t.id, $2, t.organization_id, 1, $3, 'leased', now() + interval '10 minutes', now() + interval '1 hour' FROM t
		RETURNING id`, live, worker.ID, liveToken).Scan(&liveAttempt))
	require.NoError(t, oldPool.QueryRow(ctx, `
		WITH t AS (
			UPDATE worker_tasks SET state = 'completed', attempt_count = 1, attempts_started = 1, completed_at = now()
			WHERE id = $1 RETURNING id, organization_id
		)
		INSERT INTO worker_task_attempts (task_id, worker_id, organization_id, attempt_number, lease_token, status,
			lease_expires_at, deadline_at, finished_at, result_task_state)
		SELECT t.id, $2, t.organization_id, 1, $3, 'succeeded', now(), now() + interval '1 hour', now(), 'completed' FROM t
		RETURNING id`, done, worker.ID, doneToken).Scan(&doneAttempt))
	oldPool.Close()

	// Up to the newest schema, which the store code below speaks.
	require.NoError(t, migrations.Up(ctx, url))
	pool, err := store.OpenPool(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool)

	var plaintextLeft bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'worker_task_attempts' AND column_name = 'lease_token')`).Scan(&plaintextLeft))
	require.False(t, plaintextLeft, "the plaintext column is gone")
	var stored []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT lease_token_hash FROM worker_task_attempts WHERE id = $1`, liveAttempt).Scan(&stored))
	want := sha256.Sum256([]byte(liveToken))
	require.Equal(t, want[:], stored, "the database hashed the token as the gateway does")

	ref := store.AttemptRef{WorkerID: worker.ID, AttemptID: liveAttempt, LeaseToken: liveToken}
	for _, wrong := range []string{strings.Repeat("f", 64), strings.ToUpper(liveToken), liveToken + "0", doneToken} {
		_, err := s.HeartbeatAttempt(ctx, store.AttemptRef{WorkerID: worker.ID, AttemptID: liveAttempt, LeaseToken: wrong})
		require.ErrorIs(t, err, store.ErrLeaseLost, "token %q", wrong)
	}
	st, err := s.HeartbeatAttempt(ctx, ref)
	require.NoError(t, err, "the lease granted before the upgrade is still held")
	require.Equal(t, store.LeaseActive, st.State)
	res, err := s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: ref, Outcome: store.AttemptSucceeded})
	require.NoError(t, err)
	require.Equal(t, store.TaskCompleted, res.TaskState)

	doneRef := store.AttemptRef{WorkerID: worker.ID, AttemptID: doneAttempt, LeaseToken: doneToken}
	res, err = s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: doneRef, Outcome: store.AttemptSucceeded})
	require.NoError(t, err)
	require.True(t, res.Replayed, "a completion from before the upgrade is recognised when repeated")
	doneRef.LeaseToken = liveToken
	_, err = s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: doneRef, Outcome: store.AttemptSucceeded})
	require.ErrorIs(t, err, store.ErrLeaseLost)
}

// insertOldTask inserts a pending no-op task into a schema older than the
// store code, which may not speak it.
func insertOldTask(t *testing.T, pool *pgxpool.Pool, org uuid.UUID) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO worker_tasks (task_type, organization_id, payload)
		VALUES ('scanner_plugin', $1, '{"plugin": "echo"}') RETURNING id`, org).Scan(&id))
	return id
}
