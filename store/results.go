package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
	"github.com/worker-gateway/gateway/store/internal/lease"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// ResultRecord is one record of a result batch. Kind "asset" and "threat"
// are scanner records, ingested through natural keys; "data" is stored only.
type ResultRecord struct {
	Kind       string
	AssetType  string
	AssetValue string
	Details    json.RawMessage
	ExternalID string
	Title      string
	Severity   string
	// Edge records relate the asset to a target asset.
	Relation    string
	TargetType  string
	TargetValue string
	// Vulnerability is a threat's vulnerability details, if any.
	Vulnerability *Vulnerability
}

// BatchInfo is what an acknowledgement says about a persisted batch.
type BatchInfo struct {
	BatchID        uuid.UUID
	TaskID         uuid.UUID
	AttemptID      uuid.UUID
	SequenceNumber int
	RecordCount    int
	Assets         int
	Threats        int
	Edges          int
	// OutOfScope counts the records about something outside the
	// organization's scan scope: kept in the batch, flagged, not ingested.
	OutOfScope int
	ReceivedAt time.Time
}

// AcceptBatchParams is one result batch from a worker.
type AcceptBatchParams struct {
	AttemptRef
	IdempotencyKey string
	// PayloadSHA256 is the checksum of the request's canonical JSON: the same
	// key with another checksum is refused.
	PayloadSHA256  string
	SequenceNumber int
	Records        []ResultRecord
	// Payload is the records as JSON, kept for producers to page through.
	Payload json.RawMessage
	// Ack renders the acknowledgement; its bytes are stored so a replay is
	// answered byte for byte the same.
	Ack func(BatchInfo) ([]byte, error)
}

// BatchResult is the answer to a batch: the acknowledgement's bytes, whether
// they are a replay, and the lease as it is now.
type BatchResult struct {
	Ack      []byte
	Replayed bool
	Lease    LeaseStatus
}

