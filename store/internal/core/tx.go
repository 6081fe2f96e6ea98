package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/internal/failpoint"
)

// Executor is what both a pool and a transaction can do, so helpers run
// inside or outside a transaction alike.
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Psql builds statements with $n placeholders.
var Psql = sq.StatementBuilder.PlaceholderFormat(sq.Dollar)

// InTx runs fn in one READ COMMITTED transaction and commits it when fn
// returns nil, writing before COMMIT the audit record ctx carries
// (WithAudit). A transaction PostgreSQL aborted as a deadlock victim is run
// again from the start (fn must therefore reset whatever it fills in).
func InTx(ctx context.Context, pool *pgxpool.Pool, name string, fn func(tx pgx.Tx) error) error {
	var err error
	for range 3 {
		err = inTxOnce(ctx, pool, name, fn)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != pgerrcode.DeadlockDetected && pgErr.Code != pgerrcode.SerializationFailure) {
			return err
		}
	}
	return err
}

// InBatches runs batch, each call its own transaction, until a batch
// handles no row, and returns how many rows the batches handled: the shape
// of every resumable sweep over a table (sealing, re-wrapping keys). Under
// WithAuditEach, each batch that handled rows writes its own audit row, in
// its transaction, with the count under auditKey; an empty batch writes none.
func InBatches(ctx context.Context, pool *pgxpool.Pool, name, auditKey string, batch func(tx pgx.Tx) (int, error)) (int, error) {
	total := 0
	for {
		n := 0
		batchCtx := auditBatch(ctx)
		err := InTx(batchCtx, pool, name, func(tx pgx.Tx) error {
			var err error
			if n, err = batch(tx); err != nil {
				return err
			}
			if n == 0 {
				AuditSkip(batchCtx)
			} else {
				AuditDetail(batchCtx, auditKey, n)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if n == 0 {
			return total, nil
		}
		auditCommitted(ctx)
	}
}

func inTxOnce(ctx context.Context, pool *pgxpool.Pool, name string, fn func(tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return wrapOp(name, err)
	}
	audited, err := writePendingAudit(ctx, tx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	failpoint.Inject(beforeCommit(name))
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: commit: %w", name, err)
	}
	if audited {
		auditCommitted(ctx)
	}
	failpoint.Inject(afterCommit(name))
	return nil
}

// beforeCommit and afterCommit name the failpoints around a transaction's
// COMMIT: "before-commit:acquire-leases", "after-commit:complete-attempts"…
func beforeCommit(name string) string { return "before-commit:" + strings.ReplaceAll(name, " ", "-") }
func afterCommit(name string) string  { return "after-commit:" + strings.ReplaceAll(name, " ", "-") }

// wrapOp names the operation in an unexpected error but leaves the domain
// sentinels recognisable with errors.Is.
func wrapOp(name string, err error) error {
	for _, sentinel := range sentinels {
		if errors.Is(err, sentinel.err) {
			return err
		}
	}
	return fmt.Errorf("%s: %w", name, err)
}

// InPipelinedTx runs a transaction whose opening statements travel to
// PostgreSQL in one round trip together with BEGIN: queue adds them to a
// batch, read consumes their results in the order queued, then finish may
// run more statements on the same transaction (through ex) before COMMIT.
// Hot paths use it so that a request costs two round trips, not one per
// statement; READ COMMITTED still gives each statement its own snapshot.
// Deadlock victims are retried like InTx.
func InPipelinedTx(ctx context.Context, pool *pgxpool.Pool, name string, queue func(b *pgx.Batch),
	read func(br pgx.BatchResults) error, finish func(ex Executor) error) error {
	var err error
	for range 3 {
		err = inPipelinedTxOnce(ctx, pool, name, queue, read, finish)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != pgerrcode.DeadlockDetected && pgErr.Code != pgerrcode.SerializationFailure) {
			return err
		}
	}
	return err
}

func inPipelinedTxOnce(ctx context.Context, pool *pgxpool.Pool, name string, queue func(b *pgx.Batch),
	read func(br pgx.BatchResults) error, finish func(ex Executor) error) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%s: acquire: %w", name, err)
	}
	defer func() {
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
			// A failed transaction is rolled back; if even that fails the
			// pool discards the connection on release (it is not idle).
			_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		}
		conn.Release()
	}()
	b := &pgx.Batch{}
	b.Queue("begin")
	queue(b)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("%s: begin: %w", name, err)
	}
	if err := read(br); err != nil {
		_ = br.Close()
		return wrapOp(name, err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	tx := &pipelinedConn{Conn: conn}
	if finish != nil {
		if err := finish(tx); err != nil {
			return wrapOp(name, err)
		}
	}
	audited, err := writePendingAudit(ctx, tx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if err == nil && audited {
			auditCommitted(ctx)
		}
	}()
	failpoint.Inject(beforeCommit(name))
	// The wake-ups travel with COMMIT, in one round trip: a NOTIFY failing
	// aborts the transaction, and COMMIT then answers ROLLBACK.
	b = &pgx.Batch{}
	if len(tx.wakeups) > 0 {
		b.Queue(NotifySQL, NotifyChannel, wakeupPayloads(tx.wakeups))
	}
	b.Queue("commit")
	br = conn.SendBatch(ctx, b)
	if len(tx.wakeups) > 0 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return fmt.Errorf("%s: notify: %w", name, err)
		}
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: commit: %w", name, err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("%s: commit: %w", name, pgx.ErrTxCommitRollback)
	}
	failpoint.Inject(afterCommit(name))
	return nil
}

// pipelinedConn is the Executor InPipelinedTx's finish runs on: its
// wake-ups (Notify) are held back and sent with COMMIT.
type pipelinedConn struct {
	*pgxpool.Conn
	wakeups []Wakeup
}

// CompareWorkers orders worker ids for group transactions, which lock many
// workers' rows: every group takes them in this one order, so two groups
// never wait on each other in a cycle.
func CompareWorkers(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }
