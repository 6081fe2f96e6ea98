// Package lease is the store's lease engine: the worker protocol's verbs
// on the database — acquisition (leases.go, the queue walk in queue.go),
// heartbeats and starts (attempts.go, heartbeat_batch.go), completion
// (complete.go, complete_batch.go), their group-commit batchers, the lease
// token (leasetoken.go), the expiry sweep and the queue's upkeep (sweep.go,
// queuevacuum.go), and the warm-up of the hot statements (warmup.go).
//
// Every write here is fenced with store/internal/fencing and moves tasks
// only along the edges of core.TaskTransitions (see "Fencing",
// "Transitions" and "Shape" in store/doc.go). It stands on
// store/internal/core and never imports the facade (package store), which
// embeds an Engine so that callers keep calling store.Store.
package lease

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// LackingCriticalReleaser ends, by policy, a worker's active attempts whose
// task marks as critical a capability the worker's new advertisement no
// longer has, in the caller's transaction.
type LackingCriticalReleaser func(ctx context.Context, ex core.Executor, workerID uuid.UUID, capabilities []byte) (int, error)

// Releases are the ways a lease ends by policy that the engine needs and
// the facade still writes: they share one statement with the releases of
// the control plane (disabling a worker, an unassignment, a label taken
// away), which lives with the workers domain (store/workers.go).
type Releases struct {
	// Leases ends, in a transaction of its own, leases granted to a poll
	// that went away before it was answered (ReleaseLeases).
	Leases func(ctx context.Context, workerID uuid.UUID, leases []Lease) (int, error)
	// LackingCritical runs when a poll or heartbeat changes a worker's
	// capabilities.
	LackingCritical LackingCriticalReleaser
}

// Engine runs the lease engine's verbs against PostgreSQL.
type Engine struct {
	pool     *pgxpool.Pool
	releases Releases
}

// New returns the engine of a pool; the pool's lifetime is the caller's.
func New(pool *pgxpool.Pool, releases Releases) *Engine {
	return &Engine{pool: pool, releases: releases}
}

func (s *Engine) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}

func (s *Engine) inPipelinedTx(ctx context.Context, name string, queue func(b *pgx.Batch),
	read func(br pgx.BatchResults) error, finish func(ex core.Executor) error) error {
	return core.InPipelinedTx(ctx, s.pool, name, queue, read, finish)
}
