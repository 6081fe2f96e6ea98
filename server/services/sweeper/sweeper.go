// Package sweeper is the background service expiring leases and enforcing
// attempt timeouts and execution deadlines, and expiring upload sessions
// (Sweeper).
package sweeper

import (
	"context"
	"flag"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worker-gateway/gateway/server/objectstore"
	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// Name names the service: its logs, its spans, Kick.
const Name = "sweeper"

// Config is how a replica sweeps.
type Config struct {
	// IdleInterval is how often it checks for expired leases when it knows
	// of none due sooner (leases granted by another replica that then died
	// are found within this interval).
	IdleInterval time.Duration
	// DormantInterval replaces IdleInterval while the database holds
	// nothing that can expire (no active attempt, no execution deadline):
	// an idle gateway then sends no query for this long. A deadline this
	// replica sets wakes the sweeper at once (DueWithin); one set by
	// another replica that dies before anything else wakes this one is
	// found within this interval.
	DormantInterval time.Duration
	// Batch bounds the rows one pass touches.
	Batch int
	// Uploads is the artifact storage whose expired uploads and orphaned
	// objects it deletes (nil: none).
	Uploads objectstore.Backend
	// UploadSessionTTL is an upload session's lifetime; ArtifactKeyPrefix
	// starts every artifact's object key (the orphan sweep lists those).
	UploadSessionTTL  time.Duration
	ArtifactKeyPrefix string
}

// Sweeper expires leases, enforces attempt timeouts and execution deadlines.
// Every replica runs one; SKIP LOCKED makes them share the work safely. It
// sleeps until the earliest deadline the database reported (relative, so
// the local clock's skew does not matter), or IdleInterval when none is
// known (DormantInterval when nothing at all can expire), and a deadline
// this replica sets can wake it sooner.
type Sweeper struct {
	services.Unit
	store  *store.Store
	cfg    Config
	logger *slog.Logger
	wake   services.Signal
	// plannedAt is when the next pass will run (monotonic nanoseconds since
	// the sweeper started), so a grant kicks it only when needed.
	plannedAt atomic.Int64
	epoch     time.Time
	// lastOrphanSweep is when this replica last looked for orphaned objects.
	lastOrphanSweep time.Time
	// runs counts its passes, expiries the attempts it expired (metrics).
	runs, expiries prometheus.Counter
}

// New builds a replica's sweeper.
func New(st *store.Store, cfg Config, u services.Unit) *Sweeper {
	return &Sweeper{Unit: u, store: st, cfg: cfg, logger: u.Logger(), wake: services.NewSignal(), epoch: time.Now(),
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_sweeper_runs_total",
			Help: "Sweeper passes this replica ran.",
		}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_lease_expiries_total",
			Help: "Attempts this replica's sweeper expired because their lease ran out.",
		}),
	}
}

// RegisterFlags registers the sweeper's flags, into idle and dormant: its
// intervals.
func RegisterFlags(fs *flag.FlagSet, idle, dormant *time.Duration) {
	fs.DurationVar(idle, "sweep-idle-interval", *idle, "lease sweep interval when no expiry is known to be due sooner")
	fs.DurationVar(dormant, "sweep-dormant-interval", *dormant, "sweep interval while nothing in the database can expire (an idle gateway sends no query meanwhile; this replica's own lease grants wake it)")
}

// Collectors are its metrics.
func (sw *Sweeper) Collectors() []prometheus.Collector {
	return []prometheus.Collector{sw.runs, sw.expiries}
}

// Kick asks for a sweep pass now.
func (sw *Sweeper) Kick() { sw.wake.Notify() }

// Run sweeps until ctx ends.
func (sw *Sweeper) Run(ctx context.Context) error {
	return services.RunPasses(ctx, sw.wake, func(ctx context.Context) time.Duration {
		next := sw.pass(ctx)
		sw.plannedAt.Store(int64(time.Since(sw.epoch) + next))
		return next
	})
}

// pass sweeps once and returns how long to sleep.
func (sw *Sweeper) pass(ctx context.Context) time.Duration {
	ctx, span := sw.Iteration(ctx)
	defer span.End()
	sw.runs.Inc()
	sw.sweepUploads(ctx)
	res, err := sw.store.SweepExpired(ctx, sw.cfg.Batch)
	if err != nil {
		if ctx.Err() == nil {
			sw.logger.Warn("sweep failed", "error", err.Error())
		}
		return time.Second
	}
	sw.expiries.Add(float64(res.ExpiredAttempts))
	if res.ExpiredAttempts > 0 || res.DeadlinedTasks > 0 {
		sw.logger.Info("sweep", "expired_attempts", res.ExpiredAttempts, "deadlined_tasks", res.DeadlinedTasks)
	}
	if res.More {
		return 0
	}
	next := sw.cfg.IdleInterval
	if res.NextDueIn == nil {
		// Nothing can expire: only a new lease can change that, and this
		// replica's own grants wake the sweeper (DueWithin).
		next = max(next, sw.cfg.DormantInterval)
	} else {
		// A little after the deadline, so the database agrees it passed.
		next = min(next, max(*res.NextDueIn+10*time.Millisecond, 10*time.Millisecond))
	}
	return next
}

// DueWithin wakes the sweeper if a deadline this replica just set (a lease
// granted, a task's execution timeout) falls due before the sweeper's next
// planned pass would notice it.
func (sw *Sweeper) DueWithin(d time.Duration) {
	if int64(time.Since(sw.epoch)+d) < sw.plannedAt.Load() {
		sw.Kick()
	}
}
