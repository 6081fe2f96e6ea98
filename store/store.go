package store

import (
	"context"
	"errors"
	"fmt"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store runs the gateway's domain verbs against PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
}

// New wraps a pool. The pool's lifetime belongs to the caller.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Pool exposes the pool for health checks and tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// executor is what both a pool and a transaction can do, so helpers run
// inside or outside a transaction alike.
type executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// psql builds statements with $n placeholders.
var psql = sq.StatementBuilder.PlaceholderFormat(sq.Dollar)

// inTx runs fn in one READ COMMITTED transaction and commits it when fn
// returns nil. A transaction PostgreSQL aborted as a deadlock victim is run
// again from the start (fn must therefore reset whatever it fills in).
func (s *Store) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	var err error
	for range 3 {
		err = s.inTxOnce(ctx, name, fn)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != pgerrcode.DeadlockDetected && pgErr.Code != pgerrcode.SerializationFailure) {
			return err
		}
	}
	return err
}

func (s *Store) inTxOnce(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return wrapOp(name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: commit: %w", name, err)
	}
	return nil
}

// wrapOp names the operation in an unexpected error but leaves the domain
// sentinels recognisable with errors.Is.
func wrapOp(name string, err error) error {
	for _, sentinel := range domainErrors {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	return fmt.Errorf("%s: %w", name, err)
}
