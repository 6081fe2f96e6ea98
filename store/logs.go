package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
	"github.com/worker-gateway/gateway/store/internal/lease"
)

// LogOffsetError refuses a chunk that leaves a gap or disagrees with what
// was already accepted; Expected is where the next chunk must start.
type LogOffsetError struct{ Expected int64 }

func (e *LogOffsetError) Error() string {
	return fmt.Sprintf("log chunk does not continue the log: the next chunk must start at offset %d", e.Expected)
}

// LogAppend is the log's state after an append.
type LogAppend struct {
	NextOffset int64
	Truncated  bool
	Lease      LeaseStatus
}

// truncationMarker ends a log that reached its cap.
func truncationMarker(limit int64) []byte {
	return []byte(fmt.Sprintf("\n[log truncated: this attempt's log reached its cap of %d bytes; later output was dropped]\n", limit))
}

// AppendLog appends a chunk at offset of an attempt's log, idempotently: a
// chunk already accepted is accepted again (checked byte for byte while it is
// still stored), a gap or a disagreeing overlap is a *LogOffsetError. The
// position advances in one fenced UPDATE of the attempt (token, active,
// unexpired lease, and offset = the current position), so concurrent or
// stale appends cannot interleave. Past maxBytes the log keeps what fits and
// one truncation marker; later data is accepted and dropped.
func (s *Store) AppendLog(ctx context.Context, ref AttemptRef, offset int64, data []byte, maxBytes int64) (LogAppend, error) {
	return s.AppendRedactedLog(ctx, ref, offset, data, nil, maxBytes)
}

// LogRedactor redacts a log chunk by chunk (redact.Redactor.Chunk): the
// text to store for data, given the carry the previous chunk left (what it
// held back: the beginning of a secret's spelling whose rest may follow),
// and the carry to keep for the next chunk. A carry names the held bytes,
// never holds them.
type LogRedactor interface {
	Chunk(carry string, data []byte) (keep []byte, next string)
}

