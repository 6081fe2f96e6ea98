package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/lease"
)

// Store runs the gateway's domain verbs against PostgreSQL. The worker
// protocol's verbs are the lease engine's (store/internal/lease), embedded
// so that they are the Store's; the control plane's are this package's.
type Store struct {
	*lease.Engine
	pool           *pgxpool.Pool
	logReads       logReadCounts
	scheduleLimits ScheduleLimits
}

// New wraps a pool. The pool's lifetime belongs to the caller.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool, scheduleLimits: DefaultScheduleLimits}
	s.Engine = lease.New(pool)
	return s
}

// Pool exposes the pool for health checks and tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// inTx runs fn in one transaction (InTx).
func (s *Store) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}

// inBatches runs batch in transactions until one handles no row (InBatches).
func (s *Store) inBatches(ctx context.Context, name, auditKey string, batch func(tx pgx.Tx) (int, error)) (int, error) {
	return core.InBatches(ctx, s.pool, name, auditKey, batch)
}
