package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestRandomOperationSequences runs a seeded random sequence of worker and
// operator operations — some of them racing each other from goroutines — and
// after every operation reads back all tasks and attempts to check that
//
//   - every task state change is a path through store.TaskTransitions that
//     uses only the events the operation's verbs can cause, and no longer
//     than the number of verbs that ran (one for a plain operation);
//   - every attempt status change is allowed by store.AttemptTransitionAllowed,
//     new attempts start leased, and attempts never disappear;
//   - a task holds an active attempt exactly when it is leased, running or
//     cancelling, never two (also the unique index's job), and the attempt's
//     status agrees with the task's state;
//   - no worker holds more active attempts than its capacity;
//   - 0 <= attempt_count <= max_attempts;
//   - fenced calls succeed exactly when their lease is live and theirs, and
//     otherwise fail with the right error (or replay a finished completion).
//
// The operations are chosen by a seeded PRNG, so a seed replays the same
// choices; the interleaving inside the racing operations is up to the
// scheduler. STORE_FUZZ_SEED replays a seed, STORE_FUZZ_OPS changes the
// length, and STORE_FUZZ_RUNS=n explores n consecutive seeds in parallel.
func TestRandomOperationSequences(t *testing.T) {
	t.Parallel()
	envInt := func(name string, def uint64) uint64 {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, name)
		return n
	}
	seed, nOps, runs := envInt("STORE_FUZZ_SEED", 20260501), int(envInt("STORE_FUZZ_OPS", 300)), envInt("STORE_FUZZ_RUNS", 1)
	if runs == 1 {
		runRandomOperations(t, seed, nOps)
		return
	}
	for i := range runs {
		t.Run(strconv.FormatUint(seed+i, 10), func(t *testing.T) {
			t.Parallel()
			runRandomOperations(t, seed+i, nOps)
		})
	}
}