// AppendRedactedLog is AppendLog for an attempt whose log is redacted (its
// task has secrets): data advances the worker's offset in full, and what
// is stored in its place is redactor's text, computed in the transaction
// from the carry the attempt's row keeps (log_redact_carry), which the
// same transaction moves on — so a value cut by a chunk's end is redacted
// whole, and two appends cannot both start from one carry. Stored text
// then no longer lines up with the worker's offsets, so a retry of
// accepted data is accepted by its offsets alone, without comparing bytes.
// A nil redactor is AppendLog.
func (s *Store) AppendRedactedLog(ctx context.Context, ref AttemptRef, offset int64, data []byte, redactor LogRedactor, maxBytes int64) (LogAppend, error) {
	redacted := redactor != nil
	var res LogAppend
	err := s.inTx(ctx, "append log", func(tx pgx.Tx) error {
		res = LogAppend{}
		end := offset + int64(len(data))
		var stored int64
		var truncated bool
		var carry *string
		err := tx.QueryRow(ctx, `
			UPDATE worker_task_attempts SET log_offset = $5
			WHERE `+fencing.LeaseHeld("worker_task_attempts", "$1", "$2", "$3")+`
				AND log_offset = $4
			RETURNING log_stored, log_truncated, log_redact_carry`,
			ref.AttemptID, ref.WorkerID, lease.TokenHash(ref.LeaseToken), offset, end).Scan(&stored, &truncated, &carry)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return s.logRetryOrMismatch(ctx, tx, ref, offset, data, maxBytes, redacted, &res)
		case err != nil:
			return fmt.Errorf("advance log: %w", err)
		}
		res.NextOffset, res.Truncated = end, truncated
		keep, oldCarry, newCarry := data, "", ""
		if carry != nil {
			oldCarry = *carry
		}
		if redacted && !truncated {
			keep, newCarry = redactor.Chunk(oldCarry, data)
		}
		if !truncated && (len(keep) > 0 || newCarry != oldCarry) {
			if stored+int64(len(keep)) > maxBytes {
				keep = cutAtRune(keep, maxBytes-stored)
				res.Truncated, newCarry = true, ""
			}
			if err := insertLogChunk(ctx, tx, ref.AttemptID, stored, keep); err != nil {
				return err
			}
			stored += int64(len(keep))
			if res.Truncated {
				marker := truncationMarker(maxBytes)
				if err := insertLogChunk(ctx, tx, ref.AttemptID, stored, marker); err != nil {
					return err
				}
				stored += int64(len(marker))
			}
			if _, err := tx.Exec(ctx, `UPDATE worker_task_attempts SET log_stored = $2, log_truncated = $3, log_redact_carry = $4 WHERE id = $1`,
				ref.AttemptID, stored, res.Truncated, nullIfEmpty(newCarry)); err != nil {
				return fmt.Errorf("record log size: %w", err)
			}
		}
		res.Lease, err = currentLease(ctx, tx, ref)
		return err
	})
	if err != nil {
		return LogAppend{}, err
	}
	return res, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func insertLogChunk(ctx context.Context, tx pgx.Tx, attempt uuid.UUID, at int64, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO attempt_logs (attempt_id, byte_offset, data) VALUES ($1, $2, $3)`, attempt, at, data); err != nil {
		return fmt.Errorf("store log chunk: %w", err)
	}
	return nil
}

// cutAtRune shortens b to at most n bytes without splitting a character.
func cutAtRune(b []byte, n int64) []byte {
	if n <= 0 {
		return nil
	}
	if int64(len(b)) <= n {
		return b
	}
	cut := int(n)
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}

// logRetryOrMismatch runs when the fenced append matched nothing: the
// attempt is not this worker's (not found), its lease is gone (lease lost),
// the chunk repeats accepted data (accepted again), or it does not continue
// the log (offset error).
func (s *Store) logRetryOrMismatch(ctx context.Context, tx pgx.Tx, ref AttemptRef, offset int64, data []byte, maxBytes int64, redacted bool, res *LogAppend) error {
	var (
		logOffset, stored int64
		truncated, live   bool
	)
	err := tx.QueryRow(ctx, `
		SELECT log_offset, log_stored, log_truncated,
			lease_token_hash = $3 AND `+fencing.LeaseLive("worker_task_attempts")+`
		FROM worker_task_attempts WHERE id = $1 AND worker_id = $2`,
		ref.AttemptID, ref.WorkerID, lease.TokenHash(ref.LeaseToken)).Scan(&logOffset, &stored, &truncated, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("read log position: %w", err)
	}
	if !live {
		return ErrLeaseLost
	}
	end := offset + int64(len(data))
	if end > logOffset {
		return &LogOffsetError{Expected: logOffset}
	}
	// A retry of accepted data: compare what is still stored of it (the
	// kept text, not the truncation marker; dropped data cannot be checked).
	kept := stored
	if truncated {
		kept -= int64(len(truncationMarker(maxBytes)))
	}
	if offset < kept && !redacted {
		have, err := readLog(ctx, tx, ref.AttemptID, offset, min(end, kept)-offset)
		if err != nil {
			return err
		}
		if string(have) != string(data[:len(have)]) {
			return &LogOffsetError{Expected: logOffset}
		}
	}
	res.NextOffset, res.Truncated = logOffset, truncated
	res.Lease, err = currentLease(ctx, tx, ref)
	return err
}

// readLog returns up to n stored bytes of an attempt's log from offset.
func readLog(ctx context.Context, ex core.Executor, attempt uuid.UUID, offset, n int64) ([]byte, error) {
	rows, err := ex.Query(ctx, `
		SELECT byte_offset, data FROM attempt_logs
		WHERE attempt_id = $1 AND byte_offset + length(data) > $2 AND byte_offset < $2 + $3
		ORDER BY byte_offset`, attempt, offset, n)
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	defer rows.Close()
	out := make([]byte, 0, n)
	for rows.Next() {
		var at int64
		var chunk []byte
		if err := rows.Scan(&at, &chunk); err != nil {
			return nil, err
		}
		from := max(offset-at, 0)
		to := min(int64(len(chunk)), offset+n-at)
		out = append(out, chunk[from:to]...)
	}
	return out, rows.Err()
}

// LogText is part of an attempt's stored log.
type LogText struct {
	AttemptID     uuid.UUID
	AttemptNumber int
	Offset        int64
	NextOffset    int64
	Data          []byte
	Truncated     bool
	// Complete is true when the attempt has ended: no more data will come.
	Complete bool
	// Stored is the size of the stored log when it was read.
	Stored int64
}

// ReadTaskLog reads one attempt's log (the latest when attemptNumber is 0)
// from offset, up to limit bytes. The scope check and the attempt's state
// are one statement; the log text, when there is some, another.
func (s *Store) ReadTaskLog(ctx context.Context, tenant Tenant, taskID uuid.UUID, attemptNumber int, offset, limit int64) (LogText, error) {
	lt := LogText{Offset: offset}
	var (
		attemptID *uuid.UUID
		number    *int
		stored    *int64
		truncated *bool
		active    *bool
	)
	err := s.pool.QueryRow(ctx, `
		SELECT a.id, a.attempt_number, a.log_stored, a.log_truncated, a.status IN (`+core.ActiveStatuses+`)
		FROM worker_tasks t
		LEFT JOIN LATERAL (
			SELECT id, attempt_number, log_stored, log_truncated, status FROM worker_task_attempts
			WHERE task_id = t.id AND ($2 = 0 OR attempt_number = $2)
			ORDER BY attempt_number DESC LIMIT 1) a ON true
		WHERE t.id = $1 AND `+core.InTenant("t.organization_id", "$3"), taskID, attemptNumber, tenant.Arg(),
	).Scan(&attemptID, &number, &stored, &truncated, &active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return LogText{}, ErrNotFound
	case err != nil:
		return LogText{}, fmt.Errorf("read log: %w", err)
	case attemptID == nil:
		return LogText{}, fmt.Errorf("%w: attempt", ErrNotFound)
	}
	lt.AttemptID, lt.AttemptNumber, lt.Truncated, lt.Stored = *attemptID, *number, *truncated, *stored
	if offset < *stored {
		s.logReads.direct.Add(1)
		if lt.Data, err = readLog(ctx, s.pool, lt.AttemptID, offset, min(*stored-offset, limit)); err != nil {
			return LogText{}, err
		}
	}
	lt.NextOffset = offset + int64(len(lt.Data))
	lt.Complete = !*active && lt.NextOffset >= *stored
	return lt, nil
}

// LogTail is what a shared log reader learns of an attempt in one read.
type LogTail struct {
	// Data is the log from the offset asked, at most the limit asked.
	Data      []byte
	Stored    int64
	Truncated bool
	// Active is false once the attempt ended: its log is then final.
	Active bool
}

// ReadLogTail reads an attempt's log from offset, up to limit bytes, with
// its size and whether the attempt is still active, in one statement (one
// snapshot): a read that says the attempt ended has every byte up to Stored
// that fits in limit. A replica's shared follower reads for followers of
// any scope, each checked when it joined, and so reads for every
// organization.
func (s *Store) ReadLogTail(ctx context.Context, tenant Tenant, attempt uuid.UUID, offset, limit int64) (LogTail, error) {
	s.logReads.shared.Add(1)
	rows, err := s.pool.Query(ctx, `
		SELECT a.log_stored, a.log_truncated, a.status IN (`+core.ActiveStatuses+`), l.byte_offset, l.data
		FROM worker_task_attempts a
		LEFT JOIN LATERAL (
			SELECT byte_offset, data FROM attempt_logs
			WHERE attempt_id = a.id AND byte_offset + length(data) > $2 AND byte_offset < $2 + $3) l ON true
		WHERE a.id = $1 AND `+core.InTenant("a.organization_id", "$4")+`
		ORDER BY l.byte_offset`, attempt, offset, limit, tenant.Arg())
	if err != nil {
		return LogTail{}, fmt.Errorf("read log tail: %w", err)
	}
	defer rows.Close()
	var t LogTail
	found := false
	for rows.Next() {
		var at *int64
		var chunk []byte
		if err := rows.Scan(&t.Stored, &t.Truncated, &t.Active, &at, &chunk); err != nil {
			return LogTail{}, fmt.Errorf("read log tail: %w", err)
		}
		found = true
		if at == nil {
			continue
		}
		from := max(offset-*at, 0)
		to := min(int64(len(chunk)), offset+limit-*at)
		t.Data = append(t.Data, chunk[from:to]...)
	}
	if err := rows.Err(); err != nil {
		return LogTail{}, fmt.Errorf("read log tail: %w", err)
	}
	if !found {
		return LogTail{}, fmt.Errorf("%w: attempt", ErrNotFound)
	}
	if len(t.Data) > 0 {
		s.logReads.sharedData.Add(1)
	}
	return t, nil
}

// logReadCounts counts the statements that read attempt_logs for
// producers: direct reads (a request's own, which always find bytes) and
// the shared reads of a replica's one reader per followed attempt, all and
// those that found bytes.
type logReadCounts struct{ direct, shared, sharedData atomic.Int64 }

// LogReadCounts is a snapshot of a Store's log read counters.
type LogReadCounts struct {
	Direct, Shared, SharedWithData int64
}

// LogReads returns how many log reads this Store ran (tests and metrics).
func (s *Store) LogReads() LogReadCounts {
	return LogReadCounts{Direct: s.logReads.direct.Load(), Shared: s.logReads.shared.Load(), SharedWithData: s.logReads.sharedData.Load()}
}
