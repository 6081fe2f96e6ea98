package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// latencyConfig is scenario 2.
type latencyConfig struct {
	polls    int
	workers  int
	samples  int
	interval time.Duration
	wait     int // wait_seconds of each idle poll
}

// sampleTimes records one task's life as the benchmark sees it, on this
// process's monotonic clock.
type sampleTimes struct {
	sent     time.Time // the create call was sent
	returned time.Time // the create call returned: the task is committed
	received time.Time // a poller received its lease
}

// latencyRun is what the producer and the pollers of one run share.
type latencyRun struct {
	mu       sync.Mutex
	samples  map[string]*sampleTimes
	received atomic.Int64
	started  atomic.Int64 // pollers that sent their first poll
	errors   errorTally
}

func (lr *latencyRun) entry(id string) *sampleTimes {
	st := lr.samples[id]
	if st == nil {
		st = &sampleTimes{}
		lr.samples[id] = st
	}
	return st
}

// runLatency parks idle long-polls, creates tasks one at a time through the
// API and measures how long each takes to reach a poller.
func runLatency(ctx context.Context, s *Stack, c latencyConfig, logf func(string, ...any)) (*Result, error) {
	nWorkers := max(1, min(c.workers, c.polls))
	perWorker := (c.polls + nWorkers - 1) / nWorkers
	r := &Result{Scenario: "latency", Workers: nWorkers, Polls: c.polls, Samples: c.samples}
	org, err := s.NewOrganization(ctx, "latency")
	if err != nil {
		return r, err
	}
	// One slot per poll, so every parked poll can take a task.
	workers, err := s.NewWorkers(ctx, "lat", nWorkers, perWorker+1, perWorker, org)
	if err != nil {
		return r, err
	}
	defer s.ReleaseWorkers(ctx, org, workers)
	prod, err := s.Producer(ctx)
	if err != nil {
		return r, err
	}
	defer prod.close()
	if err := warmAll(ctx, workers); err != nil {
		return r, err
	}

	lr := &latencyRun{samples: make(map[string]*sampleTimes, c.samples)}
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	body := fmt.Appendf(nil, `{"max_tasks":1,"wait_seconds":%d}`, c.wait)
	var wg sync.WaitGroup
	for i := range c.polls {
		w := workers[i%len(workers)]
		wg.Go(func() { latencyPoller(pollCtx, w, lr, body) })
	}
	// Let every poll reach the gateway, find nothing and park in its hub.
	logf("latency: parking %d long-polls over %d workers", c.polls, nWorkers)
	for lr.started.Load() < int64(c.polls) && ctx.Err() == nil {
		sleepCtx(ctx, 10*time.Millisecond)
	}
	before := s.beginWindow(ctx) // includes the statistics settle (statSettle): the polls are parked by its end
	var ws *waitSampler
	if pgWaits {
		ws = startWaitSampler(ctx, s.Pool, 20*time.Millisecond)
	}

	logf("latency: creating %d tasks, one every %s", c.samples, c.interval)
	start := time.Now()
	createBody := noopTaskBody(org)
	var createLat []time.Duration
	created := 0
	tick := time.NewTicker(c.interval)
	for i := 0; i < c.samples && ctx.Err() == nil; i++ {
		if i > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
		t0 := time.Now()
		id, returned, err := prod.createTask(ctx, createBody)
		if err != nil {
			if ctx.Err() == nil {
				lr.errors.add("create", err)
			}
			continue
		}
		createLat = append(createLat, returned.Sub(t0))
		created++
		lr.mu.Lock()
		lr.entry(id).sent, lr.entry(id).returned = t0, returned
		lr.mu.Unlock()
	}
	tick.Stop()

	// Wait for the last tasks to reach a poller (bounded).
	grace := time.Now().Add(10 * time.Second)
	for lr.received.Load() < int64(created) && time.Now().Before(grace) && ctx.Err() == nil {
		sleepCtx(ctx, 5*time.Millisecond)
	}
	wall := time.Since(start)
	after := s.endWindow(context.WithoutCancel(ctx), func() {
		stopPolls()
		wg.Wait()
	})
	if ws != nil {
		r.PGWaits = ws.finish()
	}

	// Wake latency: create call returned → lease received. A poller can
	// receive the lease before the producer has read the create answer
	// (NOTIFY fires at commit, the answer travels back afterwards); such
	// samples count as 0 and are reported as "early".
	var wake, endToEnd []time.Duration
	lr.mu.Lock()
	for _, st := range lr.samples {
		if st.returned.IsZero() || st.received.IsZero() {
			continue
		}
		endToEnd = append(endToEnd, st.received.Sub(st.sent))
		d := st.received.Sub(st.returned)
		if d < 0 {
			r.WakeEarly++
			d = 0
		}
		wake = append(wake, d)
	}
	lr.mu.Unlock()
	r.SamplesReceived = len(wake)
	p := percentiles(wake, 50, 90, 99, 100)
	r.WakeP50, r.WakeP90, r.WakeP99, r.WakeMax = ptr(p[0]), ptr(p[1]), ptr(p[2]), ptr(p[3])
	p = percentiles(createLat, 50, 99)
	r.CreateP50, r.CreateP99 = ptr(p[0]), ptr(p[1])
	p = percentiles(endToEnd, 50, 99)
	r.EndToEndP50, r.EndToEndP99 = ptr(p[0]), ptr(p[1])
	r.WallSeconds = round(wall.Seconds(), 3)
	s.applyUsage(r, before, after, wall, created)
	r.HTTPErrors, _ = lr.errors.snapshot()
	r.errorText = lr.errors.String()

	v, err := verifyTasks(context.WithoutCancel(ctx), s, []uuid.UUID{org}, created)
	if err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	r.Verification = v
	r.Verified = v.ok && created == c.samples && r.SamplesReceived == created
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s after %d of %d samples", stopReason(ctx), created, c.samples)
	}
	return r, nil
}

// latencyPoller keeps one long-poll parked: when it receives a task it
// records the moment, completes the task and polls again.
func latencyPoller(ctx context.Context, w *benchWorker, lr *latencyRun, body []byte) {
	first := true
	for ctx.Err() == nil {
		if first {
			lr.started.Add(1)
			first = false
		}
		leases, err := w.poll(ctx, body)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			lr.errors.add("lease", err)
			if !backoffAfter(ctx, err) {
				return
			}
			continue
		}
		if len(leases) == 0 {
			continue
		}
		lr.mu.Lock()
		for _, l := range leases {
			lr.entry(l.Task.ID).received = now
		}
		lr.mu.Unlock()
		lr.received.Add(int64(len(leases)))
		for _, l := range leases {
			if err := w.completeDetached(ctx, l); err != nil {
				lr.errors.add("complete", err)
			}
		}
	}
}
