package server

import (
	"context"
	"flag"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/server/objectstore"
	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// Sweeper expires leases, enforces attempt timeouts and execution deadlines.
// Every replica runs one; SKIP LOCKED makes them share the work safely. It
// sleeps until the earliest deadline the database reported (relative, so
// the local clock's skew does not matter), or SweepIdleInterval when none is
// known (SweepDormantInterval when nothing at all can expire), and a local
// lease grant can wake it sooner.
type Sweeper struct {
	services.Unit
	store  *store.Store
	cfg    Config
	logger *slog.Logger
	// metrics is set by the server; nil in tests that build a sweeper alone.
	metrics *metrics
	kick    chan struct{}
	// plannedAt is when the next pass will run (monotonic nanoseconds since
	// the sweeper started), so a grant kicks it only when needed.
	plannedAt atomic.Int64
	epoch     time.Time
	// lastOrphanSweep is when this replica last looked for orphaned objects.
	lastOrphanSweep time.Time
	// lastPrune is when this replica last finished a retention pass.
	lastPrune time.Time
}

func newSweeper(st *store.Store, cfg Config, u services.Unit) *Sweeper {
	return &Sweeper{Unit: u, store: st, cfg: cfg, logger: u.Logger(), kick: make(chan struct{}, 1), epoch: time.Now()}
}

// Kick asks for a sweep pass now.
func (sw *Sweeper) Kick() {
	select {
	case sw.kick <- struct{}{}:
	default:
	}
}

// Run sweeps until ctx ends.
func (sw *Sweeper) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
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
	ctx, span := sw.Iteration(ctx)
	defer span.End()
	if sw.metrics != nil {
		sw.metrics.sweeperRuns.Inc()
	}
	sw.sweepUploads(ctx)
	sw.prune(ctx)
	res, err := sw.store.SweepExpired(ctx, sw.cfg.SweepBatch)
	if sw.metrics != nil && err == nil {
		sw.metrics.leaseExpiries.Add(float64(res.ExpiredAttempts))
	}
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
	if res.NextDueIn == nil {
		// Nothing can expire: only a new lease can change that, and this
		// replica's own grants wake the sweeper (dueWithin).
		next = max(next, sw.cfg.SweepDormantInterval)
	} else {
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

// sweepUploads expires upload sessions past their expiry and deletes their
// objects, and now and then deletes orphaned objects: ones no open or
// committed session names (a crash between storing and recording, a
// failed commit).
func (sw *Sweeper) sweepUploads(ctx context.Context) {
	backend := sw.cfg.Artifacts.Backend
	if backend == nil {
		return
	}
	keys, err := sw.store.ExpireUploads(ctx, sw.cfg.SweepBatch)
	if err != nil {
		if ctx.Err() == nil {
			sw.logger.Warn("upload sweep failed", "error", err.Error())
		}
		return
	}
	for _, k := range keys {
		if err := backend.Delete(ctx, k); err != nil {
			sw.logger.Warn("delete expired upload", "error", err.Error())
		}
	}
	if len(keys) > 0 {
		sw.logger.Info("upload sweep", "expired_sessions", len(keys))
	}
	if time.Since(sw.lastOrphanSweep) < orphanSweepInterval {
		return
	}
	sw.lastOrphanSweep = time.Now()
	// Temp files of uploads that died mid-stream (fs only); no upload
	// outlives its session, so twice the session lifetime is safe.
	if tmp, ok := backend.(interface {
		RemoveStaleTemp(context.Context, time.Duration) (int, error)
	}); ok {
		if _, err := tmp.RemoveStaleTemp(ctx, 2*sw.cfg.Artifacts.SessionTTL); err != nil {
			sw.logger.Warn("stale temp sweep failed", "error", err.Error())
		}
	}
	if n, err := sw.sweepOrphans(ctx, backend); err != nil {
		sw.logger.Warn("orphan sweep failed", "error", err.Error())
	} else if n > 0 {
		sw.logger.Info("orphan sweep", "deleted_objects", n)
	}
}

// orphanSweepInterval is how often a replica looks for orphaned objects.
const orphanSweepInterval = 10 * time.Minute

// sweepOrphans deletes objects older than twice the session lifetime that
// no live session or file names. Young objects are left alone: their
// session may still be about to record them.
func (sw *Sweeper) sweepOrphans(ctx context.Context, backend objectstore.Backend) (int, error) {
	cutoff := time.Now().Add(-2 * sw.cfg.Artifacts.SessionTTL)
	var candidates []string
	deleted := 0
	flush := func() error {
		if len(candidates) == 0 {
			return nil
		}
		live, err := sw.store.LiveObjectKeys(ctx, candidates)
		if err != nil {
			return err
		}
		for _, k := range candidates {
			if !live[k] {
				if err := backend.Delete(ctx, k); err != nil {
					return err
				}
				deleted++
			}
		}
		candidates = candidates[:0]
		return nil
	}
	err := backend.List(ctx, artifactKeyPrefix, func(key string, modTime time.Time) error {
		if modTime.After(cutoff) {
			return nil
		}
		candidates = append(candidates, key)
		if len(candidates) >= sw.cfg.SweepBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return deleted, err
	}
	return deleted, flush()
}

// maxPruneRounds bounds one retention pass so lease expiry is not starved;
// the next pass carries on where this one stopped.
const maxPruneRounds = 20

// prune deletes what retention no longer keeps, at most every
// PruneInterval. SKIP LOCKED lets every replica do it at once.
func (sw *Sweeper) prune(ctx context.Context) {
	if sw.cfg.PruneInterval <= 0 || time.Since(sw.lastPrune) < sw.cfg.PruneInterval {
		return
	}
	p := store.PruneParams{TaskRetention: sw.cfg.TaskRetention, UploadRetention: sw.cfg.UploadRetention,
		AuditRetention: sw.cfg.AuditRetention, Batch: sw.cfg.SweepBatch}
	var total store.PruneResult
	for range maxPruneRounds {
		res, err := sw.store.Prune(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				sw.logger.Warn("prune failed", "error", err.Error())
			}
			break
		}
		total.Tasks += res.Tasks
		total.Attempts += res.Attempts
		total.Uploads += res.Uploads
		total.AuditEvents += res.AuditEvents
		total.ScheduleFires += res.ScheduleFires
		total.ConsoleSessions += res.ConsoleSessions
		if !res.More {
			sw.lastPrune = time.Now()
			break
		}
	}
	if total.Tasks+total.Uploads+total.AuditEvents+total.ScheduleFires+total.ConsoleSessions > 0 {
		sw.logger.Info("prune", "tasks", total.Tasks, "attempts", total.Attempts,
			"uploads", total.Uploads, "audit_events", total.AuditEvents, "schedule_fires", total.ScheduleFires,
			"console_sessions", total.ConsoleSessions)
	}
}

// sweeperFlags registers the sweeper's flags: its intervals, and the retention it prunes by.
func sweeperFlags(fs *flag.FlagSet, cfg *Config) {
	fs.DurationVar(&cfg.SweepIdleInterval, "sweep-idle-interval", cfg.SweepIdleInterval, "lease sweep interval when no expiry is known to be due sooner")
	fs.DurationVar(&cfg.SweepDormantInterval, "sweep-dormant-interval", cfg.SweepDormantInterval, "sweep interval while nothing in the database can expire (an idle gateway sends no query meanwhile; this replica's own lease grants wake it)")
	fs.DurationVar(&cfg.PruneInterval, "prune-interval", cfg.PruneInterval, "how often old data is deleted (0: never)")
	fs.DurationVar(&cfg.TaskRetention, "task-retention", cfg.TaskRetention, "keep finished tasks (with attempts, results, logs) this long")
	fs.DurationVar(&cfg.UploadRetention, "upload-retention", cfg.UploadRetention, "keep expired and failed upload sessions this long")
	fs.DurationVar(&cfg.AuditRetention, "audit-retention", cfg.AuditRetention, "keep audit events this long (0: forever)")
}
