// Package lease is the store's lease engine: the worker protocol's verbs
// on the database — acquisition and the queue walk (leases.go; the
// queue's rule is the core's, core/queue.go), heartbeats and starts (attempts.go, heartbeat_batch.go), completion
// (complete.go, complete_batch.go), their group-commit batchers, the lease
// token (leasetoken.go), the expiry sweep and the queue's upkeep (sweep.go,
// queuevacuum.go), the releases of leases by policy (release.go: the
// engine's own, and the one statement the control plane's releases share)
// and the warm-up of the hot statements (warmup.go).
//
// Every write here is fenced with store/internal/fencing and moves tasks
// only along the edges of core.TaskTransitions (see "Fencing",
// "Transitions" and "Shape" in store/doc.go). It stands on
// store/internal/core and never imports the facade (package store), which
// embeds an Engine so that callers keep calling store.Store.
package lease

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Engine runs the lease engine's verbs against PostgreSQL.
type Engine struct {
	pool *pgxpool.Pool
}

// New returns the engine of a pool; the pool's lifetime is the caller's.
func New(pool *pgxpool.Pool) *Engine {
	return &Engine{pool: pool}
}

func (s *Engine) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}

func (s *Engine) inPipelinedTx(ctx context.Context, name string, queue func(b *pgx.Batch),
	read func(br pgx.BatchResults) error, finish func(ex core.Executor) error) error {
	return core.InPipelinedTx(ctx, s.pool, name, queue, read, finish)
}
