package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// fairnessConfig is the fairness scenario: organization A has a large
// backlog, organization B a task now and then; workers serve both.
type fairnessConfig struct {
	tasks   int // organization A's pending tasks
	workers int
	batch   int // max_tasks per lease request
	samples int // B's tasks, created one at a time
}

const (
	// fairnessWarmup is how long the workers drain A's backlog before the
	// first of B's tasks.
	fairnessWarmup = 2 * time.Second
	// fairnessSpacing is the pause after one of B's tasks was leased
	// before the next is created: random in [spacing, 2·spacing), so that
	// creations fall at any point of the workers' cycles.
	fairnessSpacing = 250 * time.Millisecond
	// fairnessGiveUp is how long one of B's tasks may stay unleased before
	// the sample counts as not received.
	fairnessGiveUp = 10 * time.Second
)

// fairSample is one of B's tasks as the benchmark sees it.
type fairSample struct {
	id             string    // known once the create call returned
	answeredBefore int64     // lease answers received when its create call was sent
	workerBefore   []int64   // the same, per worker
	returned       time.Time // the create call returned: the task is committed
	received       time.Time // a worker received its lease
	cycles         int64     // lease answers from the create call's sending to its lease, that one included
	rounds         int64     // the most of those answers any one worker received
	passedOver     int       // lease calls sent after returned and answered without it before it was leased
	leased         chan struct{}
}

// fairnessRun is what the workers and the producer of one run share.
type fairnessRun struct {
	orgB      string
	answered  atomic.Int64   // lease calls answered, all workers together
	perWorker []atomic.Int64 // the same, per worker
	// stopping ends the workers' loops after their current lease call and
	// completions: cancelling a call could lose a lease the gateway granted.
	stopping atomic.Bool
	mu       sync.Mutex
	cur      *fairSample // B's task in flight, nil between samples
	late     int         // B's leases received after their sample gave up
	doneA    atomic.Int64
	doneB    atomic.Int64
	errors   errorTally
}

// observe records one lease answer: n is its number among all answers, sent
// the instant its call was sent.
func (fr *fairnessRun) observe(leases []lease, sent, now time.Time, n int64) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	cur := fr.cur
	gotB := false
	for _, l := range leases {
		if l.Task.OrganizationID != fr.orgB {
			continue
		}
		if cur == nil || !cur.received.IsZero() || cur.id != "" && l.Task.ID != cur.id {
			fr.late++ // an earlier sample's task, leased after it gave up
			continue
		}
		gotB = true
	}
	switch {
	case cur == nil || !cur.received.IsZero():
	case gotB:
		cur.received, cur.cycles = now, n-cur.answeredBefore
		for i := range fr.perWorker {
			cur.rounds = max(cur.rounds, fr.perWorker[i].Load()-cur.workerBefore[i])
		}
		close(cur.leased)
	case !cur.returned.IsZero() && sent.After(cur.returned):
		cur.passedOver++
	}
}

