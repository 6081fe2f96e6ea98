// Package scheduletimer is the background service firing due schedules
// (Timer).
package scheduletimer

import (
	"context"
	"flag"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

const (
	// scheduleFireBatch bounds the schedules one claim fires.
	scheduleFireBatch = 100
	// scheduleClaimers is how many claims run at once while a backlog of
	// due slots lasts: one transaction at a time leaves the database
	// waiting on each statement's round trip.
	scheduleClaimers = 4
	// scheduleRetry is the pause after a failed query.
	scheduleRetry = 2 * time.Second
	// scheduleBusy is the pause while another replica fires what is due.
	scheduleBusy = 100 * time.Millisecond
	// scheduleGather is the shortest sleep after a pass that fired: slots
	// spread over time (1,000 a second, each its own instant) then gather
	// into claims of dozens instead of one or two, and a claim's fixed cost
	// (eleven statements) is shared. It adds at most this much to a slot's lag.
	scheduleGather = 50 * time.Millisecond
)

// Name names the service: its logs, its spans.
const Name = "schedule-timer"

// Timer fires due schedules (store.FireDueSchedules). It sleeps
// until the earliest fire time, as a delay the database computed, and
// wakes early on a WakeSchedules notice: a schedule changed, or the run a
// queued slot waits for ended (migration 000016). An idle gateway sends
// the database nothing. Every replica runs one: claims
// are FOR UPDATE SKIP LOCKED, so a slot fires once whichever replica
// claims it.
type Timer struct {
	services.Unit
	store  *store.Store
	logger *slog.Logger
	wake   services.Signal
	// fires counts the history entries this replica's claims recorded and
	// passes the claims it ran (metrics).
	fires, passes atomic.Int64
	// lag observes, per slot fired on time, the time from when it was due
	// to the commit that created its run.
	lag prometheus.Histogram
}

// New builds a replica's timer.
func New(st *store.Store, u services.Unit) *Timer {
	return &Timer{Unit: u, store: st, logger: u.Logger(), wake: services.NewSignal(),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gateway_schedule_fire_lag_seconds",
			Help:    "Time from a slot's fire time (slot plus jitter) to the commit that created its run, per run this replica's timer created on time (not manual runs or queued slots), by this replica's clock.",
			Buckets: []float64{.005, .01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 1.5, 2, 3, 5, 10, 30, 60},
		})}
}

// Subscriptions: a schedule changed, or the run a queued slot waits for
// ended.
func (t *Timer) Subscriptions() []store.WakeupKind {
	return []store.WakeupKind{store.WakeSchedules}
}

// Wake reads the earliest fire time again.
func (t *Timer) Wake(store.Wakeup) { t.wake.Notify() }

// CatchUp reads the earliest fire time again: a change may have been missed.
func (t *Timer) CatchUp() { t.wake.Notify() }

// Run fires and sleeps until ctx ends.
func (t *Timer) Run(ctx context.Context) error { return services.RunPasses(ctx, t.wake, t.fireDue) }

// fireDue fires every due schedule and returns how long to sleep. A claim
// that comes back full means a backlog (many slots due at once): then
// claims run in rounds of scheduleClaimers side by side, each in its own
// transaction on its own connection (SKIP LOCKED keeps them apart), for as
// long as any claim of the last round came back full. (A claimer that
// stopped at its first short batch while another still found full ones
// left one claimer to drain a growing backlog alone.)
func (t *Timer) fireDue(ctx context.Context) time.Duration {
	ctx, span := t.Iteration(ctx)
	defer span.End()
	fired, full, err := t.claim(ctx)
	for err == nil && full && ctx.Err() == nil {
		var round atomic.Int64
		var anyFull atomic.Bool
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		for range scheduleClaimers {
			wg.Go(func() {
				n, full, err := t.claim(ctx)
				round.Add(int64(n))
				if full {
					anyFull.Store(true)
				}
				if err != nil {
					failed.Store(&err)
				}
			})
		}
		wg.Wait()
		fired += int(round.Load())
		full = anyFull.Load()
		if e := failed.Load(); e != nil {
			err = *e
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			t.logger.Warn("firing schedules failed; retrying", "error", err.Error())
		}
		return jittered(scheduleRetry)
	}
	next, ok, err := t.store.NextScheduleFireAt(ctx)
	if err != nil {
		if ctx.Err() == nil {
			t.logger.Warn("reading the next schedule fire failed; retrying", "error", err.Error())
		}
		return jittered(scheduleRetry)
	}
	sleep := services.SleepUntilWoken
	if ok {
		if next.In <= 0 && fired == 0 {
			// Due but not claimed: another replica holds it until it commits.
			return jittered(scheduleBusy)
		}
		sleep = next.In
		if fired > 0 {
			sleep = max(sleep, scheduleGather)
		}
	}
	return sleep
}

// claim runs one claim of due schedules: how many fires it recorded, and
// whether the batch was full (more may be due).
func (t *Timer) claim(ctx context.Context) (fired int, full bool, err error) {
	fires, err := t.store.FireDueSchedules(ctx, scheduleFireBatch)
	if err != nil {
		return 0, false, err
	}
	committed := time.Now()
	for _, f := range fires {
		if f.DueAt != nil {
			t.lag.Observe(max(0, committed.Sub(*f.DueAt).Seconds()))
		}
	}
	t.passes.Add(1)
	t.fires.Add(int64(len(fires)))
	return len(fires), len(fires) >= scheduleFireBatch, nil
}

// jittered spreads retries of several replicas apart.
func jittered(d time.Duration) time.Duration { return services.Jittered(d) }

// RegisterFlags registers the timer's flag, into on: whether this replica
// runs it.
func RegisterFlags(fs *flag.FlagSet, on *bool) {
	fs.BoolVar(on, "schedule-timer", *on, "fire due schedules on this replica (every replica may; claims never overlap); -schedule-timer=false leaves firing to the others")
}

// Collectors are its metrics: how late it fired each slot, the history
// entries its claims recorded and the claims it ran.
func (t *Timer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		t.lag,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_schedule_fires_total",
			Help: "Schedule slots this replica's timer claimed and recorded (created, skipped or queued).",
		}, func() float64 { return float64(t.fires.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_schedule_claims_total",
			Help: "Claims of due schedules this replica's timer ran (none while no schedule is due).",
		}, func() float64 { return float64(t.passes.Load()) }),
	}
}
