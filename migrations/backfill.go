// This file runs backfills: data migrations over a table's rows in key
// order, batch by batch outside any migration's transaction, with their
// progress recorded so that a run stopped half-way (killed, its connection
// lost, interrupted) is resumed by the next where it stopped.

package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BackfillTable records each backfill's progress. The runner creates it,
// as golang-migrate creates its version tables.
const BackfillTable = "schema_backfills"

// Backfill is a data migration over rows in key order. Unlike a sweep that
// picks the rows still to change by a predicate, it walks the table once by
// its key, so a batch never rescans what earlier batches did: the shape for
// large tables (the tasks, the attempts).
type Backfill struct {
	// Name identifies the backfill in schema_backfills; a finished one is
	// not run again.
	Name string
	// BatchSize is the rows per batch (1000).
	BatchSize int
	// Batch changes, within tx, the rows whose key follows after ("" at the
	// start), at most size of them in key order, and returns the key of the
	// last row it changed and how many it changed; none: the backfill is
	// done. The key is text the runner only stores and hands back.
	Batch func(ctx context.Context, tx pgx.Tx, after string, size int) (last string, n int, err error)
}

// BackfillProgress is a backfill's recorded progress after a run.
type BackfillProgress struct {
	LastKey  string // the key of the last row changed
	Rows     int64  // rows changed by every run
	Batches  int    // batches committed by this run
	Finished bool
}

// RunBackfill runs b's batches until it is done. Each batch is one
// transaction that also moves the recorded progress, so a batch commits
// with its progress or not at all: a run stopped half-way is resumed by
// the next after the last committed batch, and no row is changed twice.
// Each batch locks the progress row, so runners started together take
// turns. Each batch waits at most opts.LockTimeout for a lock; a batch that
// times out is tried again, opts.Attempts times at most.
func RunBackfill(ctx context.Context, databaseURL string, b Backfill, opts Options) (BackfillProgress, error) {
	opts = opts.withDefaults()
	if b.BatchSize <= 0 {
		b.BatchSize = 1000
	}
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return BackfillProgress{}, fmt.Errorf("backfill %s: connect: %w", b.Name, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Runners starting together would race to create the table.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('`+BackfillTable+`'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+BackfillTable+` (
			name text PRIMARY KEY,
			last_key text NOT NULL DEFAULT '',
			rows_done bigint NOT NULL DEFAULT 0,
			started_at timestamptz NOT NULL DEFAULT now(),
			updated_at timestamptz NOT NULL DEFAULT now(),
			finished_at timestamptz)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+BackfillTable+` (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, b.Name)
		return err
	}); err != nil {
		return BackfillProgress{}, fmt.Errorf("backfill %s: record: %w", b.Name, err)
	}

	var p BackfillProgress
	for attempt := 1; !p.Finished; {
		err := backfillBatch(ctx, conn, b, opts, &p)
		switch {
		case err == nil:
			attempt = 1
		case isLockTimeout(err) && attempt < opts.Attempts:
			attempt++
		default:
			return p, fmt.Errorf("backfill %s after %q: %w", b.Name, p.LastKey, err)
		}
	}
	return p, nil
}

// backfillBatch runs one batch and moves the progress in its transaction.
func backfillBatch(ctx context.Context, conn *pgx.Conn, b Backfill, opts Options, p *BackfillProgress) error {
	var committed BackfillProgress
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", opts.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT last_key, rows_done, finished_at IS NOT NULL FROM `+BackfillTable+`
			WHERE name = $1 FOR UPDATE`, b.Name).Scan(&committed.LastKey, &committed.Rows, &committed.Finished); err != nil {
			return err
		}
		if committed.Finished {
			return nil
		}
		last, n, err := b.Batch(ctx, tx, committed.LastKey, b.BatchSize)
		if err != nil {
			return err
		}
		if n == 0 {
			committed.Finished = true
			_, err = tx.Exec(ctx, `UPDATE `+BackfillTable+` SET finished_at = now(), updated_at = now() WHERE name = $1`, b.Name)
			return err
		}
		committed.LastKey, committed.Rows = last, committed.Rows+int64(n)
		_, err = tx.Exec(ctx, `UPDATE `+BackfillTable+` SET last_key = $2, rows_done = $3, updated_at = now() WHERE name = $1`,
			b.Name, committed.LastKey, committed.Rows)
		return err
	})
	if err != nil {
		return err
	}
	if !committed.Finished {
		p.Batches++
	}
	p.LastKey, p.Rows, p.Finished = committed.LastKey, committed.Rows, committed.Finished
	return nil
}

// isLockTimeout: err is a statement's lock_timeout (SQLSTATE 55P03).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
