package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// Verdict is what the checker found. Every count after Unknown must be zero.
type Verdict struct {
	Tasks, Calls, Unknown int
	// Lost: a task that never ended, or an acknowledged lease, batch or
	// completion the database does not have, or records not ingested.
	Lost int
	// Duplicated: rows beyond the natural keys sent, a task done twice.
	Duplicated int
	// StaleAccepted: a result batch accepted outside its attempt's lease.
	StaleAccepted int
	// Overlapping: two attempts of a task active at once, as the database
	// shows it.
	Overlapping int
	// ClockInconsistent: a lease expiry not computed from the database's
	// clock.
	ClockInconsistent int
	// NonLinearizable: tasks whose history the lease model cannot explain.
	NonLinearizable int
}

func (v Verdict) clean() bool {
	return v.Lost+v.Duplicated+v.StaleAccepted+v.Overlapping+v.ClockInconsistent+v.NonLinearizable == 0
}

// attemptRow is an attempt as the database ended up with it.
type attemptRow struct {
	ID, Task, Worker uuid.UUID
	Number           int
	Status           string
	TokenHash        []byte // the database keeps only the lease token's SHA-256
	StartedAt        time.Time
	FinishedAt       *time.Time
	LeaseSeconds     int
}

// batchRow is a stored result batch.
type batchRow struct {
	Task, Attempt uuid.UUID
	Key, Status   string
	ReceivedAt    time.Time
	Payload       []byte
	ScanJob       *uuid.UUID
}

// checker runs the checks of the end of a scenario, once the workload has
// drained and stopped.
type checker struct {
	t        *testing.T
	v        Verdict
	shown    map[string]int
	findings []string
	attempts map[uuid.UUID]attemptRow
	batches  []batchRow
	calls    []Call
}

// clockTolerance absorbs timestamp rounding between the database's clock
// and ours (one host, one clock): far below any skew a scenario injects.
const clockTolerance = time.Second

// Check checks the database and the history of a drained workload: every
// task of the database, every call of the history.
func Check(t *testing.T, w *Workload) Verdict {
	t.Helper()
	c := &checker{t: t, shown: map[string]int{}, calls: w.h.Calls()}
	c.load(w)
	c.v.Calls = len(c.calls)
	for _, call := range c.calls {
		if call.Outcome == Unknown {
			c.v.Unknown++
		}
	}
	c.checkTasks(w)
	c.checkBatches()
	c.checkIngest(w)
	c.checkAcknowledged()
	c.checkClock()
	c.checkLinearizable()
	for _, f := range c.findings {
		t.Error(f)
	}
	return c.v
}

// violation counts one finding and keeps the first few of each kind for
// the report.
func (c *checker) violation(counter *int, kind, format string, args ...any) {
	*counter++
	if c.shown[kind] < 10 {
		c.findings = append(c.findings, fmt.Sprintf(kind+": "+format, args...))
	}
	c.shown[kind]++
}

func (c *checker) load(w *Workload) {
	c.t.Helper()
	ctx := context.Background()
	rows, err := w.g.Pool.Query(ctx, `
		SELECT a.id, a.task_id, a.worker_id, a.attempt_number, a.lease_token_hash, a.status, a.started_at, a.finished_at,
			t.lease_duration_seconds
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id`)
	require.NoError(c.t, err)
	attempts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (attemptRow, error) {
		var a attemptRow
		err := r.Scan(&a.ID, &a.Task, &a.Worker, &a.Number, &a.TokenHash, &a.Status, &a.StartedAt, &a.FinishedAt, &a.LeaseSeconds)
		return a, err
	})
	require.NoError(c.t, err)
	c.attempts = map[uuid.UUID]attemptRow{}
	for _, a := range attempts {
		c.attempts[a.ID] = a
	}
	rows, err = w.g.Pool.Query(ctx, `
		SELECT b.task_id, b.attempt_id, b.idempotency_key, b.status, b.received_at, coalesce(b.payload, '[]'::jsonb), t.scan_job_id
		FROM worker_result_batches b JOIN worker_tasks t ON t.id = b.task_id`)
	require.NoError(c.t, err)
	c.batches, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (batchRow, error) {
		var b batchRow
		err := r.Scan(&b.Task, &b.Attempt, &b.Key, &b.Status, &b.ReceivedAt, &b.Payload, &b.ScanJob)
		return b, err
	})
	require.NoError(c.t, err)
}