func runRandomOperations(t *testing.T, seed uint64, nOps int) {
	t.Logf("seed %d (replay with STORE_FUZZ_SEED=%d), %d operations", seed, seed, nOps)
	w := newFuzzWorld(t, seed)

	type op struct {
		name   string
		weight int
		run    func() fuzzEffect
	}
	ops := []op{
		{"acquire", 14, w.opAcquire},
		{"heartbeat", 8, func() fuzzEffect { return w.opRenew(false) }},
		{"start", 6, func() fuzzEffect { return w.opRenew(true) }},
		{"complete", 24, w.opComplete},
		{"cancel", 5, w.opCancel},
		{"retry", 5, w.opRetry},
		{"expire_and_sweep", 7, w.opExpireAndSweep},
		{"make_due", 6, w.opMakeDue},
		{"unassign", 3, w.opUnassign},
		{"assign", 7, w.opAssign},
		{"toggle_worker", 5, w.opToggleWorker},
		{"execution_deadline", 2, w.opExecutionDeadline},
		{"create_task", 4, w.opCreateTask},
		{"concurrent_acquire", 6, w.opConcurrentAcquire},
		{"chaos", 6, w.opChaos},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	counts := map[string]int{}
	for step := range nOps {
		n := w.rng.IntN(total)
		var chosen op
		for _, o := range ops {
			if n < o.weight {
				chosen = o
				break
			}
			n -= o.weight
		}
		w.step, w.op = step, chosen.name
		effect := chosen.run()
		counts[chosen.name]++
		w.check(effect)
	}
	t.Logf("operations: %v", counts)

	// Drain: every lease runs out and is swept; nothing may stay active.
	exec(t, w.b.pool, `UPDATE worker_task_attempts SET lease_expires_at = now() - interval '1 second' WHERE status IN ('leased', 'running')`)
	w.step, w.op = nOps, "final_sweep"
	sweep(t, w.s)
	w.check(fuzzEffect{events: []store.TaskEvent{store.EventRetry, store.EventFailTerminal, store.EventCancelDone}, maxEdges: 1})
	require.Zero(t, countAttempts(t, w.b.pool, `status IN ('leased', 'running')`))
	states := map[store.TaskState]int{}
	for _, task := range w.prev.tasks {
		states[task.state]++
	}
	t.Logf("final task states: %v; attempts: %d", states, len(w.prev.attempts))
	t.Logf("observed task state changes: %v", w.edges)

	var indexDef string
	require.NoError(t, w.b.pool.QueryRow(t.Context(),
		`SELECT indexdef FROM pg_indexes WHERE tablename = 'worker_task_attempts' AND indexname = 'worker_task_attempts_one_active'`).Scan(&indexDef))
	require.Contains(t, indexDef, "CREATE UNIQUE INDEX")
	require.Contains(t, indexDef, "(task_id)")
	require.Contains(t, indexDef, "'leased'")
	require.Contains(t, indexDef, "'running'")
}

const fuzzCapacity = 2

var (
	completionEvents = []store.TaskEvent{store.EventSucceed, store.EventRetry, store.EventFailTerminal, store.EventCancelDone, store.EventRelease}
	sweepEvents      = []store.TaskEvent{store.EventRetry, store.EventFailTerminal, store.EventCancelDone}
	releaseEvents    = []store.TaskEvent{store.EventRelease, store.EventCancelDone}
	cancelEvents     = []store.TaskEvent{store.EventCancelQueued, store.EventCancelActive}
)

// fuzzEffect is what an operation may do to tasks: take edges for these
// events, at most maxEdges per task, and only on the listed tasks (nil: any).
type fuzzEffect struct {
	events   []store.TaskEvent
	maxEdges int
	only     []uuid.UUID
}

type fuzzAttempt struct {
	id     uuid.UUID
	task   int
	worker int
	token  string
}

type taskObs struct {
	state                     store.TaskState
	attemptCount, maxAttempts int
}

type attemptObs struct {
	task   uuid.UUID
	worker uuid.UUID
	status store.AttemptStatus
}

type observation struct {
	tasks    map[uuid.UUID]taskObs
	attempts map[uuid.UUID]attemptObs
}

type fuzzWorld struct {
	t    *testing.T
	s    *store.Store
	b    *testBundle
	rng  *rand.Rand
	seed uint64

	orgs     []uuid.UUID
	workers  []uuid.UUID
	assigned map[[2]int]bool // (org, worker)
	enabled  []bool
	tasks    []uuid.UUID
	taskOrg  []int
	attempts []fuzzAttempt
	known    map[uuid.UUID]int

	step  int
	op    string
	prev  observation
	edges map[string]int // observed task state changes, for the log
}

func newFuzzWorld(t *testing.T, seed uint64) *fuzzWorld {
	s, b := setupStore(t)
	w := &fuzzWorld{
		t: t, s: s, b: b, seed: seed,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		assigned: map[[2]int]bool{},
		known:    map[uuid.UUID]int{},
		edges:    map[string]int{},
	}
	w.orgs = []uuid.UUID{b.org.ID, createOrg(t, s, "org-b").ID}
	_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{MaxConcurrentTasks: new(fuzzCapacity)}, onlineWindow)
	require.NoError(t, err)
	w.workers = []uuid.UUID{b.worker.ID}
	for range 2 {
		w.workers = append(w.workers, createWorker(t, s, b.pool, workerOpts{Capacity: fuzzCapacity}).ID)
	}
	for oi, org := range w.orgs {
		for wi, worker := range w.workers {
			assign(t, s, org, worker)
			w.assigned[[2]int{oi, wi}] = true
		}
	}
	w.enabled = []bool{true, true, true}
	for i := range 8 {
		w.createTask(i % 2)
	}
	w.prev = w.observe()
	return w
}

func (w *fuzzWorld) where() string {
	return fmt.Sprintf("seed %d step %d op %s", w.seed, w.step, w.op)
}

