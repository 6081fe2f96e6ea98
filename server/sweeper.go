package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/store"
)

// Sweeper expires leases, enforces attempt timeouts and execution deadlines.
// Every replica runs one; SKIP LOCKED makes them share the work safely. It
// sleeps until the earliest deadline the database reported (relative, so
// the local clock's skew does not matter), or SweepIdleInterval when none is
// known, and a local lease grant can wake it sooner.
type Sweeper struct {
	store  *store.Store
	hub    *Hub
	cfg    Config
	logger *slog.Logger
	kick   chan struct{}
	// plannedAt is when the next pass will run (monotonic nanoseconds since
	// the sweeper started), so a grant kicks it only when needed.
	plannedAt atomic.Int64
	epoch     time.Time
}

func newSweeper(st *store.Store, hub *Hub, cfg Config, logger *slog.Logger) *Sweeper {
	return &Sweeper{store: st, hub: hub, cfg: cfg, logger: logger, kick: make(chan struct{}, 1), epoch: time.Now()}
}

// Kick asks for a sweep pass now.
func (sw *Sweeper) Kick() {
	select {
	case sw.kick <- struct{}{}:
	default:
	}
}

// Run sweeps until ctx ends.
func (sw *Sweeper) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-sw.kick:
			timer.Stop()
		}
		next := sw.pass(ctx)
		sw.plannedAt.Store(int64(time.Since(sw.epoch) + next))
		timer.Reset(next)
	}
}

// pass sweeps once and returns how long to sleep.
func (sw *Sweeper) pass(ctx context.Context) time.Duration {
	res, err := sw.store.SweepExpired(ctx, sw.cfg.SweepBatch)
	if err != nil {
		if ctx.Err() == nil {
			sw.logger.Warn("sweep failed", "error", err.Error())
		}
		return time.Second
	}
	if res.ExpiredAttempts > 0 || res.DeadlinedTasks > 0 {
		sw.logger.Info("sweep", "expired_attempts", res.ExpiredAttempts, "deadlined_tasks", res.DeadlinedTasks)
	}
	if res.More {
		return 0
	}
	next := sw.cfg.SweepIdleInterval
	if res.NextDueIn != nil {
		// A little after the deadline, so the database agrees it passed.
		next = min(next, max(*res.NextDueIn+10*time.Millisecond, 10*time.Millisecond))
	}
	return next
}

// dueWithin wakes the sweeper if a lease this replica just granted expires
// before the sweeper's next planned pass would notice it.
func (sw *Sweeper) dueWithin(d time.Duration) {
	if int64(time.Since(sw.epoch)+d) < sw.plannedAt.Load() {
		sw.Kick()
	}
}
