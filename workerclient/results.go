package workerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Result batches: LeasedTask.Emit buffers records, cuts them into numbered
// batches and sends each with POST /v1/attempts/{id}/results, one at a time
// and in order. A batch is encoded once, when it is cut: every retry sends
// the same bytes under the same Idempotency-Key, so a batch whose answer was
// lost is acknowledged again (Idempotent-Replayed) instead of stored twice.

const (
	defaultResultBatchSize = 100
	maxResultBatchSize     = 10000 // ResultBatch.records maxItems
	// A batch is cut before its encoded body would pass this, whatever its
	// record count: well under the gateway's default limit (4 MiB).
	maxResultBatchBytes = 1 << 20
	maxSequenceNumber   = math.MaxInt32 // ResultBatch.sequence_number maximum
	// How much of a results answer is read.
	maxResultAnswerBytes = 1 << 20
)

// batchOverhead is the encoded size of a batch besides its records' bytes
// and the commas between them.
var batchOverhead = len(`{"sequence_number":2147483647,"records":[]}`)

var (
	errNotLeased     = errors.New("workerclient: the task was not leased by a Worker")
	errResultsClosed = errors.New("workerclient: the attempt has ended; results are no longer accepted")
)

// Emit sends records as results of the attempt. It buffers them and sends a
// batch whenever ResultBatchSize records are buffered (or the batch's body
// would pass 1 MiB); the runtime sends what is left once the handler
// returns nil, before it completes the attempt. Emit returns once the records
// are buffered and every batch they filled has been acknowledged.
//
// Each batch is retried, with the same Idempotency-Key and body, on
// transport errors, 429, 5xx and idempotency-in-flight, until ctx is done or
// the lease ends. A batch the gateway refuses (another 4xx) cannot be
// delivered: that error is returned by this and every later Emit and Flush,
// and a handler that returns nil regardless has its attempt reported failed
// (CodeResultsUndelivered). When the gateway answers lease-lost, the handler's
// context is cancelled with ErrLeaseLost and the error wraps ErrLeaseLost.
// When ctx ends first, the batch stays queued and the next Emit or Flush
// sends it again.
//
// Records are checked against the contract before they are buffered: an
// invalid record is an error and nothing of that call is buffered. Emit is
// safe for concurrent use by the handler's goroutines; it must not be called
// after the handler returned.
func (t *LeasedTask) Emit(ctx context.Context, records ...apiclient.ResultRecord) error {
	if t.sink != nil {
		if _, err := encodeRecords(records, maxResultBatchBytes); err != nil {
			return err
		}
		return t.sink.Emit(ctx, records)
	}
	if t.lease == nil || t.lease.results == nil {
		return errNotLeased
	}
	return t.lease.results.emit(ctx, records)
}

// Flush sends the records Emit buffered and returns once every batch emitted
// so far has been acknowledged. Calling it is optional: the runtime flushes
// after the handler returns nil.
func (t *LeasedTask) Flush(ctx context.Context) error {
	if t.sink != nil {
		return t.sink.Flush(ctx)
	}
	if t.lease == nil || t.lease.results == nil {
		return errNotLeased
	}
	return t.lease.results.flush(ctx)
}

// resultKey is a batch's Idempotency-Key: derived from the attempt and the
// sequence number, so that every retry of a batch carries the same key.
func resultKey(attempt uuid.UUID, seq int) string {
	return attempt.String() + ":" + strconv.Itoa(seq)
}

// resultBatch is one batch, encoded once.
type resultBatch struct {
	seq     int
	key     string
	body    []byte
	records int
	// tried: a delivery began (its answer may have been lost). A tried
	// batch is resent as it was, never moved into the completion.
	tried bool
}

// deliverFunc sends one batch, retrying what can be retried. It returns nil
// once the gateway acknowledged the batch; otherwise final says whether the
// batch can never be delivered (a refusal, a lost lease) rather than not yet
// (ctx ended first).
type deliverFunc func(ctx context.Context, b *resultBatch) (final bool, err error)

// resultSender buffers one attempt's records and sends them in batches.
type resultSender struct {
	attempt  uuid.UUID
	size     int // records per batch
	maxBytes int // encoded bytes per batch
	deliver  deliverFunc
	sending  chan struct{} // holds a token while batches are sent: one sender at a time, in order

	mu       sync.Mutex
	buf      []json.RawMessage // encoded records not yet in a batch
	bufBytes int               // their size, with separating commas
	queue    []*resultBatch    // batches cut and not yet acknowledged, in order
	next     int               // sequence number of the next batch
	acked    int               // highest acknowledged sequence number, 0 for none
	err      error             // a batch can never be delivered: no more results
	closed   bool              // the handler returned
}