func (w *fuzzWorld) createTask(org int) {
	p := store.CreateTaskParams{MaxAttempts: 1 + len(w.tasks)%3, Priority: w.rng.IntN(2)}
	if len(w.tasks)%2 == 0 {
		// Backoff under a millisecond: due again at once.
		p.RetryBaseSeconds, p.RetryMaxSeconds = 0.0005, 0.001
	}
	task := createTask(w.t, w.s, w.orgs[org], p)
	w.tasks = append(w.tasks, task.ID)
	w.taskOrg = append(w.taskOrg, org)
}

func (w *fuzzWorld) taskIndex(id uuid.UUID) int { return slices.Index(w.tasks, id) }

// learn records new leases in a deterministic order.
func (w *fuzzWorld) learn(worker int, leases []store.Lease) {
	slices.SortFunc(leases, func(a, b store.Lease) int { return w.taskIndex(a.Task.ID) - w.taskIndex(b.Task.ID) })
	for _, l := range leases {
		if i, ok := w.known[l.AttemptID]; ok {
			w.attempts[i].token = l.LeaseToken // a replay replaced the token
			continue
		}
		w.known[l.AttemptID] = len(w.attempts)
		w.attempts = append(w.attempts, fuzzAttempt{id: l.AttemptID, task: w.taskIndex(l.Task.ID), worker: worker, token: l.LeaseToken})
	}
}

// pickAttempt prefers attempts that were active at the last observation.
func (w *fuzzWorld) pickAttempt() (fuzzAttempt, bool) {
	if len(w.attempts) == 0 {
		return fuzzAttempt{}, false
	}
	var active []fuzzAttempt
	for _, a := range w.attempts {
		if st := w.prev.attempts[a.id].status; st == store.AttemptLeased || st == store.AttemptRunning {
			active = append(active, a)
		}
	}
	if len(active) > 0 && w.rng.IntN(5) > 0 {
		return active[w.rng.IntN(len(active))], true
	}
	return w.attempts[w.rng.IntN(len(w.attempts))], true
}

type credVariant int

const (
	credOwn credVariant = iota
	credWrongToken
	credOtherWorker
)

// creds returns the reference a caller sends: the real one mostly, else a
// stale token or another worker's certificate.
func (w *fuzzWorld) creds(a fuzzAttempt) (store.AttemptRef, credVariant) {
	ref := store.AttemptRef{WorkerID: w.workers[a.worker], AttemptID: a.id, LeaseToken: a.token}
	switch n := w.rng.IntN(10); {
	case n < 8:
		return ref, credOwn
	case n < 9:
		if len(w.attempts) > 1 && w.rng.IntN(2) == 0 {
			other := w.attempts[w.rng.IntN(len(w.attempts))]
			if other.id != a.id {
				ref.LeaseToken = other.token
				return ref, credWrongToken
			}
		}
		ref.LeaseToken = "stale-" + a.token[:8]
		return ref, credWrongToken
	default:
		ref.WorkerID = w.workers[(a.worker+1+w.rng.IntN(len(w.workers)-1))%len(w.workers)]
		return ref, credOtherWorker
	}
}

// attemptFacts reads what decides a fenced call's answer.
type attemptFacts struct {
	live        bool
	status      store.AttemptStatus
	resultState string
}

func (w *fuzzWorld) facts(id uuid.UUID) attemptFacts {
	var f attemptFacts
	var status string
	require.NoError(w.t, w.b.pool.QueryRow(w.t.Context(), `
		SELECT status IN ('leased', 'running') AND lease_expires_at > now(), status, result_task_state
		FROM worker_task_attempts WHERE id = $1`, id).Scan(&f.live, &status, &f.resultState))
	f.status = store.AttemptStatus(status)
	return f
}

