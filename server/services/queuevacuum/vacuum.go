// Package queuevacuum is the background service vacuuming the queue of
// leasable tasks (Vacuum).
package queuevacuum

import (
	"context"
	"flag"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// Name names the service: its logs, its spans.
const Name = "queue-vacuum"

// Vacuum vacuums the queue of leasable tasks after every
// -queue-vacuum-every leases this replica granted (store.VacuumQueue
// says why autovacuum alone is too late). It counts leases, not time, so
// an idle gateway never vacuums (and sends no query), and a busy one pays
// for a vacuum only after as many deleted queue rows as make a walk
// noticeably longer. Each replica counts its own leases: with several, the
// queue is vacuumed more often, never less.
type Vacuum struct {
	services.Unit
	store  *store.Store
	every  int64
	logger *slog.Logger
	// runs counts this replica's vacuums and nanos the time they took
	// (metrics).
	runs, nanos atomic.Int64

	leased atomic.Int64
	wake   services.Signal
}

// New builds a replica's queue vacuum.
func New(st *store.Store, every int, u services.Unit) *Vacuum {
	return &Vacuum{Unit: u, store: st, every: int64(every), logger: u.Logger(), wake: services.NewSignal()}
}

// Granted counts n leases granted; enough of them since the last vacuum
// wake the vacuum loop.
func (v *Vacuum) Granted(n int) {
	if v.every <= 0 || n <= 0 {
		return
	}
	if v.leased.Add(int64(n)) >= v.every {
		v.wake.Notify()
	}
}

// Run vacuums whenever granted asks, one vacuum at a time, until ctx ends.
func (v *Vacuum) Run(ctx context.Context) error {
	return services.RunPasses(ctx, v.wake, func(ctx context.Context) time.Duration {
		if v.leased.Load() >= v.every {
			// Leases granted while the vacuum runs count towards the next one.
			v.leased.Store(0)
			v.vacuum(ctx)
		}
		return services.SleepUntilWoken
	})
}

// vacuum vacuums the queue once.
func (v *Vacuum) vacuum(ctx context.Context) {
	ctx, span := v.Iteration(ctx)
	defer span.End()
	start := time.Now()
	if err := v.store.VacuumQueue(ctx); err != nil {
		if ctx.Err() == nil {
			v.logger.Warn("queue vacuum failed; autovacuum will clean the queue later", "error", err.Error())
		}
		return
	}
	v.runs.Add(1)
	v.nanos.Add(int64(time.Since(start)))
}

// RegisterFlags registers the queue vacuum's flag, into every: how many
// leases between two vacuums.
func RegisterFlags(fs *flag.FlagSet, every *int) {
	fs.IntVar(every, "queue-vacuum-every", *every, "vacuum the queue of leasable tasks after this many leases granted by this replica, so acquisitions do not step over the entries of leased tasks until autovacuum comes (0: leave it to autovacuum)")
}

// Collectors are its metrics.
func (v *Vacuum) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_queue_vacuums_total",
			Help: "Vacuums of the queue of leasable tasks this replica ran (one per -queue-vacuum-every leases).",
		}, func() float64 { return float64(v.runs.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_queue_vacuum_seconds_total",
			Help: "Time this replica's queue vacuums took.",
		}, func() float64 { return time.Duration(v.nanos.Load()).Seconds() }),
	}
}
