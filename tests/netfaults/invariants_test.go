package netfaults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// This file is the whole judgement of a fault test: SQL over the final
// state plus what the test's own clients observed. Each count of a verdict
// but the totals must be zero.

// verdict sums up one fault test.
type verdict struct {
	Tasks, Calls, Faults int
	// Lost: tasks not completed, acknowledged effects (batches,
	// completions) missing, natural keys sent but not stored.
	Lost int
	// Duplicated: tasks with more than one succeeded attempt, or whose
	// succeeded attempt is not their last, attempts still active, natural
	// keys stored that nobody sent.
	Duplicated int
	// StaleAccepted: writes that took effect without a live lease.
	StaleAccepted int
	// Bad5xx: answers 5xx other than 503, and 503s without Retry-After
	// or not application/problem+json.
	Bad5xx int
}

// judge logs the one summary line and requires every verdict to be zero.
func (v verdict) judge(t *testing.T, extra string) {
	t.Helper()
	t.Logf("SUMMARY %s: tasks=%d calls=%d faults=%d lost=%d duplicated=%d stale_accepted=%d bad_5xx=%d %s",
		t.Name(), v.Tasks, v.Calls, v.Faults, v.Lost, v.Duplicated, v.StaleAccepted, v.Bad5xx, extra)
	require.Zero(t, v.Lost, "lost")
	require.Zero(t, v.Duplicated, "duplicated")
	require.Zero(t, v.StaleAccepted, "stale writes accepted")
	require.Zero(t, v.Bad5xx, "5xx other than 503 with Retry-After")
}

// judgeRun judges a finished test run: every answer rec recorded, the
// stale writes raw clients saw accepted, and the organization's final state;
// it logs the summary line and fails on any non-zero verdict.
func judgeRun(t *testing.T, pool *pgxpool.Pool, org uuid.UUID, hosts []string, rec *recorder, faults int, extra string, raws ...*rawClient) {
	t.Helper()
	calls := rec.all()
	v := verdict{Calls: len(calls), Faults: faults}
	bad, unavailable, transportErrors := judgeCalls(t, calls)
	v.Bad5xx = bad
	var acknowledged []uuid.UUID
	for _, r := range raws {
		v.StaleAccepted += r.staleAccepted()
		acknowledged = append(acknowledged, r.acknowledged()...)
	}
	judgeStore(t, pool, org, hosts, calls, acknowledged, &v)
	v.judge(t, fmt.Sprintf("answers_503=%d transport_errors=%d %s", unavailable, transportErrors, extra))
}

// judgeCalls counts the recorded answers a gateway must never give: any
// 5xx but 503, and a 503 that does not say when to retry.
func judgeCalls(t *testing.T, calls []call) (bad, unavailable, transportErrors int) {
	t.Helper()
	for _, c := range calls {
		switch {
		case c.Status == 0:
			transportErrors++
		case c.Status == http.StatusServiceUnavailable && c.RetryAfter != "" && c.ContentType == "application/problem+json":
			unavailable++
		case c.Status >= 500:
			bad++
			t.Errorf("bad 5xx: %s %s answered %d %q (Retry-After %q, %s)", c.Method, c.Path, c.Status, c.Code, c.RetryAfter, c.ContentType)
		}
	}
	return bad, unavailable, transportErrors
}