func (w *fuzzWorld) opAcquire() fuzzEffect {
	wi := w.rng.IntN(len(w.workers))
	key := []string{"", "", "poll-a", "poll-b"}[w.rng.IntN(4)]
	res, err := w.s.AcquireLeases(w.t.Context(), store.AcquireParams{WorkerID: w.workers[wi], MaxTasks: 1 + w.rng.IntN(2), IdempotencyKey: key})
	require.NoError(w.t, err, w.where())
	require.Equal(w.t, !w.enabled[wi], res.Disabled, w.where())
	if res.Replayed {
		for _, l := range res.Leases {
			require.Contains(w.t, w.known, l.AttemptID, "%s: a replay returns only leases handed out before", w.where())
		}
	}
	w.learn(wi, res.Leases)
	return fuzzEffect{events: []store.TaskEvent{store.EventLease}, maxEdges: 1}
}

func (w *fuzzWorld) opRenew(start bool) fuzzEffect {
	a, ok := w.pickAttempt()
	if !ok {
		return w.opAcquire()
	}
	ref, variant := w.creds(a)
	before := w.facts(a.id)
	var (
		st  store.LeaseStatus
		err error
	)
	if start {
		st, err = w.s.StartAttempt(w.t.Context(), ref)
	} else {
		st, err = w.s.HeartbeatAttempt(w.t.Context(), ref)
	}
	switch {
	case variant == credOtherWorker:
		require.ErrorIs(w.t, err, store.ErrNotFound, w.where())
	case variant == credWrongToken || !before.live:
		require.ErrorIs(w.t, err, store.ErrLeaseLost, w.where())
	default:
		require.NoError(w.t, err, w.where())
		require.Contains(w.t, []store.LeaseState{store.LeaseActive, store.LeaseCancelRequested}, st.State, w.where())
	}
	return fuzzEffect{events: []store.TaskEvent{store.EventStart}, maxEdges: 1, only: []uuid.UUID{w.tasks[a.task]}}
}

func (w *fuzzWorld) randomCompletion(ref store.AttemptRef) store.CompleteParams {
	p := store.CompleteParams{AttemptRef: ref}
	switch w.rng.IntN(5) {
	case 0:
		p.Outcome = store.AttemptSucceeded
	case 1, 2, 3:
		p.Outcome, p.ErrorCode, p.ErrorMessage, p.Retryable = store.AttemptFailed, "boom", "random failure", w.rng.IntN(2) == 0
	default:
		p.Outcome = store.AttemptCancelled
	}
	return p
}

func (w *fuzzWorld) opComplete() fuzzEffect {
	a, ok := w.pickAttempt()
	if !ok {
		return w.opAcquire()
	}
	ref, variant := w.creds(a)
	p := w.randomCompletion(ref)
	before := w.facts(a.id)
	var (
		res store.CompleteResult
		err error
	)
	if w.rng.IntN(2) == 0 {
		res, err = w.s.CompleteAttempt(w.t.Context(), p)
	} else { // the set-based form group commit uses must answer the same
		out := w.s.CompleteAttempts(w.t.Context(), []store.CompleteParams{p})
		res, err = out[0].Result, out[0].Err
	}
	switch {
	case variant == credOtherWorker:
		require.ErrorIs(w.t, err, store.ErrNotFound, w.where())
	case variant == credWrongToken:
		require.ErrorIs(w.t, err, store.ErrLeaseLost, w.where())
	case before.live:
		require.NoError(w.t, err, w.where())
		require.False(w.t, res.Replayed, w.where())
		require.Equal(w.t, p.Outcome, w.facts(a.id).status, w.where())
	case before.resultState != "" && before.status == p.Outcome:
		require.NoError(w.t, err, w.where())
		require.True(w.t, res.Replayed, w.where())
		require.Equal(w.t, store.TaskState(before.resultState), res.TaskState, w.where())
	case before.resultState != "":
		require.ErrorIs(w.t, err, store.ErrAttemptFinished, w.where())
	default: // expired, superseded or swept: the worker never finished it
		require.ErrorIs(w.t, err, store.ErrLeaseLost, w.where())
	}
	return fuzzEffect{events: completionEvents, maxEdges: 1, only: []uuid.UUID{w.tasks[a.task]}}
}

