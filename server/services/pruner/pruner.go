// Package pruner is the background service deleting what retention no
// longer keeps (Pruner).
package pruner

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// Name names the service: its logs, its spans, Kick.
const Name = "pruner"

const (
	// maxRounds bounds one iteration, so a large backlog is logged (and
	// traced) as it goes; the next iteration carries on at once.
	maxRounds = 20
	// retry is the pause after a failed query (the interval, when shorter).
	retry = 10 * time.Second
)

// Config is how a replica prunes.
type Config struct {
	// Interval is how often it prunes; the list leaves the pruner off when
	// it is not positive.
	Interval time.Duration
	// Retention is what it keeps, and how many rows one statement deletes.
	Retention store.PruneParams
}

// Pruner deletes old terminal tasks (with their attempts, results and
// logs), ended upload rows, audit events (with AuditRetention > 0), old
// schedule fires and expired console sessions: at start, then every
// Interval. Every replica may run one at once: store.Prune deletes in
// batches with SKIP LOCKED.
type Pruner struct {
	services.Unit
	store  *store.Store
	cfg    Config
	logger *slog.Logger
	wake   services.Signal
}

// New builds a replica's pruner.
func New(st *store.Store, cfg Config, u services.Unit) *Pruner {
	return &Pruner{Unit: u, store: st, cfg: cfg, logger: u.Logger(), wake: services.NewSignal()}
}

// RegisterFlags registers the pruner's flags: how often it runs, into
// interval, and the retention it prunes by.
func RegisterFlags(fs *flag.FlagSet, interval, tasks, uploads, audit *time.Duration) {
	fs.DurationVar(interval, "prune-interval", *interval, "how often old data is deleted (0: never)")
	fs.DurationVar(tasks, "task-retention", *tasks, "keep finished tasks (with attempts, results, logs) this long")
	fs.DurationVar(uploads, "upload-retention", *uploads, "keep expired and failed upload sessions this long")
	fs.DurationVar(audit, "audit-retention", *audit, "keep audit events this long (0: forever)")
}

// Kick asks for a pass now.
func (p *Pruner) Kick() { p.wake.Notify() }

// Run prunes until ctx ends.
func (p *Pruner) Run(ctx context.Context) error { return services.RunPasses(ctx, p.wake, p.prune) }

// prune deletes what retention no longer keeps, up to maxRounds batches,
// and returns how long to sleep.
func (p *Pruner) prune(ctx context.Context) time.Duration {
	ctx, span := p.Iteration(ctx)
	defer span.End()
	var total store.PruneResult
	sleep := time.Duration(0) // rounds ran out: carry on
	for range maxRounds {
		res, err := p.store.Prune(ctx, p.cfg.Retention)
		if err != nil {
			if ctx.Err() == nil {
				p.logger.Warn("prune failed", "error", err.Error())
			}
			sleep = services.Jittered(min(retry, p.cfg.Interval))
			break
		}
		total.Tasks += res.Tasks
		total.Attempts += res.Attempts
		total.Uploads += res.Uploads
		total.AuditEvents += res.AuditEvents
		total.ScheduleFires += res.ScheduleFires
		total.ConsoleSessions += res.ConsoleSessions
		if !res.More {
			sleep = p.cfg.Interval
			break
		}
	}
	if total.Tasks+total.Uploads+total.AuditEvents+total.ScheduleFires+total.ConsoleSessions > 0 {
		p.logger.Info("prune", "tasks", total.Tasks, "attempts", total.Attempts,
			"uploads", total.Uploads, "audit_events", total.AuditEvents, "schedule_fires", total.ScheduleFires,
			"console_sessions", total.ConsoleSessions)
	}
	return sleep
}
