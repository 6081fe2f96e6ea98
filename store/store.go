package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Store runs the gateway's domain verbs against PostgreSQL.
type Store struct {
	pool           *pgxpool.Pool
	logReads       logReadCounts
	scheduleLimits ScheduleLimits
}

// New wraps a pool. The pool's lifetime belongs to the caller.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, scheduleLimits: DefaultScheduleLimits}
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

// inPipelinedTx runs a pipelined transaction (InPipelinedTx).
func (s *Store) inPipelinedTx(ctx context.Context, name string, queue func(b *pgx.Batch),
	read func(br pgx.BatchResults) error, finish func(ex executor) error) error {
	return core.InPipelinedTx(ctx, s.pool, name, queue, read, finish)
}