func (w *fuzzWorld) opCancel() fuzzEffect {
	id := w.tasks[w.rng.IntN(len(w.tasks))]
	before := w.prev.tasks[id].state
	task, err := w.s.CancelTask(w.t.Context(), store.EveryOrganization(), id)
	if before == store.TaskCompleted || before == store.TaskFailedTerminal {
		require.ErrorIs(w.t, err, store.ErrTaskFinished, w.where())
	} else {
		require.NoError(w.t, err, w.where())
		want := map[store.TaskState]store.TaskState{
			store.TaskPending: store.TaskCancelled, store.TaskRetryWait: store.TaskCancelled,
			store.TaskLeased: store.TaskCancelling, store.TaskRunning: store.TaskCancelling,
			store.TaskCancelling: store.TaskCancelling, store.TaskCancelled: store.TaskCancelled,
		}[before]
		require.Equal(w.t, want, task.State, w.where())
	}
	return fuzzEffect{events: cancelEvents, maxEdges: 1, only: []uuid.UUID{id}}
}

func (w *fuzzWorld) opRetry() fuzzEffect {
	// Prefer tasks that can be redriven, so the pool keeps moving.
	var candidates []uuid.UUID
	for _, id := range w.tasks {
		if st := w.prev.tasks[id].state; st == store.TaskFailedTerminal || st == store.TaskCancelled {
			candidates = append(candidates, id)
		}
	}
	id := w.tasks[w.rng.IntN(len(w.tasks))]
	if len(candidates) > 0 && w.rng.IntN(4) > 0 {
		id = candidates[w.rng.IntN(len(candidates))]
	}
	before := w.prev.tasks[id].state
	task, err := w.s.RetryTask(w.t.Context(), store.EveryOrganization(), id)
	if before == store.TaskFailedTerminal || before == store.TaskCancelled {
		require.NoError(w.t, err, w.where())
		require.Equal(w.t, store.TaskPending, task.State, w.where())
		require.Zero(w.t, task.AttemptCount, w.where())
	} else {
		require.ErrorIs(w.t, err, store.ErrTaskNotRetryable, w.where())
	}
	return fuzzEffect{events: []store.TaskEvent{store.EventRedrive}, maxEdges: 1, only: []uuid.UUID{id}}
}

func (w *fuzzWorld) opExpireAndSweep() fuzzEffect {
	a, ok := w.pickAttempt()
	if ok {
		exec(w.t, w.b.pool, `UPDATE worker_task_attempts SET lease_expires_at = now() - interval '1 second'
			WHERE id = $1 AND status IN ('leased', 'running')`, a.id)
	}
	_, err := w.s.SweepExpired(w.t.Context(), 100)
	require.NoError(w.t, err, w.where())
	return fuzzEffect{events: sweepEvents, maxEdges: 1}
}

func (w *fuzzWorld) opMakeDue() fuzzEffect {
	editTasks(w.t, w.b.pool, `UPDATE worker_tasks SET available_at = now() - interval '1 second' WHERE state IN ('pending', 'retry_wait')`)
	return fuzzEffect{maxEdges: 0}
}

func (w *fuzzWorld) opUnassign() fuzzEffect {
	oi, wi := w.rng.IntN(len(w.orgs)), w.rng.IntN(len(w.workers))
	cancelActive := w.rng.IntN(2) == 0
	_, err := w.s.UnassignWorker(w.t.Context(), store.EveryOrganization(), w.orgs[oi], w.workers[wi], cancelActive, "fuzz")
	require.NoError(w.t, err, w.where())
	w.assigned[[2]int{oi, wi}] = false
	if cancelActive {
		require.Zero(w.t, countAttempts(w.t, w.b.pool, `worker_id = $1 AND organization_id = $2 AND status IN ('leased', 'running')`,
			w.workers[wi], w.orgs[oi]), w.where())
	}
	return fuzzEffect{events: releaseEvents, maxEdges: 1}
}