func newResultSender(attempt uuid.UUID, size, maxBytes int, deliver deliverFunc) *resultSender {
	return &resultSender{
		attempt:  attempt,
		size:     size,
		maxBytes: maxBytes,
		deliver:  deliver,
		sending:  make(chan struct{}, 1),
		next:     1,
	}
}

func (s *resultSender) emit(ctx context.Context, records []apiclient.ResultRecord) error {
	enc, err := encodeRecords(records, s.maxBytes)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.refusal(); err != nil {
		s.mu.Unlock()
		return err
	}
	for _, raw := range enc {
		if err = s.add(raw); err != nil {
			break
		}
	}
	pending := len(s.queue) > 0
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if !pending {
		return nil
	}
	return s.drain(ctx)
}

func (s *resultSender) flush(ctx context.Context) error {
	s.mu.Lock()
	err := s.refusal()
	if err == nil {
		err = s.cut()
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.drain(ctx)
}

// finish ends the handler's results: nothing more is accepted. With flush,
// it sends what is buffered (and any batch an interrupted call left queued);
// without, buffered records are dropped. It returns the highest acknowledged
// sequence number, which is what the completion may claim.
func (s *resultSender) finish(ctx context.Context, flush bool) (acked int, err error) {
	s.mu.Lock()
	s.closed = true
	if flush {
		err = s.cut()
	}
	pending := len(s.queue) > 0
	s.mu.Unlock()
	switch {
	case err != nil:
	case flush:
		err = s.drain(ctx)
	case pending:
		// A batch may be in flight from a goroutine the handler left
		// behind: wait for its answer, unless ctx is done (which ends it).
		select {
		case s.sending <- struct{}{}:
			<-s.sending
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked, err
}

// finishInline ends the handler's results like finish(ctx, true), except
// that the last batch, when it was never sent, is not sent here: it is
// returned to travel in the completion (final_results), under the same key
// the gateway would have stored it by, so one request is saved. The earlier
// batches are delivered first; the completion may then claim them all.
func (s *resultSender) finishInline(ctx context.Context) (acked int, last *resultBatch, err error) {
	// Hold the sending token, so no delivery is in flight while the queue
	// is trimmed.
	select {
	case s.sending <- struct{}{}:
	case <-ctx.Done():
		acked, err = s.finish(ctx, true)
		return acked, nil, err
	}
	s.mu.Lock()
	s.closed = true
	err = s.cut()
	if n := len(s.queue); err == nil && s.err == nil && n > 0 && !s.queue[n-1].tried {
		last, s.queue = s.queue[n-1], s.queue[:n-1]
	}
	s.mu.Unlock()
	<-s.sending
	if err == nil {
		err = s.drain(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		return s.acked, nil, err
	}
	return s.acked, last, nil
}

// refusal is why no more records are accepted, or nil. s.mu is held.
func (s *resultSender) refusal() error {
	if s.closed {
		return errResultsClosed
	}
	return s.err
}

// add buffers one encoded record, cutting a batch when the buffer is full.
// s.mu is held.
func (s *resultSender) add(raw json.RawMessage) error {
	if len(s.buf) > 0 && batchOverhead+s.bufBytes+1+len(raw) > s.maxBytes {
		if err := s.cut(); err != nil {
			return err
		}
	}
	if len(s.buf) > 0 {
		s.bufBytes++ // the comma before it
	}
	s.buf = append(s.buf, raw)
	s.bufBytes += len(raw)
	if len(s.buf) >= s.size {
		return s.cut()
	}
	return nil
}

// cut turns the buffered records into the next batch. s.mu is held.
func (s *resultSender) cut() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.next > maxSequenceNumber {
		return errors.New("workerclient: too many result batches for one attempt")
	}
	seq := s.next
	s.next++
	s.queue = append(s.queue, &resultBatch{
		seq:     seq,
		key:     resultKey(s.attempt, seq),
		body:    encodeBatch(seq, s.buf),
		records: len(s.buf),
	})
	s.buf, s.bufBytes = nil, 0
	return nil
}

// drain sends the queued batches in order, one at a time, and returns once
// the queue is empty (including batches other goroutines queued meanwhile),
// a batch fails, or ctx is done.
func (s *resultSender) drain(ctx context.Context) error {
	s.mu.Lock()
	idle := len(s.queue) == 0
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if idle {
		return nil // a batch stays queued until acknowledged: none is in flight
	}
	select {
	case s.sending <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("workerclient: sending results: %w", context.Cause(ctx))
	}
	defer func() { <-s.sending }()
	for {
		s.mu.Lock()
		if s.err != nil || len(s.queue) == 0 {
			err := s.err
			s.mu.Unlock()
			return err
		}
		b := s.queue[0]
		b.tried = true
		s.mu.Unlock()

		final, err := s.deliver(ctx, b)

		s.mu.Lock()
		if err != nil {
			if final {
				s.err = err
			}
			s.mu.Unlock()
			return err
		}
		s.queue = s.queue[1:]
		s.acked = b.seq
		s.mu.Unlock()
	}
}

// encodeBatch is the body of a batch: a ResultBatch with records already
// encoded.
func encodeBatch(seq int, records []json.RawMessage) []byte {
	n := batchOverhead
	for _, r := range records {
		n += len(r) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"sequence_number":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"records":[`...)
	for i, r := range records {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r...)
	}
	return append(b, "]}"...)
}

// encodeRecords checks records against the contract and encodes them, as
// Emit does before buffering anything: each must fit in a batch of maxBytes.
func encodeRecords(records []apiclient.ResultRecord, maxBytes int) ([]json.RawMessage, error) {
	enc := make([]json.RawMessage, 0, len(records))
	for i := range records {
		raw, err := encodeRecord(&records[i])
		if err != nil {
			return nil, fmt.Errorf("workerclient: result record %d: %w", i, err)
		}
		if batchOverhead+len(raw) > maxBytes {
			return nil, fmt.Errorf("workerclient: result record %d: %d bytes encoded, more than a batch may hold (%d)",
				i, len(raw), maxBytes-batchOverhead)
		}
		enc = append(enc, raw)
	}
	return enc, nil
}

var assetTypePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,49}$`)

// encodeRecord checks a record against the contract and encodes it.
func encodeRecord(r *apiclient.ResultRecord) (json.RawMessage, error) {
	if !r.Kind.Valid() {
		return nil, fmt.Errorf("kind %q is not asset, threat or data", r.Kind)
	}
	switch r.Kind {
	case apiclient.ResultRecordKindAsset, apiclient.ResultRecordKindThreat:
		if r.Asset == nil {
			return nil, fmt.Errorf("a %s record needs an asset", r.Kind)
		}
	case apiclient.ResultRecordKindData:
		if r.Data == nil {
			return nil, errors.New("a data record needs data")
		}
	}
	if r.Kind == apiclient.ResultRecordKindThreat && (r.Title == nil || *r.Title == "") {
		return nil, errors.New("a threat record needs a title")
	}
	if a := r.Asset; a != nil {
		if !assetTypePattern.MatchString(a.Type) {
			return nil, fmt.Errorf("asset type %q does not match %s", a.Type, assetTypePattern)
		}
		if n := utf8.RuneCountInString(a.Value); n < 1 || n > 2000 {
			return nil, fmt.Errorf("asset value has %d characters, not 1..2000", n)
		}
	}
	if r.Severity != nil && !r.Severity.Valid() {
		return nil, fmt.Errorf("severity %q is not info, low, medium, high or critical", *r.Severity)
	}
	if r.Title != nil && utf8.RuneCountInString(*r.Title) > 1000 {
		return nil, errors.New("title is longer than 1000 characters")
	}
	if r.ExternalId != nil && utf8.RuneCountInString(*r.ExternalId) > 500 {
		return nil, errors.New("external_id is longer than 500 characters")
	}
	if r.Details != nil && !isJSONObject(*r.Details) {
		return nil, errors.New("details is not a JSON object")
	}
	if r.Data != nil && !isJSONObject(*r.Data) {
		return nil, errors.New("data is not a JSON object")
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return raw, nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// ---- the runtime's side: sending a batch for a lease ----

// resultDeliverer sends ls's batches. A send stops when ls's context ends
// (the lease lost, cancellation requested, the deadline) as well as ctx.
func (r *runner) resultDeliverer(ls *lease) deliverFunc {
	return func(ctx context.Context, b *resultBatch) (bool, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(ls.ctx, func() { cancel(context.Cause(ls.ctx)) })
		defer stop()

		policy := callRetry.withLog(func(err error, delay time.Duration) {
			ls.log.Warn("sending results failed; retrying", "sequence_number", b.seq, "error", err, "retry_in", delay.String())
		})
		err := retry(ctx, policy, func(ctx context.Context) error {
			if r.isLost(ls) {
				return &permanentError{fmt.Errorf("workerclient: results batch %d: %w", b.seq, ErrLeaseLost)}
			}
			err := r.submitResults(ctx, ls, b)
			if err == nil || ctx.Err() != nil {
				return err
			}
			var apiErr *APIError
			switch {
			case isRevoked(err):
				r.revoked(err)
				return &permanentError{fmt.Errorf("%w: %w", ErrLeaseLost, err)}
			case errors.As(err, &apiErr) && apiErr.Code == problem.LeaseLost:
				ls.log.Warn("the gateway refused results: lease lost", "sequence_number", b.seq)
				r.markLost(ls)
				return &permanentError{fmt.Errorf("%w: %w", ErrLeaseLost, err)}
			case !isTransient(err):
				ls.log.Error("the gateway refused a results batch", "sequence_number", b.seq, "records", b.records, "error", err)
			}
			return err
		})
		switch {
		case err == nil:
			return false, nil
		case isInterrupted(err):
			return false, fmt.Errorf("workerclient: results batch %d: %w", b.seq, err)
		}
		return true, err
	}
}

// submitResults sends one batch once and applies the lease state its answer
// reports.
func (r *runner) submitResults(ctx context.Context, ls *lease, b *resultBatch) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := time.Now()
	hr, err := r.w.client.SubmitResultsWithBody(ctx, ls.id,
		&apiclient.SubmitResultsParams{LeaseToken: ls.token, IdempotencyKey: b.key},
		"application/json", bytes.NewReader(b.body))
	if err != nil {
		return fmt.Errorf("submit results: %w", err)
	}
	defer func() { _ = hr.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(hr.Body, maxResultAnswerBytes))
	if err != nil {
		return fmt.Errorf("submit results: reading the answer: %w", err)
	}
	r.applyLeaseHeaders(ls, hr.Header, sent)
	if err := checkResponse("submit results", hr, body); err != nil {
		return err
	}
	var ack apiclient.ResultAck
	if err := json.Unmarshal(body, &ack); err != nil {
		return fmt.Errorf("submit results: unexpected answer %s: %w", hr.Status, err)
	}
	replayed := hr.Header.Get("Idempotent-Replayed") == "true"
	if ack.SequenceNumber != b.seq {
		ls.log.Warn("results acknowledged under another sequence number",
			"sequence_number", b.seq, "acknowledged", ack.SequenceNumber, "replayed", replayed)
	}
	ls.log.Debug("results batch acknowledged", "sequence_number", b.seq, "records", b.records,
		"batch_id", ack.BatchId, "replayed", replayed)
	return nil
}

// applyLeaseHeaders applies the lease state an attempt-scoped answer reports
// in headers Lease-State and Lease-TTL-Seconds, as a heartbeat answer would
// be applied, except that it renews nothing.
func (r *runner) applyLeaseHeaders(ls *lease, h http.Header, sent time.Time) {
	state := apiclient.LeaseState(h.Get("Lease-State"))
	ttl, ttlErr := strconv.ParseFloat(h.Get("Lease-TTL-Seconds"), 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ls.lost {
		return
	}
	switch state {
	case stateLost:
		ls.lost = true
		ls.log.Warn("the gateway reports the lease lost")
		ls.cancel(ErrLeaseLost)
		return
	case stateCancelRequested:
		if ls.ctx.Err() == nil {
			ls.log.Info("the gateway requested cancellation")
		}
		ls.cancel(ErrCancelRequested)
	}
	if state != "" && ttlErr == nil && ttl >= 0 && !math.IsInf(ttl, 0) {
		ls.expiresAt = sent.Add(seconds(ttl))
	}
}

// undeliveredError is the failure reported when a successful handler's
// results could not all be delivered: retryable unless the gateway refused a
// batch outright (retrying the task would send it again).
func undeliveredError(err error) error {
	var apiErr *APIError
	refused := errors.As(err, &apiErr) && !isTransient(err)
	return &TaskError{Code: CodeResultsUndelivered, Message: err.Error(), Retryable: !refused}
}
