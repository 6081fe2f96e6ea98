package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store"
)

// throughputConfig is scenario 1.
type throughputConfig struct {
	tasks   int
	workers int
	batch   int
	wait    int // wait_seconds of each poll
	// completeMany completes each poll's leases in one
	// POST /v1/attempts/complete instead of one call per lease.
	completeMany bool
	// next asks each completion call for the next leases (the contract's
	// `next`), so a worker with a backlog sends one request per poll's
	// worth of tasks instead of two; it polls only when a completion
	// brings none.
	next bool
	// orgs spreads the tasks round-robin over this many organizations,
	// every worker serving all of them (0 or 1: one).
	orgs int
	// webhooks subscribes every organization to task.completed, delivered
	// to a receiver in this process (webhooks.go).
	webhooks bool
}

// tpShared is what the simulated workers of one run share.
type tpShared struct {
	n int64
	// leased counts leases received whose task has not been lost since;
	// once it reaches n every task is in some worker's hands, and a worker
	// whose poll would only wait for nothing stops polling.
	leased    atomic.Int64
	completed atomic.Int64
	start     time.Time
	end       time.Time // set by whoever completes the n-th task
	stopped   time.Time // when every worker had stopped
	done      chan struct{}
	doneOnce  sync.Once
	errors    errorTally
	maxErrors int
}

// newTPShared is the shared state of a run that drains n tasks.
func newTPShared(n int) *tpShared {
	return &tpShared{n: int64(n), done: make(chan struct{}), maxErrors: max(1000, n/10)}
}

// endTime is the last completion, or when the workers stopped if the run
// ended before every task was completed.
func (sh *tpShared) endTime() time.Time {
	if sh.end.IsZero() {
		return sh.stopped
	}
	return sh.end
}

// wall is the measured span: the workers' start to the last completion.
func (sh *tpShared) wall() time.Duration { return sh.endTime().Sub(sh.start) }

// tpWorkerStats is one simulated worker's record.
type tpWorkerStats struct {
	requests    int             // requests answered (any status): polls and completions
	leaseLat    []time.Duration // polls that returned at least one lease
	completeLat []time.Duration
	emptyPolls  int
	taskIDs     []string // every task it completed
}

// runThroughput creates the tasks in bulk, then lets the workers drain them
// and measures tasks per second from the moment the workers start to the
// last completion, and verifies in SQL that every task completed exactly
// once.
func runThroughput(ctx context.Context, s *Stack, c throughputConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "throughput", Tasks: c.tasks, Workers: c.workers, Batch: c.batch, CompleteMany: c.completeMany, Next: c.next}
	orgs := make([]uuid.UUID, max(1, c.orgs))
	for i := range orgs {
		var err error
		if orgs[i], err = s.NewOrganization(ctx, "throughput"); err != nil {
			return r, err
		}
	}
	// Capacity well above the batch: a worker never waits for its own
	// capacity, only for the gateway. (It completes its leases before it
	// polls again, so an existing worker only needs room for one batch.)
	workers, err := s.NewWorkers(ctx, "tp", c.workers, max(1000, 2*c.batch), c.batch, orgs[0])
	if err != nil {
		return r, err
	}
	for _, org := range orgs {
		defer s.ReleaseWorkers(ctx, org, workers)
	}
	for _, org := range orgs[1:] {
		if err := s.AssignWorkers(ctx, org, workers); err != nil {
			return r, err
		}
	}

	var hooks *webhookReceiver
	if c.webhooks {
		if hooks, err = startWebhookReceiver(); err != nil {
			return r, err
		}
		defer hooks.close()
		if err := hooks.subscribe(ctx, s, orgs); err != nil {
			return r, err
		}
	}

	logf("throughput: inserting %d no-op tasks in bulk over %d organizations", c.tasks, len(orgs))
	if err := insertTasks(ctx, s, orgs, c.tasks); err != nil {
		return r, err
	}
	if err := warmAll(ctx, workers); err != nil {
		return r, err
	}

	var ws *waitSampler
	sh := newTPShared(c.tasks)
	before := s.beginWindow(ctx)
	if pgWaits {
		ws = startWaitSampler(ctx, s.Pool, 20*time.Millisecond)
	}
	logf("throughput: %d workers draining, batch %d", c.workers, c.batch)
	stats := driveWorkers(ctx, "throughput", workers, c, sh, logf)
	wall := sh.wall()
	after := s.endWindow(context.WithoutCancel(ctx), nil) // the workers have stopped
	if ws != nil {
		r.PGWaits = ws.finish()
	}

	done := sh.completed.Load()
	summarizeDrain(r, stats, sh)
	s.applyUsage(r, before, after, wall, int(done))
	r.HTTPErrors, _ = sh.errors.snapshot()
	r.errorText = sh.errors.String()

	v, err := verifyTasks(context.WithoutCancel(ctx), s, orgs, c.tasks)
	if err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	r.Verification = v
	r.Verified = v.ok && r.ClientDuplicates == 0 && int(done) == c.tasks
	if hooks != nil {
		logf("throughput: waiting for the webhook deliveries of %d completions", done)
		last, all := hooks.waitFor(ctx, int(done))
		events, deliveries, mismatched := hooks.counts()
		r.WebhookEvents, r.WebhookDeliveries, r.WebhookMismatched = &events, &deliveries, &mismatched
		r.WebhookDrainSeconds = ptr(round(max(0, last.Sub(sh.endTime()).Seconds()), 2))
		r.Verified = r.Verified && all && mismatched == 0
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s after %d of %d tasks", stopReason(ctx), done, c.tasks)
	}
	return r, nil
}