func (w *fuzzWorld) opAssign() fuzzEffect {
	oi, wi := w.rng.IntN(len(w.orgs)), w.rng.IntN(len(w.workers))
	// Prefer restoring a removed assignment, so workers keep serving.
	var removed [][2]int
	for o := range w.orgs {
		for k := range w.workers {
			if !w.assigned[[2]int{o, k}] {
				removed = append(removed, [2]int{o, k})
			}
		}
	}
	if len(removed) > 0 && w.rng.IntN(4) > 0 {
		pair := removed[w.rng.IntN(len(removed))]
		oi, wi = pair[0], pair[1]
	}
	_, err := w.s.AssignWorker(w.t.Context(), store.EveryOrganization(), w.orgs[oi], w.workers[wi])
	require.NoError(w.t, err, w.where())
	w.assigned[[2]int{oi, wi}] = true
	return fuzzEffect{maxEdges: 0}
}

func (w *fuzzWorld) opToggleWorker() fuzzEffect {
	wi := w.rng.IntN(len(w.workers))
	// Prefer re-enabling a disabled worker, so workers keep serving.
	for i, on := range w.enabled {
		if !on && w.rng.IntN(3) > 0 {
			wi = i
			break
		}
	}
	enable := !w.enabled[wi]
	cancelActive := w.rng.IntN(2) == 0
	_, err := w.s.UpdateWorker(w.t.Context(), store.EveryOrganization(), w.workers[wi], store.UpdateWorkerParams{Enabled: &enable, CancelActive: cancelActive}, onlineWindow)
	require.NoError(w.t, err, w.where())
	w.enabled[wi] = enable
	if !enable && cancelActive {
		require.Zero(w.t, countAttempts(w.t, w.b.pool, `worker_id = $1 AND status IN ('leased', 'running')`, w.workers[wi]), w.where())
		return fuzzEffect{events: releaseEvents, maxEdges: 1}
	}
	return fuzzEffect{maxEdges: 0}
}

// opExecutionDeadline lets a task's execution deadline pass (its live lease,
// which can never outlast the deadline, ends with it) and sweeps.
func (w *fuzzWorld) opExecutionDeadline() fuzzEffect {
	id := w.tasks[w.rng.IntN(len(w.tasks))]
	editTasks(w.t, w.b.pool, `UPDATE worker_tasks SET execution_deadline_at = now() - interval '1 second' WHERE id = $1`, id)
	exec(w.t, w.b.pool, `UPDATE worker_task_attempts SET lease_expires_at = least(lease_expires_at, now() - interval '1 second')
		WHERE task_id = $1 AND status IN ('leased', 'running')`, id)
	_, err := w.s.SweepExpired(w.t.Context(), 100)
	require.NoError(w.t, err, w.where())
	return fuzzEffect{events: sweepEvents, maxEdges: 1}
}

func (w *fuzzWorld) opCreateTask() fuzzEffect {
	if len(w.tasks) < 24 {
		w.createTask(w.rng.IntN(len(w.orgs)))
	}
	return fuzzEffect{maxEdges: 0}
}

