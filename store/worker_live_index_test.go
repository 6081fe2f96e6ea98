package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// attemptIndexesRead explains sql under the acquisition's plan settings
// and returns the index each scan of worker_task_attempts in its plan
// uses ("" for a scan without one).
func attemptIndexesRead(t *testing.T, b *testBundle, sql string, args ...any) []string {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	_, err = tx.Exec(t.Context(), store.GenericPlanSQL)
	require.NoError(t, err)
	var plan []struct{ Plan map[string]any }
	require.NoError(t, tx.QueryRow(t.Context(), `EXPLAIN (FORMAT JSON) `+sql, args...).Scan(&plan))
	var indexes []string
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		if kind, _ := node["Node Type"].(string); node["Relation Name"] == "worker_task_attempts" && strings.HasSuffix(kind, "Scan") {
			name, _ := node["Index Name"].(string)
			indexes = append(indexes, name)
		}
		children, _ := node["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plan[0].Plan)
	raw, _ := json.Marshal(plan)
	require.NotEmpty(t, indexes, "no scan of worker_task_attempts in %s", raw)
	return indexes
}

// TestWorkerLiveAttemptsReadThroughTheWorkerIndex: every statement of a
// poll that reads the polling worker's live attempts (its capacity count,
// its repeated-poll check) reads them through the worker's own index, even
// when the statistics were taken while no lease was live. Then the
// planner finds every index of live attempts empty, and with the status in
// those statements it could read every worker's live leases through the
// expiry or per-task index instead, on every poll.
func TestWorkerLiveAttemptsReadThroughTheWorkerIndex(t *testing.T) {
	s, b := setupStore(t)
	busy := createWorker(t, s, b.pool, workerOpts{Capacity: 100})
	assign(t, s, b.org.ID, busy.ID)

	// Statistics of a quiet spell: attempts exist, none is live.
	createTasks(t, s, b.org.ID, 20, store.CreateTaskParams{})
	for _, l := range acquire(t, s, busy.ID, 20).Leases {
		complete(t, s, refOf(busy.ID, l), store.AttemptSucceeded, false)
	}
	exec(t, b.pool, `ANALYZE worker_task_attempts`)
	// Then another worker holds many leases.
	createTasks(t, s, b.org.ID, 60, store.CreateTaskParams{})
	require.Len(t, acquire(t, s, busy.ID, 60).Leases, 60)

	hashes := [][]byte{make([]byte, 32)}
	for name, explain := range map[string]func() []string{
		"capacity count (group poll)": func() []string {
			return attemptIndexesRead(t, b, store.LockAssignmentsSQL, b.worker.ID)
		},
		"repeated-poll check": func() []string {
			return attemptIndexesRead(t, b, store.ReplayLeasesSQL, b.worker.ID, "poll-key", hashes)
		},
		"capacity count and repeated-poll check (lone poll)": func() []string {
			return attemptIndexesRead(t, b, store.LeaseCandidatesSQL, b.worker.ID, 1, "poll-key", hashes)
		},
	} {
		// The worker index finds them; the primary key may then look up
		// the ones found (the repeated-poll check's update).
		indexes := explain()
		require.Contains(t, indexes, "worker_task_attempts_worker_unfinished_idx", name)
		for _, index := range indexes {
			require.Contains(t, []string{"worker_task_attempts_worker_unfinished_idx", "worker_task_attempts_pkey"}, index, name)
		}
	}
}

// TestAttemptLiveExactlyWhileUnfinished: the database refuses an attempt
// whose finished_at disagrees with its status, the rule the worker index
// of live attempts relies on.
func TestAttemptLiveExactlyWhileUnfinished(t *testing.T) {
	s, b := setupStore(t)
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	l := acquireOne(t, s, b.worker.ID)
	_, err := b.pool.Exec(t.Context(), `UPDATE worker_task_attempts SET finished_at = now() WHERE id = $1`, l.AttemptID)
	require.ErrorContains(t, err, "worker_task_attempts_live_unfinished")
	complete(t, s, refOf(b.worker.ID, l), store.AttemptSucceeded, false)
	_, err = b.pool.Exec(t.Context(), `UPDATE worker_task_attempts SET finished_at = NULL WHERE id = $1`, l.AttemptID)
	require.ErrorContains(t, err, "worker_task_attempts_live_unfinished")
}