// driveWorkers is the measured part of the throughput and floor scenarios,
// the same code for both: every worker runs throughputWorker until all
// sh.n tasks are completed or ctx ends, and it returns once they all
// stopped.
func driveWorkers(ctx context.Context, name string, workers []*benchWorker, c throughputConfig, sh *tpShared, logf func(string, ...any)) []tpWorkerStats {
	body := fmt.Appendf(nil, `{"max_tasks":%d,"wait_seconds":%d}`, c.batch, c.wait)
	stats := make([]tpWorkerStats, len(workers))
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	sh.start = time.Now()
	for i, w := range workers {
		wg.Go(func() { stats[i] = throughputWorker(runCtx, w, sh, body, c) })
	}
	progressDone := make(chan struct{})
	go reportProgress(runCtx, progressDone, name, sh, logf)
	select {
	case <-sh.done:
	case <-ctx.Done():
	}
	stopRun()
	wg.Wait()
	sh.stopped = time.Now()
	<-progressDone
	return stats
}

// summarizeDrain fills in what the workers measured: rates, call
// latencies, and tasks the workers saw completed more than once.
func summarizeDrain(r *Result, stats []tpWorkerStats, sh *tpShared) {
	wall := sh.wall()
	done := sh.completed.Load()
	r.WallSeconds = round(wall.Seconds(), 3)
	r.TasksPerSec = ptr(round(float64(done)/wall.Seconds(), 1))
	var leaseLat, completeLat []time.Duration
	seen := make(map[string]int, sh.n)
	for _, st := range stats {
		leaseLat = append(leaseLat, st.leaseLat...)
		completeLat = append(completeLat, st.completeLat...)
		r.EmptyPolls += st.emptyPolls
		r.Requests += st.requests
		for _, id := range st.taskIDs {
			seen[id]++
		}
	}
	r.RequestsPerSec = ptr(round(float64(r.Requests)/wall.Seconds(), 1))
	r.LeaseCalls = len(leaseLat)
	p := percentiles(leaseLat, 50, 99)
	r.LeaseP50, r.LeaseP99 = ptr(p[0]), ptr(p[1])
	p = percentiles(completeLat, 50, 99)
	r.CompleteP50, r.CompleteP99 = ptr(p[0]), ptr(p[1])
	for _, n := range seen {
		if n > 1 {
			r.ClientDuplicates++
		}
	}
}