// AcceptResultBatch accepts a result batch exactly once, in one
// transaction: (1) find the attempt (this worker's, else not found); (2) take
// the idempotency key's advisory lock, refusing a concurrent duplicate as in
// flight; (3) a known key with the same checksum returns the stored
// acknowledgement — even after the lease ended, since the first write was
// fenced — and another checksum is refused; (4) insert the batch row fenced
// on a live lease, locking the attempt row so an expiry or completion orders
// after it; (5) ingest the records; (6) mark the batch persisted with its
// acknowledgement.
func (s *Store) AcceptResultBatch(ctx context.Context, p AcceptBatchParams) (BatchResult, error) {
	var res BatchResult
	err := s.inTx(ctx, "accept result batch", func(tx pgx.Tx) error {
		res = BatchResult{}
		var target ingestTarget
		// The scope lock is taken here and the scope read by the next
		// statement, whose snapshot sees a narrowing the lock waited for
		// (targetscope.ReadLockSQL).
		err := tx.QueryRow(ctx, `
			SELECT t.id, t.organization_id, t.scan_id, t.scan_job_id, `+targetscope.ReadLockSQL("t.organization_id")+`
			FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
			WHERE a.id = $1 AND a.worker_id = $2`, p.AttemptID, p.WorkerID,
		).Scan(&target.taskID, &target.organizationID, &target.scanID, &target.scanJobID, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("find attempt: %w", err)
		}

		var locked bool
		var scopeEnforced *bool
		var scopeEntries []string
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1::text || ':' || $2, 0)), `+
			targetscope.EntriesSQL("$3"), target.taskID, p.IdempotencyKey, target.organizationID).Scan(&locked, &scopeEnforced, &scopeEntries); err != nil {
			return fmt.Errorf("idempotency lock: %w", err)
		}
		if !locked {
			return ErrIdempotencyInFlight
		}
		target.scope = targetscope.NewScope(scopeEnforced != nil && *scopeEnforced, scopeEntries)

		var sum, ack *string
		err = tx.QueryRow(ctx, `SELECT payload_sha256, ack FROM worker_result_batches WHERE task_id = $1 AND idempotency_key = $2`,
			target.taskID, p.IdempotencyKey).Scan(&sum, &ack)
		switch {
		case err == nil && *sum != p.PayloadSHA256:
			return ErrIdempotencyKeyReused
		case err == nil:
			res.Ack, res.Replayed = []byte(*ack), true
		case errors.Is(err, pgx.ErrNoRows):
			if res.Ack, err = insertBatch(ctx, tx, p, target); err != nil {
				return err
			}
		default:
			return fmt.Errorf("find batch: %w", err)
		}
		res.Lease, err = currentLease(ctx, tx, p.AttemptRef)
		return err
	})
	if err != nil {
		return BatchResult{}, err
	}
	return res, nil
}

// ingestTarget is where a batch's records land.
type ingestTarget struct {
	taskID, organizationID uuid.UUID
	scanID, scanJobID      *uuid.UUID
	scope                  targetscope.Scope
}

func insertBatch(ctx context.Context, tx pgx.Tx, p AcceptBatchParams, target ingestTarget) ([]byte, error) {
	info := BatchInfo{TaskID: target.taskID, AttemptID: p.AttemptID, SequenceNumber: p.SequenceNumber, RecordCount: len(p.Records)}
	skip := outOfScopeRecords(target.scope, p.Records)
	payload := p.Payload
	if skip != nil {
		var err error
		if payload, err = flagOutOfScope(payload, skip); err != nil {
			return nil, err
		}
	}
	err := tx.QueryRow(ctx, `
		INSERT INTO worker_result_batches
			(task_id, attempt_id, sequence_number, idempotency_key, payload_sha256, record_count, payload, record_kinds)
		SELECT a.task_id, a.id, $4, $5, $6, $7, $8, $9
		FROM worker_task_attempts a
		WHERE `+fencing.LeaseHeld("a", "$1", "$2", "$3")+`
		FOR SHARE OF a
		ON CONFLICT DO NOTHING
		RETURNING id, received_at`,
		p.AttemptID, p.WorkerID, lease.TokenHash(p.LeaseToken), p.SequenceNumber, p.IdempotencyKey, p.PayloadSHA256, len(p.Records), string(payload),
		recordKinds(target, p.Records, skip),
	).Scan(&info.BatchID, &info.ReceivedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// The key is new (checked under its lock), so either the lease is
		// gone or the sequence number belongs to another batch.
		if _, err := currentLiveLease(ctx, tx, p.AttemptRef); err != nil {
			return nil, err
		}
		return nil, ErrSequenceUsed
	}
	if err != nil {
		return nil, fmt.Errorf("insert batch: %w", err)
	}
	n, err := ingest(ctx, tx, target, p.Records, skip)
	if err != nil {
		return nil, err
	}
	info.Assets, info.Threats, info.Edges, info.OutOfScope = n.assets, n.threats, n.edges, n.outOfScope
	ack, err := p.Ack(info)
	if err != nil {
		return nil, fmt.Errorf("render acknowledgement: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE worker_result_batches SET status = 'persisted', persisted_at = now(), ack = $2 WHERE id = $1`,
		info.BatchID, string(ack)); err != nil {
		return nil, fmt.Errorf("mark batch persisted: %w", err)
	}
	return ack, nil
}

// currentLease reads a lease's state for an answer (lost when it is no
// longer held).
func currentLease(ctx context.Context, ex core.Executor, ref AttemptRef) (LeaseStatus, error) {
	st, err := currentLiveLease(ctx, ex, ref)
	if errors.Is(err, ErrLeaseLost) {
		return LeaseStatus{AttemptID: ref.AttemptID, State: LeaseLost}, nil
	}
	return st, err
}