// checkTasks: every task ended, none done twice, no attempt left active.
func (c *checker) checkTasks(w *Workload) {
	c.t.Helper()
	rows, err := w.g.Pool.Query(context.Background(), `SELECT id, state FROM worker_tasks`)
	require.NoError(c.t, err)
	states, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID    uuid.UUID
		State string
	}])
	require.NoError(c.t, err)
	c.v.Tasks = len(states)
	for _, s := range states {
		if !isTerminal(s.State) {
			c.violation(&c.v.Lost, "lost task", "task %s is %s after the workload drained", s.ID, s.State)
		}
	}
	// A leasable task without its queue row would never be leased again;
	// a queue row that outlived its task's leasable state is a bug too.
	var queueMismatches int
	require.NoError(c.t, w.g.Pool.QueryRow(context.Background(), store.QueueMismatchSQL).Scan(&queueMismatches))
	for range queueMismatches {
		c.violation(&c.v.Lost, "queue mismatch", "a task's queue row does not follow its state (store.QueueMismatchSQL)")
	}
	succeeded := map[uuid.UUID]int{}
	for _, a := range c.attempts {
		switch a.Status {
		case "succeeded":
			if succeeded[a.Task]++; succeeded[a.Task] == 2 {
				c.violation(&c.v.Duplicated, "task done twice", "task %s has two succeeded attempts", a.Task)
			}
		case "leased", "running":
			c.violation(&c.v.Overlapping, "active attempt", "attempt %s of ended task %s is still %s", a.ID, a.Task, a.Status)
		}
	}
}

// checkBatches: every accepted batch was received while its attempt held
// the lease, and the writes of a task's attempts do not interleave.
//
// Timestamps are now() of each transaction, i.e. its start, so only what a
// lock or a commit order implies can be checked: a batch's transaction
// starts after its attempt's lease was granted (the worker had the answer)
// and before the attempt ended (the batch locks the attempt row, which its
// end must update), and a later attempt exists only once the earlier one
// ended, after all of that attempt's batches committed. Intervals of
// attempts themselves are not comparable this way: a lease transaction may
// start, wait on a lock, and be granted after the previous attempt ended.
func (c *checker) checkBatches() {
	c.t.Helper()
	byTask := map[uuid.UUID][]batchRow{}
	for _, b := range c.batches {
		a := c.attempts[b.Attempt]
		switch {
		case b.Status != "persisted":
			c.violation(&c.v.Lost, "batch not persisted", "batch %s of task %s is %s", b.Key, b.Task, b.Status)
		case a.FinishedAt == nil || b.ReceivedAt.After(*a.FinishedAt) || b.ReceivedAt.Before(a.StartedAt):
			c.violation(&c.v.StaleAccepted, "stale batch", "batch %s received at %s, outside attempt %s's lease (from %s, %s)",
				b.Key, b.ReceivedAt, a.ID, a.StartedAt, endOf(a))
		}
		byTask[b.Task] = append(byTask[b.Task], b)
	}
	for task, bs := range byTask {
		sort.Slice(bs, func(i, j int) bool { return bs[i].ReceivedAt.Before(bs[j].ReceivedAt) })
		for i := 1; i < len(bs); i++ {
			prev, cur := c.attempts[bs[i-1].Attempt], c.attempts[bs[i].Attempt]
			if cur.Number < prev.Number && bs[i].ReceivedAt.After(bs[i-1].ReceivedAt) {
				c.violation(&c.v.Overlapping, "interleaved attempts", "task %s: attempt %d wrote after attempt %d",
					task, cur.Number, prev.Number)
			}
		}
	}
}