// throughputWorker is one simulated worker: poll, complete every lease
// (asking for the next ones with c.next), repeat, until every task is
// completed or the run ends.
func throughputWorker(ctx context.Context, w *benchWorker, sh *tpShared, body []byte, c throughputConfig) tpWorkerStats {
	var st tpWorkerStats
	var held []lease // leases in hand, from a poll or a completion
	for ctx.Err() == nil {
		if len(held) == 0 {
			if sh.leased.Load() >= sh.n {
				// Every task is in someone's hands: polling again could
				// only wait for nothing. Wait for the end instead.
				select {
				case <-sh.done:
				case <-ctx.Done():
				}
				return st
			}
			t0 := time.Now()
			leases, err := w.poll(ctx, body)
			lat := time.Since(t0)
			st.requests += answered(err)
			if err != nil {
				if ctx.Err() != nil {
					return st
				}
				if sh.errors.add("lease", err) >= sh.maxErrors || !backoffAfter(ctx, err) {
					return st
				}
				continue
			}
			if len(leases) == 0 {
				st.emptyPolls++
				continue
			}
			st.leaseLat = append(st.leaseLat, lat)
			sh.leased.Add(int64(len(leases)))
			held = leases
		}
		// Ask for more only while tasks are left to lease and the run goes
		// on: leases nobody would complete would fail the verification.
		nextMax := 0
		if c.next && ctx.Err() == nil && sh.leased.Load() < sh.n {
			nextMax = c.batch
		}
		var next []lease
		if c.completeMany {
			t1 := time.Now()
			done, more, err := w.completeManyDetached(ctx, held, nextMax)
			st.requests += answered(err)
			if err != nil {
				sh.errors.add("complete", err)
			}
			st.completeLat = append(st.completeLat, time.Since(t1))
			// Tasks not completed come back when their leases expire.
			sh.leased.Add(-int64(len(held) - len(done)))
			for _, l := range done {
				st.taskIDs = append(st.taskIDs, l.Task.ID)
				if sh.completed.Add(1) == sh.n {
					sh.doneOnce.Do(func() { sh.end = time.Now(); close(sh.done) })
				}
			}
			next = more
		} else {
			for i, l := range held {
				ask := 0
				if i == len(held)-1 {
					ask = nextMax // the last completion of the lot asks for the next lot
				}
				t1 := time.Now()
				more, err := w.completeNextDetached(ctx, l, ask)
				st.requests += answered(err)
				if err != nil {
					// The task comes back when its lease expires.
					sh.leased.Add(-1)
					sh.errors.add("complete", err)
					continue
				}
				st.completeLat = append(st.completeLat, time.Since(t1))
				st.taskIDs = append(st.taskIDs, l.Task.ID)
				if sh.completed.Add(1) == sh.n {
					sh.doneOnce.Do(func() { sh.end = time.Now(); close(sh.done) })
				}
				next = more
			}
		}
		sh.leased.Add(int64(len(next)))
		held = next
	}
	return st
}

// answered is 1 when a request got an answer (any status; err is nil or
// an *httpError), 0 when it failed in transport or was cut short by the
// end of the run.
func answered(err error) int {
	if err == nil {
		return 1
	}
	if _, ok := errors.AsType[*httpError](err); ok {
		return 1
	}
	return 0
}

// reportProgress logs the completion count every 5 seconds.
func reportProgress(ctx context.Context, done chan<- struct{}, name string, sh *tpShared, logf func(string, ...any)) {
	defer close(done)
	every(ctx, 5*time.Second, func() {
		n := sh.completed.Load()
		logf("%s: %d/%d completed (%.0f tasks/s so far)", name, n, sh.n, float64(n)/time.Since(sh.start).Seconds())
	})
}