// currentLiveLease is currentLease that treats a lost lease as ErrLeaseLost.
func currentLiveLease(ctx context.Context, ex core.Executor, ref AttemptRef) (LeaseStatus, error) {
	st := LeaseStatus{AttemptID: ref.AttemptID}
	var (
		cancelling bool
		ttl        float64
		leaseSecs  int
	)
	err := ex.QueryRow(ctx, `
		SELECT a.lease_expires_at, extract(epoch FROM a.lease_expires_at - now())::float8, t.state = 'cancelling', t.lease_duration_seconds
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
		WHERE `+fencing.LeaseHeld("a", "$1", "$2", "$3")+``,
		ref.AttemptID, ref.WorkerID, lease.TokenHash(ref.LeaseToken)).Scan(&st.LeaseExpiresAt, &ttl, &cancelling, &leaseSecs)
	if errors.Is(err, pgx.ErrNoRows) {
		return LeaseStatus{}, ErrLeaseLost
	}
	if err != nil {
		return LeaseStatus{}, fmt.Errorf("read lease: %w", err)
	}
	st.State, st.LeaseTTL, st.LeaseDuration = LeaseActive, core.Seconds(ttl), time.Duration(leaseSecs)*time.Second
	if cancelling {
		st.State = LeaseCancelRequested
	}
	return st, nil
}

// StoredBatch is a persisted result batch as producers page through it.
type StoredBatch struct {
	BatchID        uuid.UUID
	AttemptID      uuid.UUID
	AttemptNumber  int
	SequenceNumber int
	Records        json.RawMessage
	ReceivedAt     time.Time
}

// ListTaskResults pages a task's persisted batches, oldest first.
func (s *Store) ListTaskResults(ctx context.Context, tenant Tenant, taskID uuid.UUID, after *Cursor, limit int) ([]StoredBatch, *Cursor, error) {
	if _, err := s.readTenantTask(ctx, s.pool, tenant, taskID); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select("b.id, b.attempt_id, a.attempt_number, b.sequence_number, coalesce(b.payload, '[]'::jsonb), b.received_at").
		From("worker_result_batches b").Join("worker_task_attempts a ON a.id = b.attempt_id").
		Where(tenant.Where("a.organization_id")).Where(sq.Eq{"b.task_id": taskID}).Where("b.status = 'persisted'")
	batches, next, err := core.ListPage(ctx, s.pool, q,
		core.OldestFirst("b.received_at", "b.id", func(b StoredBatch) Cursor { return Cursor{Time: b.ReceivedAt, ID: b.BatchID} }),
		after, limit, func(r pgx.Row) (StoredBatch, error) {
			var b StoredBatch
			err := r.Scan(&b.BatchID, &b.AttemptID, &b.AttemptNumber, &b.SequenceNumber, &b.Records, &b.ReceivedAt)
			return b, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list results: %w", err)
	}
	return batches, next, nil
}

// recordKinds counts a scan job's batch's records by kind, and those out of
// scope, for the job's summary (scan_job_output); nil for other tasks.
func recordKinds(target ingestTarget, records []ResultRecord, skip []bool) *string {
	if target.scanJobID == nil {
		return nil
	}
	counts := map[string]int{}
	for i, r := range records {
		counts[r.Kind]++
		if skip != nil && skip[i] {
			counts["out_of_scope"]++
		}
	}
	b, _ := json.Marshal(counts)
	s := string(b)
	return &s
}

// flagOutOfScope marks the records skip names "out_of_scope": true in a
// batch's stored payload (a JSON array of records).
func flagOutOfScope(payload json.RawMessage, skip []bool) (json.RawMessage, error) {
	var recs []map[string]json.RawMessage
	if err := json.Unmarshal(payload, &recs); err != nil || len(recs) != len(skip) {
		return nil, fmt.Errorf("flag out-of-scope records: payload does not match the records")
	}
	for i, out := range skip {
		if out {
			recs[i]["out_of_scope"] = json.RawMessage(`true`)
		}
	}
	b, err := json.Marshal(recs)
	if err != nil {
		return nil, fmt.Errorf("flag out-of-scope records: %w", err)
	}
	return b, nil
}