// runFairness inserts organization A's backlog, lets the workers (assigned
// to A and B) drain it in lease → complete loops, and meanwhile creates B's
// tasks one at a time through the API, measuring how many lease answers
// (across all workers) and how much time pass until each is leased.
func runFairness(ctx context.Context, s *Stack, c fairnessConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "fairness", Tasks: c.tasks, Workers: c.workers, Batch: c.batch, Samples: c.samples}
	orgA, err := s.NewOrganization(ctx, "fairness-A")
	if err != nil {
		return r, err
	}
	orgB, err := s.NewOrganization(ctx, "fairness-B")
	if err != nil {
		return r, err
	}
	workers, err := s.NewWorkers(ctx, "fair", c.workers, max(1000, 2*c.batch), c.batch, orgA)
	if err != nil {
		return r, err
	}
	defer s.ReleaseWorkers(ctx, orgA, workers)
	defer s.ReleaseWorkers(ctx, orgB, workers) // unassigns from B (the rest is done twice, harmlessly)
	if err := s.AssignWorkers(ctx, orgB, workers); err != nil {
		return r, err
	}

	logf("fairness: inserting %d pending tasks for organization A", c.tasks)
	if err := insertTasks(ctx, s, []uuid.UUID{orgA}, c.tasks); err != nil {
		return r, err
	}
	// A's tasks still pending at the end are removed (they would stay
	// pending for ever in an existing deployment, and slow later scenarios).
	removeRest := sync.OnceValues(func() (int, error) {
		var n int
		err := s.Pool.QueryRow(context.WithoutCancel(ctx), `
			WITH d AS (DELETE FROM worker_tasks WHERE organization_id = $1 AND state = 'pending' RETURNING 1)
			SELECT count(*) FROM d`, orgA).Scan(&n)
		return n, err
	})
	defer func() { _, _ = removeRest() }()
	if err := warmAll(ctx, workers); err != nil {
		return r, err
	}
	prod, err := s.Producer(ctx)
	if err != nil {
		return r, err
	}
	defer prod.close()

	fr := &fairnessRun{orgB: orgB.String(), perWorker: make([]atomic.Int64, len(workers))}
	body := fmt.Appendf(nil, `{"max_tasks":%d,"wait_seconds":1}`, c.batch)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	logf("fairness: %d workers draining A's backlog, batch %d", c.workers, c.batch)
	start := time.Now()
	for i, w := range workers {
		wg.Go(func() { fairnessWorker(runCtx, w, i, fr, body) })
	}
	sleepCtx(ctx, fairnessWarmup)

	logf("fairness: creating %d tasks for organization B, one at a time", c.samples)
	createBody := noopTaskBody(orgB)
	rng := rand.New(rand.NewPCG(1, 2))
	var samples []*fairSample
	created := 0
	for i := 0; i < c.samples && ctx.Err() == nil; i++ {
		if i > 0 {
			sleepCtx(ctx, fairnessSpacing+time.Duration(rng.Int64N(int64(fairnessSpacing))))
		}
		cur := &fairSample{leased: make(chan struct{}), workerBefore: make([]int64, len(workers))}
		fr.mu.Lock()
		cur.answeredBefore = fr.answered.Load()
		for i := range fr.perWorker {
			cur.workerBefore[i] = fr.perWorker[i].Load()
		}
		fr.cur = cur
		fr.mu.Unlock()
		id, returned, err := prod.createTask(ctx, createBody)
		fr.mu.Lock()
		cur.id, cur.returned = id, returned
		fr.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				fr.errors.add("create", err)
			}
			fr.mu.Lock()
			fr.cur = nil
			fr.mu.Unlock()
			continue
		}
		created++
		t := time.NewTimer(fairnessGiveUp)
		select {
		case <-cur.leased:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		fr.mu.Lock()
		fr.cur = nil
		fr.mu.Unlock()
		samples = append(samples, cur)
	}
	fr.stopping.Store(true)
	wg.Wait()
	stopRun()
	r.WallSeconds = round(time.Since(start).Seconds(), 3)

	var cycles, rounds, passed []int64
	var wait []time.Duration
	for _, sm := range samples {
		if sm.received.IsZero() {
			continue
		}
		r.SamplesReceived++
		cycles = append(cycles, sm.cycles)
		rounds = append(rounds, sm.rounds)
		passed = append(passed, int64(sm.passedOver))
		// Received before the create call returned (the lease can overtake
		// the create answer): 0, as in latency.
		wait = append(wait, max(0, sm.received.Sub(sm.returned)))
	}
	if len(cycles) > 0 {
		n := nearestRank(cycles, 50, 100)
		r.FairnessCyclesP50, r.FairnessCyclesMax = ptr(n[0]), ptr(n[1])
		n = nearestRank(rounds, 50, 100)
		r.FairnessRoundsP50, r.FairnessRoundsMax = ptr(n[0]), ptr(n[1])
		n = nearestRank(passed, 50, 100)
		r.FairnessPassedOverP50, r.FairnessPassedOverMax = ptr(n[0]), ptr(n[1])
		p := percentiles(wait, 50, 100)
		r.FairnessWaitP50, r.FairnessWaitMax = ptr(p[0]), ptr(p[1])
	}
	r.LeaseCalls = int(fr.answered.Load())
	r.HTTPErrors, _ = fr.errors.snapshot()
	r.errorText = fr.errors.String()

	v := fairnessVerification{BReceived: r.SamplesReceived, BWant: created, BLate: fr.late}
	if v.APendingLeft, err = removeRest(); err != nil {
		return r, fmt.Errorf("remove A's remaining tasks: %w", err)
	}
	if v.A, err = verifyTasks(context.WithoutCancel(ctx), s, []uuid.UUID{orgA}, int(fr.doneA.Load())); err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	if v.B, err = verifyTasks(context.WithoutCancel(ctx), s, []uuid.UUID{orgB}, created); err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	// A backlog that ran dry would have measured nothing about fairness.
	v.ok = v.A.ok && v.B.ok && v.APendingLeft > 0 && v.BReceived == created && int(fr.doneB.Load()) == created
	r.Verification = v
	r.Verified = v.ok && created == c.samples
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s after %d of %d samples", stopReason(ctx), created, c.samples)
	}
	if v.APendingLeft == 0 {
		return r, fmt.Errorf("organization A's backlog ran out: raise -fairness-tasks")
	}
	return r, nil
}

// fairnessWorker (number i) loops lease → complete every lease, until the
// run stops.
func fairnessWorker(ctx context.Context, w *benchWorker, i int, fr *fairnessRun, body []byte) {
	for ctx.Err() == nil && !fr.stopping.Load() {
		sent := time.Now()
		leases, err := w.poll(ctx, body)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if fr.errors.add("lease", err) >= 1000 || !backoffAfter(ctx, err) {
				return
			}
			continue
		}
		fr.perWorker[i].Add(1)
		fr.observe(leases, sent, now, fr.answered.Add(1))
		for _, l := range leases {
			if err := w.completeDetached(ctx, l); err != nil {
				fr.errors.add("complete", err)
				continue
			}
			if l.Task.OrganizationID == fr.orgB {
				fr.doneB.Add(1)
			} else {
				fr.doneA.Add(1)
			}
		}
	}
}

// fairnessVerification is the database's view of both organizations.
type fairnessVerification struct {
	BWant        int          `json:"b_tasks"`
	BReceived    int          `json:"b_leased_in_time"`
	BLate        int          `json:"b_leased_late"`
	APendingLeft int          `json:"a_pending_left"`
	A            verification `json:"a_tasks"`
	B            verification `json:"b_tasks_check"`
	ok           bool
}

func (v fairnessVerification) String() string {
	verdict := verdictOf(v.ok)
	return fmt.Sprintf("%s: B %d/%d tasks leased within %s (%d later), A still had %d pending tasks at the end (deleted); A: %s; B: %s",
		verdict, v.BReceived, v.BWant, fairnessGiveUp, v.BLate, v.APendingLeft, v.A, v.B)
}
