package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/worker-gateway/gateway/internal/failpoint"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// SubmitResults accepts one result batch, exactly once in effect.
func (h *handlers) SubmitResults(ctx context.Context, req api.SubmitResultsRequestObject) (api.SubmitResultsResponseObject, error) {
	ref := store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken}
	res, err := h.acceptResultBatch(ctx, ref, req.Params.IdempotencyKey, *req.Body)
	if err != nil {
		return nil, err
	}
	failpoint.Inject("results-after-commit")
	return resultAckResponse{res: res, heartbeatInterval: h.heartbeatInterval(res.Lease.LeaseDuration)}, nil
}

// acceptResultBatch persists one result batch under an idempotency key
// (store.AcceptResultBatch: exactly once, a repeat is answered with the
// stored acknowledgement).
func (h *handlers) acceptResultBatch(ctx context.Context, ref store.AttemptRef, key string, b api.ResultBatch) (store.BatchResult, error) {
	if limit := h.cfg.Limits.RecordsPerBatch; limit > 0 && len(b.Records) > limit {
		return store.BatchResult{}, newProblem(http.StatusRequestEntityTooLarge, problem.TooManyRecords,
			problem.Text(fmt.Sprintf("a batch holds at most %d records", limit)))
	}
	records, err := toStoreRecords(b.Records)
	if err != nil {
		return store.BatchResult{}, err
	}
	// The body was already refused if it had duplicate or unknown fields, so
	// its canonical form is its one meaning.
	sum, err := canonicalSHA256(b)
	if err != nil {
		return store.BatchResult{}, err
	}
	// out_of_scope is the gateway's flag (set in the stored payload when a
	// record is outside scope), never the worker's.
	for i := range b.Records {
		b.Records[i].OutOfScope = nil
	}
	payload, err := json.Marshal(b.Records)
	if err != nil {
		return store.BatchResult{}, err
	}
	return h.store.AcceptResultBatch(ctx, store.AcceptBatchParams{
		AttemptRef:     ref,
		IdempotencyKey: key,
		PayloadSHA256:  sum,
		SequenceNumber: b.SequenceNumber,
		Records:        records,
		Payload:        payload,
		Ack:            renderAck,
	})
}

// renderAck is the acknowledgement's wire form, rendered once and stored.
func renderAck(info store.BatchInfo) ([]byte, error) {
	b, err := json.Marshal(api.ResultAck{
		BatchId:        info.BatchID,
		TaskId:         info.TaskID,
		AttemptId:      info.AttemptID,
		SequenceNumber: info.SequenceNumber,
		Status:         api.Persisted,
		RecordCount:    info.RecordCount,
		Assets:         ptr(info.Assets),
		Threats:        ptr(info.Threats),
		Edges:          ptr(info.Edges),
		OutOfScope:     ptr(info.OutOfScope),
		ReceivedAt:     info.ReceivedAt,
	})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// resultAckResponse writes the stored acknowledgement byte for byte, with
// the lease's current state in headers (a replay's body is the original).
type resultAckResponse struct {
	res               store.BatchResult
	heartbeatInterval float64
}

func (r resultAckResponse) VisitSubmitResultsResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	if r.res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Lease-State", string(r.res.Lease.State))
	w.Header().Set("Lease-TTL-Seconds", strconv.FormatFloat(secondsOf(r.res.Lease.LeaseTTL), 'f', 3, 64))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(r.res.Ack)
	return err
}

// toStoreRecords checks each record has what its kind needs.
func toStoreRecords(in []api.ResultRecord) ([]store.ResultRecord, error) {
	out := make([]store.ResultRecord, 0, len(in))
	for i, r := range in {
		bad := func(what problem.Text) error {
			return problem.Wrap(store.ErrInvalid, problem.Text(fmt.Sprintf("records[%d]: %s", i, what)))
		}
		rec := store.ResultRecord{Kind: string(r.Kind)}
		switch r.Kind {
		case api.ResultRecordKindAsset, api.ResultRecordKindThreat:
			if r.Asset == nil {
				return nil, bad(problem.Text(r.Kind) + " records need asset") // Kind is an enum of the spec
			}
			rec.AssetType, rec.AssetValue = r.Asset.Type, r.Asset.Value
			if r.Details != nil {
				rec.Details = json.RawMessage(*r.Details)
			}
			if r.Kind == api.ResultRecordKindThreat {
				if r.Title == nil || *r.Title == "" {
					return nil, bad("threat records need title")
				}
				rec.Title = *r.Title
				if r.ExternalId != nil {
					rec.ExternalID = *r.ExternalId
				}
				if r.Severity != nil {
					rec.Severity = string(*r.Severity)
				}
				rec.Vulnerability = fromVulnerability(r.Vulnerability)
			}
		case api.ResultRecordKindEdge:
			if r.Asset == nil || r.Target == nil || r.Relation == nil {
				return nil, bad("edge records need asset, target and relation")
			}
			rec.AssetType, rec.AssetValue = r.Asset.Type, r.Asset.Value
			rec.TargetType, rec.TargetValue, rec.Relation = r.Target.Type, r.Target.Value, string(*r.Relation)
		case api.ResultRecordKindData:
			if r.Data == nil {
				return nil, bad("data records need data")
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// ListTaskResults pages a task's stored result batches.
func (h *handlers) ListTaskResults(ctx context.Context, req api.ListTaskResultsRequestObject) (api.ListTaskResultsResponseObject, error) {
	tenant, after, limit, err := readPage(ctx, req.Params.Cursor, req.Params.Limit)
	if err != nil {
		return nil, err
	}
	batches, next, err := h.store.ListTaskResults(ctx, tenant, req.TaskId, after, limit)
	if err != nil {
		return nil, err
	}
	items := make([]api.StoredResultBatch, 0, len(batches))
	for _, b := range batches {
		var records []api.ResultRecord
		if err := json.Unmarshal(b.Records, &records); err != nil {
			return nil, fmt.Errorf("stored batch %s: %w", b.BatchID, err)
		}
		items = append(items, api.StoredResultBatch{
			BatchId: b.BatchID, AttemptId: b.AttemptID, AttemptNumber: ptr(b.AttemptNumber),
			SequenceNumber: b.SequenceNumber, Records: records, ReceivedAt: b.ReceivedAt,
		})
	}
	return api.ListTaskResults200JSONResponse{Items: items, NextCursor: encodeCursor(next)}, nil
}