// allowed reports whether err is nil or one of the expected refusals.
func allowed(err error, expected ...error) bool {
	if err == nil {
		return true
	}
	for _, e := range expected {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (w *fuzzWorld) opConcurrentAcquire() fuzzEffect {
	maxTasks := make([]int, len(w.workers))
	for i := range maxTasks {
		maxTasks[i] = 1 + w.rng.IntN(2)
	}
	results := make([]store.AcquireResult, len(w.workers))
	errs := make([]error, len(w.workers))
	var wg sync.WaitGroup
	for i, worker := range w.workers {
		wg.Go(func() {
			results[i], errs[i] = w.s.AcquireLeases(w.t.Context(), store.AcquireParams{WorkerID: worker, MaxTasks: maxTasks[i]})
		})
	}
	wg.Wait()
	for i := range w.workers {
		require.NoError(w.t, errs[i], w.where())
		w.learn(i, results[i].Leases)
	}
	return fuzzEffect{events: []store.TaskEvent{store.EventLease}, maxEdges: 1}
}

// opChaos races a completion, a cancel, a heartbeat, another worker's poll
// and (sometimes) an unassignment, all around one active attempt.
func (w *fuzzWorld) opChaos() fuzzEffect {
	var active []fuzzAttempt
	for _, a := range w.attempts {
		if st := w.prev.attempts[a.id].status; st == store.AttemptLeased || st == store.AttemptRunning {
			active = append(active, a)
		}
	}
	if len(active) == 0 {
		return w.opConcurrentAcquire()
	}
	a := active[w.rng.IntN(len(active))]
	ref := store.AttemptRef{WorkerID: w.workers[a.worker], AttemptID: a.id, LeaseToken: a.token}
	completion := w.randomCompletion(ref)
	other := (a.worker + 1 + w.rng.IntN(len(w.workers)-1)) % len(w.workers)
	unassign := w.rng.IntN(3) == 0
	org := w.taskOrg[a.task]

	var (
		wg                               sync.WaitGroup
		completeErr, cancelErr, renewErr error
		acquireErr, unassignErr          error
		acquired                         store.AcquireResult
		events                           = []store.TaskEvent{store.EventStart, store.EventLease}
		verbs                            = 4
		taskID                           = w.tasks[a.task]
	)
	events = append(events, completionEvents...)
	events = append(events, cancelEvents...)
	wg.Go(func() { _, completeErr = w.s.CompleteAttempt(w.t.Context(), completion) })
	wg.Go(func() { _, cancelErr = w.s.CancelTask(w.t.Context(), store.EveryOrganization(), taskID) })
	wg.Go(func() { _, renewErr = w.s.HeartbeatAttempt(w.t.Context(), ref) })
	wg.Go(func() {
		acquired, acquireErr = w.s.AcquireLeases(w.t.Context(), store.AcquireParams{WorkerID: w.workers[other], MaxTasks: 2})
	})
	if unassign {
		verbs++
		wg.Go(func() {
			_, unassignErr = w.s.UnassignWorker(w.t.Context(), store.EveryOrganization(), w.orgs[org], w.workers[a.worker], true, "chaos")
		})
	}
	wg.Wait()
	require.True(w.t, allowed(completeErr, store.ErrLeaseLost), "%s: complete: %v", w.where(), completeErr)
	require.True(w.t, allowed(cancelErr, store.ErrTaskFinished), "%s: cancel: %v", w.where(), cancelErr)
	require.True(w.t, allowed(renewErr, store.ErrLeaseLost), "%s: heartbeat: %v", w.where(), renewErr)
	require.NoError(w.t, acquireErr, "%s: acquire", w.where())
	require.NoError(w.t, unassignErr, "%s: unassign", w.where())
	w.learn(other, acquired.Leases)
	if unassign {
		w.assigned[[2]int{org, a.worker}] = false
	}
	return fuzzEffect{events: events, maxEdges: verbs}
}

func (w *fuzzWorld) observe() observation {
	t := w.t
	o := observation{tasks: map[uuid.UUID]taskObs{}, attempts: map[uuid.UUID]attemptObs{}}
	rows, err := w.b.pool.Query(t.Context(), `SELECT id, state, attempt_count, max_attempts FROM worker_tasks`)
	require.NoError(t, err)
	for rows.Next() {
		var (
			id    uuid.UUID
			state string
			obs   taskObs
		)
		require.NoError(t, rows.Scan(&id, &state, &obs.attemptCount, &obs.maxAttempts))
		obs.state = store.TaskState(state)
		o.tasks[id] = obs
	}
	require.NoError(t, rows.Err())
	rows, err = w.b.pool.Query(t.Context(), `SELECT id, task_id, worker_id, status FROM worker_task_attempts`)
	require.NoError(t, err)
	for rows.Next() {
		var (
			id     uuid.UUID
			status string
			obs    attemptObs
		)
		require.NoError(t, rows.Scan(&id, &obs.task, &obs.worker, &status))
		obs.status = store.AttemptStatus(status)
		o.attempts[id] = obs
	}
	require.NoError(t, rows.Err())
	return o
}

// reachable reports whether to can be reached from from in at most k edges
// of the table, using only the given events.
func reachable(from, to store.TaskState, events []store.TaskEvent, k int) bool {
	frontier := []store.TaskState{from}
	for range k {
		var next []store.TaskState
		for _, s := range frontier {
			for _, e := range events {
				tr := store.TaskTransitions[e]
				if slices.Contains(tr.From, s) {
					if tr.To == to {
						return true
					}
					next = append(next, tr.To)
				}
			}
		}
		frontier = next
	}
	return false
}

func (w *fuzzWorld) check(effect fuzzEffect) {
	t := w.t
	cur := w.observe()
	where := w.where()

	for id, tc := range cur.tasks {
		tp, seen := w.prev.tasks[id]
		switch {
		case !seen:
			require.Equal(t, store.TaskPending, tc.state, "%s: a new task starts pending", where)
		case tp.state != tc.state:
			w.edges[string(tp.state)+"→"+string(tc.state)]++
			require.True(t, effect.only == nil || slices.Contains(effect.only, id),
				"%s: task %d changed %s → %s but the operation did not touch it", where, w.taskIndex(id), tp.state, tc.state)
			if effect.maxEdges == 1 {
				require.True(t, store.TaskTransitionAllowed(tp.state, tc.state),
					"%s: task %d moved %s → %s, which the table does not allow", where, w.taskIndex(id), tp.state, tc.state)
			}
			require.True(t, reachable(tp.state, tc.state, effect.events, effect.maxEdges),
				"%s: task %d moved %s → %s, not a path of ≤ %d edges through %v", where, w.taskIndex(id), tp.state, tc.state,
				effect.maxEdges, effect.events)
		}
		require.GreaterOrEqual(t, tc.attemptCount, 0, where)
		require.LessOrEqual(t, tc.attemptCount, tc.maxAttempts, "%s: task %d", where, w.taskIndex(id))
	}

	activeByTask := map[uuid.UUID]int{}
	activeByWorker := map[uuid.UUID]int{}
	for id, ac := range cur.attempts {
		ap, seen := w.prev.attempts[id]
		switch {
		case !seen:
			require.True(t, ac.status == store.AttemptLeased || (effect.maxEdges > 1 && store.AttemptTransitionAllowed(store.AttemptLeased, ac.status)),
				"%s: new attempt is %s", where, ac.status)
		case ap.status != ac.status:
			require.True(t, store.AttemptTransitionAllowed(ap.status, ac.status), "%s: attempt moved %s → %s", where, ap.status, ac.status)
		}
		if ac.status == store.AttemptLeased || ac.status == store.AttemptRunning {
			activeByTask[ac.task]++
			activeByWorker[ac.worker]++
			state := cur.tasks[ac.task].state
			want := []store.TaskState{store.TaskLeased, store.TaskCancelling}
			if ac.status == store.AttemptRunning {
				want = []store.TaskState{store.TaskRunning, store.TaskCancelling}
			}
			require.Contains(t, want, state, "%s: a %s attempt's task is %s", where, ac.status, state)
		}
	}
	for id := range w.prev.attempts {
		require.Contains(t, cur.attempts, id, "%s: an attempt disappeared", where)
	}
	for id, tc := range cur.tasks {
		want := 0
		if tc.state == store.TaskLeased || tc.state == store.TaskRunning || tc.state == store.TaskCancelling {
			want = 1
		}
		require.Equal(t, want, activeByTask[id], "%s: task %d is %s with %d active attempts", where, w.taskIndex(id), tc.state, activeByTask[id])
	}
	for worker, n := range activeByWorker {
		require.LessOrEqual(t, n, fuzzCapacity, "%s: worker %s over capacity", where, worker)
	}
	requireQueueFollowsTasks(t, w.b.pool, where)
	w.prev = cur
}