// insertTasks creates n pending no-op tasks in one INSERT … SELECT. This is
// setup, not what is measured: it sends no NOTIFY, which is why the workers
// start only once the tasks exist. ANALYZE gives the planner the table's
// real size, and CHECKPOINT starts the run without a checkpoint's worth of
// dirty pages from the setup (both need a superuser or table owner; a
// failure is only logged).
func insertTasks(ctx context.Context, s *Stack, orgs []uuid.UUID, n int) error {
	if err := bulkInsertTasks(ctx, s, orgs, n, "{}"); err != nil {
		return err
	}
	settleDatabase(ctx, s, "ANALYZE worker_tasks", "ANALYZE worker_task_attempts", "CHECKPOINT")
	return nil
}

// bulkInsertTasks creates n pending no-op tasks with the given
// required_capabilities (a JSON object) in one INSERT … SELECT, spread
// round-robin over orgs. They share one created_at (the transaction's
// start), so they are older than any task created afterwards. No NOTIFY is
// sent.
func bulkInsertTasks(ctx context.Context, s *Stack, orgs []uuid.UUID, n int, requiredCapabilities string) error {
	_, err := s.Pool.Exec(ctx, `
		WITH created AS (
			INSERT INTO worker_tasks (task_type, organization_id, payload, required_capabilities)
			SELECT 'scanner_plugin', ($1::uuid[])[1 + i % cardinality($1::uuid[])], '{"plugin":"echo"}'::jsonb, $3::jsonb
			FROM generate_series(0, $2 - 1) i
			RETURNING *)
		`+store.EnqueueSQL("created"), orgs, n, requiredCapabilities)
	if err != nil {
		return fmt.Errorf("insert tasks: %w", err)
	}
	return nil
}

// verification is the database's view of a scenario's tasks.
type verification struct {
	Tasks              int `json:"tasks"`
	Completed          int `json:"completed"`
	SucceededAttempts  int `json:"succeeded_attempts"`
	Attempts           int `json:"attempts"`
	TasksWithTwoWins   int `json:"tasks_with_several_successes"`
	TasksWithNoSuccess int `json:"tasks_without_success"`
	ok                 bool
}

func (v verification) String() string {
	verdict := verdictOf(v.ok)
	return fmt.Sprintf("%s: %d tasks, %d completed, %d succeeded attempts (%d attempts in all), %d tasks with >1 success, %d without",
		verdict, v.Tasks, v.Completed, v.SucceededAttempts, v.Attempts, v.TasksWithTwoWins, v.TasksWithNoSuccess)
}

// verifyTasks checks in SQL that each of the organizations' tasks is
// completed and has exactly one succeeded attempt, and that there are want
// tasks.
func verifyTasks(ctx context.Context, s *Stack, orgs []uuid.UUID, want int) (verification, error) {
	var v verification
	err := s.Pool.QueryRow(ctx, `
		WITH per_task AS (
			SELECT t.id, t.state,
				count(a.id) AS attempts,
				count(a.id) FILTER (WHERE a.status = 'succeeded') AS succeeded
			FROM worker_tasks t LEFT JOIN worker_task_attempts a ON a.task_id = t.id
			WHERE t.organization_id = ANY($1)
			GROUP BY t.id, t.state
		)
		SELECT count(*),
			count(*) FILTER (WHERE state = 'completed'),
			coalesce(sum(succeeded), 0),
			coalesce(sum(attempts), 0),
			count(*) FILTER (WHERE succeeded > 1),
			count(*) FILTER (WHERE succeeded = 0)
		FROM per_task`, orgs).Scan(&v.Tasks, &v.Completed, &v.SucceededAttempts, &v.Attempts, &v.TasksWithTwoWins, &v.TasksWithNoSuccess)
	if err != nil {
		return v, err
	}
	v.ok = v.Tasks == want && v.Completed == want && v.SucceededAttempts == want &&
		v.TasksWithTwoWins == 0 && v.TasksWithNoSuccess == 0
	return v, nil
}