func endOf(a attemptRow) string {
	if a.FinishedAt == nil {
		return "not ended"
	}
	return "ended " + a.FinishedAt.String()
}

// record is the part of a result record natural keys are made of.
type record struct {
	Kind  string `json:"kind"`
	Asset *struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"asset"`
	ExternalID string `json:"external_id"`
	Title      string `json:"title"`
}

// checkIngest: the assets, threats and detections are exactly the natural
// keys of the accepted batches — each ingested once, none lost.
func (c *checker) checkIngest(w *Workload) {
	c.t.Helper()
	type assetKey struct{ typ, value string }
	type threatKey struct {
		asset assetKey
		id    string
	}
	type detectionKey struct {
		threat threatKey
		job    uuid.UUID
	}
	assets, threats, detections := map[assetKey]bool{}, map[threatKey]bool{}, map[detectionKey]bool{}
	for _, b := range c.batches {
		var records []record
		require.NoError(c.t, json.Unmarshal(b.Payload, &records))
		for _, r := range records {
			if r.Asset == nil {
				continue
			}
			a := assetKey{r.Asset.Type, store.NormalizeAssetValue(r.Asset.Type, r.Asset.Value)}
			assets[a] = true
			if r.Kind != "threat" {
				continue
			}
			th := threatKey{a, r.ExternalID}
			if th.id == "" {
				th.id = "title:" + r.Title
			}
			threats[th] = true
			if b.ScanJob != nil {
				detections[detectionKey{th, *b.ScanJob}] = true
			}
		}
	}
	var got [3]int
	require.NoError(c.t, w.g.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM assets), (SELECT count(*) FROM threats), (SELECT count(*) FROM threat_detections)`,
	).Scan(&got[0], &got[1], &got[2]))
	for i, want := range []int{len(assets), len(threats), len(detections)} {
		table := [...]string{"assets", "threats", "threat_detections"}[i]
		switch {
		case got[i] > want:
			c.violation(&c.v.Duplicated, "duplicate rows", "%s has %d rows for %d natural keys", table, got[i], want)
		case got[i] < want:
			c.violation(&c.v.Lost, "rows not ingested", "%s has %d rows for %d natural keys", table, got[i], want)
		}
	}
}

// checkAcknowledged: whatever the gateway acknowledged is in the database.
func (c *checker) checkAcknowledged() {
	c.t.Helper()
	stored := map[[2]string]bool{}
	for _, b := range c.batches {
		stored[[2]string{b.Attempt.String(), b.Key}] = b.Status == "persisted"
	}
	// A poll tried more than once under its key may have had its tokens
	// replaced by another try's replay (answered or not).
	type pollKey struct {
		client int
		key    string
	}
	tries := map[pollKey]int{}
	for _, call := range c.calls {
		if call.Op == OpLease && call.Key != "" {
			tries[pollKey{call.Client, call.Key}]++
		}
	}
	for _, call := range c.calls {
		for _, it := range call.Items {
			if it.Result != ResOK && it.Result != ResReplayed {
				continue
			}
			a, known := c.attempts[it.Attempt]
			switch call.Op {
			case OpLease:
				hash := sha256.Sum256([]byte(it.Token))
				replaced := tries[pollKey{call.Client, call.Key}] > 1
				if !known || a.Task != it.Task || (!bytes.Equal(a.TokenHash, hash[:]) && !replaced) {
					c.violation(&c.v.Lost, "phantom lease", "lease of attempt %s answered by %s is not in the database", it.Attempt, call.Replica)
				}
			case OpResult:
				if !stored[[2]string{it.Attempt.String(), it.Key}] {
					c.violation(&c.v.Lost, "lost batch", "batch %s acknowledged by %s is not stored", it.Key, call.Replica)
				}
			case OpComplete, OpCompleteMany:
				if !known || a.Status != it.Outcome {
					c.violation(&c.v.Lost, "lost completion", "completion %s of attempt %s acknowledged by %s, but the attempt is %s",
						it.Outcome, it.Attempt, call.Replica, a.Status)
				}
			}
		}
	}
}

