package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// idleConfig is the idle scenario: what parked long-polls cost when nothing
// happens.
type idleConfig struct {
	polls   int
	workers int
	wait    int           // wait_seconds of each poll
	window  time.Duration // measured, once every poll is parked
}

// idleStreamsPerConn is how many polls share one HTTP/2 connection. The
// gateway's http.Server leaves HTTP/2's MaxConcurrentStreams at Go's
// default, 250 per connection; past it a client queues requests or dials
// connections of its own accord. The benchmark gives every group of this
// many polls of a worker its own connection instead, so that all polls are
// open at once over a known number of connections.
const idleStreamsPerConn = 100

// idleRampStep is how many polls are opened at once. The next step waits
// (at most idleStepWait) until the gateway's hub holds them all
// (gateway_waiting_polls), so that thousands of first acquisitions do not
// queue for the gateway's database pool at the same moment.
const (
	idleRampStep = 500
	idleStepWait = 30 * time.Second
)

// idleRampAllowance is the time the automatic wait_seconds leaves for
// opening every poll, on top of the statistics settle and the window.
// 10,000 polls took 24 s on a busy 2-core machine.
const idleRampAllowance = 60 * time.Second

// idleWaitSeconds is the idle polls' wait_seconds: the given value, or (0)
// long enough that a poll opened at the start of the ramp is still parked
// when the window ends.
func idleWaitSeconds(given int, window time.Duration) int {
	if given > 0 {
		return given
	}
	return int((idleRampAllowance + statSettle + window + time.Second - 1).Seconds())
}

// idleRun is what the pollers of one run share.
type idleRun struct {
	// windowOver is set when the window has ended: from then on an answered
	// poll is not sent again.
	windowOver atomic.Bool
	repolls    atomic.Int64 // polls answered before the window ended, sent again
	empty      atomic.Int64 // final answers: 200 without a lease
	leases     atomic.Int64 // leases received (there are no tasks: must stay 0)
	errors     errorTally
}