// judgeStore checks the organization's final state in SQL: every task
// completed by exactly one succeeded attempt, its last, none active; every
// acknowledged result batch persisted once; the assets stored are exactly
// the hosts the tasks named; no write took effect without a live lease.
func judgeStore(t *testing.T, pool *pgxpool.Pool, org uuid.UUID, hosts []string, calls []call, completed []uuid.UUID, v *verdict) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A unique index allows one active attempt per task at any instant:
	// with it, two active attempts can never have existed.
	var oneActive bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
		WHERE i.indrelid = 'worker_task_attempts'::regclass AND i.indisunique AND i.indpred IS NOT NULL
		AND pg_get_indexdef(i.indexrelid) LIKE '%(task_id)%' AND pg_get_expr(i.indpred, i.indrelid) LIKE '%leased%')`).Scan(&oneActive))
	if !oneActive {
		t.Error("no unique index keeps a task to one active attempt")
		v.Duplicated++
	}

	rows, err := pool.Query(ctx, `SELECT t.id, t.state,
			count(a.id) FILTER (WHERE a.status = 'succeeded'),
			count(a.id) FILTER (WHERE a.status IN ('leased', 'running')),
			coalesce(max(a.attempt_number) FILTER (WHERE a.status = 'succeeded'), -1) = coalesce(max(a.attempt_number), -1)
		FROM worker_tasks t LEFT JOIN worker_task_attempts a ON a.task_id = t.id
		WHERE t.organization_id = $1 GROUP BY t.id, t.state`, org)
	require.NoError(t, err)
	for rows.Next() {
		var (
			id                uuid.UUID
			state             string
			succeeded, active int
			succeededIsLast   bool
		)
		require.NoError(t, rows.Scan(&id, &state, &succeeded, &active, &succeededIsLast))
		v.Tasks++
		switch {
		case state != "completed" || succeeded == 0:
			t.Errorf("task %s lost: state %s, %d succeeded attempts", id, state, succeeded)
			v.Lost++
		case succeeded > 1 || active > 0 || !succeededIsLast:
			t.Errorf("task %s duplicated: %d succeeded, %d active, succeeded attempt last: %v", id, succeeded, active, succeededIsLast)
			v.Duplicated++
		}
	}
	require.NoError(t, rows.Err())

	judgeBatches(t, ctx, pool, org, calls, v)
	judgeAssets(t, ctx, pool, org, hosts, v)
	judgeCompletions(t, ctx, pool, completed, v)

	// Fenced writes compare lease_expires_at > now() in their own
	// transaction, and renewals only ever move lease_expires_at later: a
	// batch received, or an attempt finished, at or after its attempt's
	// final expiry took effect without a live lease.
	var staleBatches, staleCompletions int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM worker_result_batches b
		JOIN worker_task_attempts a ON a.id = b.attempt_id
		WHERE a.organization_id = $1 AND b.status = 'persisted' AND b.received_at >= a.lease_expires_at`, org).Scan(&staleBatches))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM worker_task_attempts
		WHERE organization_id = $1 AND status = 'succeeded' AND finished_at >= lease_expires_at`, org).Scan(&staleCompletions))
	if staleBatches+staleCompletions > 0 {
		t.Errorf("stale writes took effect: %d batches, %d completions", staleBatches, staleCompletions)
	}
	v.StaleAccepted += staleBatches + staleCompletions
}

// judgeBatches: every result batch a client got acknowledged is stored,
// persisted, exactly once under its key.
func judgeBatches(t *testing.T, ctx context.Context, pool *pgxpool.Pool, org uuid.UUID, calls []call, v *verdict) {
	t.Helper()
	stored := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT b.idempotency_key FROM worker_result_batches b
		JOIN worker_tasks t ON t.id = b.task_id WHERE t.organization_id = $1 AND b.status = 'persisted'`, org)
	require.NoError(t, err)
	for rows.Next() {
		var key string
		require.NoError(t, rows.Scan(&key))
		stored[key]++
	}
	require.NoError(t, rows.Err())
	acked := map[string]bool{}
	for _, c := range calls {
		if c.Status == http.StatusOK && c.IdempotencyKey != "" && c.Attempt != "" {
			acked[c.IdempotencyKey] = true
		}
	}
	for key := range acked {
		if stored[key] != 1 {
			t.Errorf("acknowledged batch %s stored %d times", key, stored[key])
			v.Lost++
		}
	}
}

// judgeAssets: the organization's assets are exactly the hosts its tasks
// named, each once.
func judgeAssets(t *testing.T, ctx context.Context, pool *pgxpool.Pool, org uuid.UUID, hosts []string, v *verdict) {
	t.Helper()
	want := map[string]bool{}
	for _, h := range hosts {
		want[h] = true
	}
	rows, err := pool.Query(ctx, `SELECT value, count(*) OVER (PARTITION BY type, normalized_value) FROM assets WHERE organization_id = $1`, org)
	require.NoError(t, err)
	got := map[string]bool{}
	for rows.Next() {
		var (
			value string
			n     int
		)
		require.NoError(t, rows.Scan(&value, &n))
		if !want[value] || n > 1 {
			t.Errorf("asset %s stored %d times, named by a task: %v", value, n, want[value])
			v.Duplicated++
		}
		got[value] = true
	}
	require.NoError(t, rows.Err())
	for h := range want {
		if !got[h] {
			t.Errorf("asset %s reported but not stored", h)
			v.Lost++
		}
	}
}

// judgeCompletions: every succeeded completion the gateway acknowledged
// is what the attempt's row says, after every crash.
func judgeCompletions(t *testing.T, ctx context.Context, pool *pgxpool.Pool, completed []uuid.UUID, v *verdict) {
	t.Helper()
	for _, id := range completed {
		var status string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM worker_task_attempts WHERE id = $1`, id).Scan(&status))
		if status != "succeeded" {
			t.Errorf("completion of %s was acknowledged, the attempt is %s", id, status)
			v.Lost++
		}
	}
}