// checkClock: every lease expiry a replica answered is the database's now()
// of a transaction the call itself ran (granted at the attempt's start,
// renewed during the call) plus the task's lease duration — whatever the
// replica's own clock says.
func (c *checker) checkClock() {
	c.t.Helper()
	for _, call := range c.calls {
		for _, it := range call.Items {
			a, known := c.attempts[it.Attempt]
			if it.Result != ResOK || it.ExpiresAt.IsZero() || !known {
				continue
			}
			d := time.Duration(a.LeaseSeconds) * time.Second
			from := a.StartedAt
			if call.Op == OpHeartbeat || call.Op == OpHeartbeatAll {
				from = call.InvokeWall
			}
			decided := it.ExpiresAt.Add(-d)
			if decided.Before(from.Add(-clockTolerance)) || decided.After(call.ReturnWall.Add(clockTolerance)) ||
				it.TTL <= 0 || it.TTL > (d+clockTolerance).Seconds() {
				c.violation(&c.v.ClockInconsistent, "lease expiry off the database clock",
					"%s by %s: lease of attempt %s expires %s (ttl %.1fs), not within [%s, %s] + %s",
					call.Op, call.Replica, it.Attempt, it.ExpiresAt, it.TTL, from, call.ReturnWall, d)
			}
		}
	}
}

// checkLinearizable checks each task's history against the lease model.
func (c *checker) checkLinearizable() {
	c.t.Helper()
	attemptTask := make(map[uuid.UUID]uuid.UUID, len(c.attempts))
	for id, a := range c.attempts {
		attemptTask[id] = a.Task
	}
	model := leaseModel.ToModel()
	ops := operations(c.calls, attemptTask)
	res, info := porcupine.CheckOperationsVerbose(model, ops, 5*time.Minute)
	if res == porcupine.Ok {
		return
	}
	bad := 0
	for _, part := range model.Partition(ops) {
		if porcupine.CheckOperationsTimeout(model, part, time.Minute) != porcupine.Ok {
			bad++
		}
	}
	c.v.NonLinearizable = max(bad, 1)
	f, err := os.CreateTemp("", "faults-history-*.html")
	require.NoError(c.t, err)
	require.NoError(c.t, f.Close())
	require.NoError(c.t, porcupine.VisualizePath(model, info, f.Name()))
	c.findings = append(c.findings, fmt.Sprintf("history of %d task(s) is not linearizable (%s); visualization: %s",
		c.v.NonLinearizable, res, f.Name()))
}

// Fault is a kind of fault a scenario injected and how many times.
type Fault struct {
	Kind  string
	Count int
}

// Summarize logs the scenario's one summary line and fails it on any
// violation.
func Summarize(t *testing.T, v Verdict, faults ...Fault) {
	t.Helper()
	total, kinds := 0, make([]string, len(faults))
	for i, f := range faults {
		total += f.Count
		kinds[i] = fmt.Sprintf("%s=%d", f.Kind, f.Count)
	}
	t.Logf("faults: tasks=%d calls=%d faults=%d (%s) unknown=%d lost=%d duplicated=%d stale_accepted=%d "+
		"overlapping=%d clock_inconsistent=%d nonlinearizable=%d",
		v.Tasks, v.Calls, total, strings.Join(kinds, " "), v.Unknown, v.Lost, v.Duplicated, v.StaleAccepted,
		v.Overlapping, v.ClockInconsistent, v.NonLinearizable)
	require.True(t, v.clean(), "the checker found violations (see above)")
}