// runIdle parks polls idle long-polls over the workers, waits until the
// gateway's hub holds them, and measures what they cost over the window:
// gateway and PostgreSQL CPU, database transactions and the gateway's
// resident memory. Then every poll must come back empty.
func runIdle(ctx context.Context, s *Stack, c idleConfig, logf func(string, ...any)) (*Result, error) {
	nWorkers := max(1, min(c.workers, c.polls))
	perWorker := (c.polls + nWorkers - 1) / nWorkers
	r := &Result{Scenario: "idle", Workers: nWorkers, Polls: c.polls, WaitSeconds: c.wait}
	org, err := s.NewOrganization(ctx, "idle")
	if err != nil {
		return r, err
	}
	// One task slot per poll, as in latency: every poll is a full
	// acquisition (there is just nothing to lease).
	workers, err := s.NewWorkers(ctx, "idle", nWorkers, perWorker, 1, org)
	if err != nil {
		return r, err
	}
	defer s.ReleaseWorkers(ctx, org, workers)
	prod, err := s.Producer(ctx)
	if err != nil {
		return r, err
	}
	defer prod.close()

	// Poll i belongs to worker i mod nWorkers; each worker's polls go over
	// connections of idleStreamsPerConn polls each. Their client timeout
	// leaves room for the wait.
	timeout := time.Duration(c.wait)*time.Second + 30*time.Second
	connsOf := make([][]*benchWorker, nWorkers)
	pollConn := make([]*benchWorker, c.polls)
	var conns []*benchWorker
	for i := range c.polls {
		wi, k := i%nWorkers, i/nWorkers/idleStreamsPerConn
		if k == len(connsOf[wi]) {
			conn := workers[wi].sibling(timeout)
			connsOf[wi] = append(connsOf[wi], conn)
			conns = append(conns, conn)
		}
		pollConn[i] = connsOf[wi][k]
	}
	defer func() {
		for _, conn := range conns {
			conn.close()
		}
	}()
	r.Connections = len(conns)
	logf("idle: opening %d connections for %d polls over %d workers", len(conns), c.polls, nWorkers)
	if err := warmAll(ctx, conns); err != nil {
		return r, err
	}

	pid := s.GatewayPID()
	var rssBefore *float64
	if mb, err := statusMiB(pid, "VmRSS"); pid > 0 && err == nil {
		rssBefore = ptr(round(mb, 1))
	}
	r.GatewayRSSBeforeMB = rssBefore

	// The ramp: steps of idleRampStep polls, each waiting until the hub
	// holds what was opened so far.
	base, metricsErr := prod.waitingPolls(ctx)
	if metricsErr != nil {
		logf("idle: gateway_waiting_polls is not readable (%v): opening the polls without waiting for them to park", metricsErr)
	}
	run := &idleRun{}
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	body := fmt.Appendf(nil, `{"max_tasks":1,"wait_seconds":%d}`, c.wait)
	var wg sync.WaitGroup
	logf("idle: parking %d long-polls (wait_seconds %d) in steps of %d", c.polls, c.wait, idleRampStep)
	rampStart := time.Now()
	parked := 0
	for opened := 0; opened < c.polls && ctx.Err() == nil; {
		next := min(opened+idleRampStep, c.polls)
		for i := opened; i < next; i++ {
			wg.Go(func() { idlePoller(pollCtx, pollConn[i], run, body) })
		}
		opened = next
		if metricsErr == nil {
			parked = max(0, waitParked(ctx, prod, base+opened, idleStepWait)-base)
			logf("idle: %d polls opened, %d parked", opened, parked)
		}
	}
	r.RampSeconds = ptr(round(time.Since(rampStart).Seconds(), 3))
	if metricsErr == nil {
		r.PollsParked = parked
	}
	if ctx.Err() != nil {
		stopPolls()
		wg.Wait()
		return r, fmt.Errorf("%s while opening the polls", stopReason(ctx))
	}

	// The opening reading comes after the statistics settle, so the ramp's
	// acquisitions are not counted in the window.
	before := s.beginWindow(ctx)
	logf("idle: measuring %s with the polls parked", c.window)
	rs := startRSSSampler(ctx, pid, 250*time.Millisecond)
	sleepCtx(ctx, c.window)
	peak, samples := rs.finish(pid)
	if ctx.Err() != nil {
		// No window to report: the figures would cover a fraction of it.
		stopPolls()
		wg.Wait()
		return r, fmt.Errorf("%s before the window ended", stopReason(ctx))
	}
	after := s.endWindow(context.WithoutCancel(ctx), func() { run.windowOver.Store(true) })
	wall := after.at.Sub(before.at)
	s.applyUsage(r, before, after, wall, 0)
	r.WallSeconds = round(wall.Seconds(), 3)
	// The resident memory while parked, not the lifetime peak (VmHWM) that
	// applyUsage reports: the ramp may have needed more.
	r.GatewayRSSMB = nil
	if samples > 0 {
		r.GatewayRSSMB = ptr(round(peak, 1))
		if rssBefore != nil {
			r.RSSPerPollKiB = ptr(round((peak-*rssBefore)*1024/float64(c.polls), 2))
		}
	}

	// Every poll ends by itself when its wait is over, answered empty.
	logf("idle: waiting for the polls to end (wait_seconds %d)", c.wait)
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-ctx.Done():
		stopPolls()
		<-ended
	}
	r.Repolls = int(run.repolls.Load())
	r.PollsEmpty = int(run.empty.Load())
	r.HTTPErrors, _ = run.errors.snapshot()
	r.errorText = run.errors.String()

	v := idleVerification{Polls: c.polls, Empty: r.PollsEmpty, Leases: int(run.leases.Load()), Repolls: r.Repolls}
	_, v.Errors = run.errors.snapshot()
	if v.Tasks, err = verifyTasks(context.WithoutCancel(ctx), s, []uuid.UUID{org}, 0); err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	v.ok = v.Empty == v.Polls && v.Leases == 0 && v.Errors == 0 && v.Tasks.ok
	r.Verification = v
	r.Verified = v.ok
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s before every poll ended (%d of %d answered empty)", stopReason(ctx), v.Empty, c.polls)
	}
	return r, nil
}

// waitParked scrapes gateway_waiting_polls until it reaches want or wait
// has passed, and returns the last value.
func waitParked(ctx context.Context, prod *producer, want int, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for {
		n, err := prod.waitingPolls(ctx)
		if err == nil && n >= want || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// idlePoller keeps one long-poll open until the window is over, then lets
// it end: a poll answered before then (its wait was too short) is sent
// again and counted.
func idlePoller(ctx context.Context, w *benchWorker, run *idleRun, body []byte) {
	for ctx.Err() == nil {
		leases, err := w.poll(ctx, body)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			run.errors.add("lease", err)
			if !backoffAfter(ctx, err) {
				return
			}
			continue
		}
		if len(leases) > 0 {
			// Not expected: the organization has no tasks.
			run.leases.Add(int64(len(leases)))
			for _, l := range leases {
				if err := w.completeDetached(ctx, l); err != nil {
					run.errors.add("complete", err)
				}
			}
		}
		if run.windowOver.Load() {
			if len(leases) == 0 {
				run.empty.Add(1)
			}
			return
		}
		run.repolls.Add(1)
	}
}

// idleVerification is how the polls ended, and the database's view of the
// organization (no tasks).
type idleVerification struct {
	Polls   int          `json:"polls"`
	Empty   int          `json:"answered_empty"`
	Leases  int          `json:"leases"`
	Repolls int          `json:"repolls"`
	Errors  int          `json:"errors"`
	Tasks   verification `json:"tasks"`
	ok      bool
}

func (v idleVerification) String() string {
	verdict := verdictOf(v.ok)
	return fmt.Sprintf("%s: %d/%d polls answered empty at the end, %d leases, %d errors, %d answered early and sent again; tasks %s",
		verdict, v.Empty, v.Polls, v.Leases, v.Errors, v.Repolls, v.Tasks)
}
