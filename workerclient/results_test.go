package workerclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// ---- the sender on its own, with a fake delivery ----

type delivery struct {
	final bool
	err   error
}

// fakeDelivery records every batch handed to it and answers with the queued
// outcomes, then with success.
type fakeDelivery struct {
	mu       sync.Mutex
	batches  []*resultBatch
	outcomes []delivery
}

func (d *fakeDelivery) deliver(_ context.Context, b *resultBatch) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.batches = append(d.batches, b)
	if len(d.outcomes) > 0 {
		o := d.outcomes[0]
		d.outcomes = d.outcomes[1:]
		return o.final, o.err
	}
	return false, nil
}

func (d *fakeDelivery) sent() []*resultBatch {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*resultBatch(nil), d.batches...)
}

func dataRecord(i int) apiclient.ResultRecord {
	data := apiclient.JSONObject(fmt.Sprintf(`{"i":%d}`, i))
	return apiclient.ResultRecord{Kind: apiclient.ResultRecordKindData, Data: &data}
}

func dataRecords(from, to int) []apiclient.ResultRecord {
	var rs []apiclient.ResultRecord
	for i := from; i < to; i++ {
		rs = append(rs, dataRecord(i))
	}
	return rs
}

// decodeBatch decodes a batch body as the gateway would: unknown fields are
// an error.
func decodeBatch(t *testing.T, body []byte) apiclient.ResultBatch {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var b apiclient.ResultBatch
	require.NoError(t, dec.Decode(&b), "batch body %s", body)
	return b
}

// recordIndexes returns the "i" of each data record of a batch body.
func recordIndexes(t *testing.T, body []byte) []int {
	t.Helper()
	var is []int
	for _, r := range decodeBatch(t, body).Records {
		require.Equal(t, apiclient.ResultRecordKindData, r.Kind)
		var d struct{ I int }
		require.NoError(t, json.Unmarshal(*r.Data, &d))
		is = append(is, d.I)
	}
	return is
}

func TestResultKeyIsDerivedFromAttemptAndSequence(t *testing.T) {
	t.Parallel()
	a := uuid.MustParse("0193f1a2-7c4e-7d1a-9a51-6b3f0e2c4d10")
	assert.Equal(t, "0193f1a2-7c4e-7d1a-9a51-6b3f0e2c4d10:1", resultKey(a, 1))
	assert.Equal(t, resultKey(a, 7), resultKey(a, 7), "stable")
	assert.NotEqual(t, resultKey(a, 1), resultKey(a, 2))
	assert.NotEqual(t, resultKey(a, 1), resultKey(uuid.New(), 1))
	assert.LessOrEqual(t, len(resultKey(a, maxSequenceNumber)), 255, "within the header's limit")
}

func TestEncodeBatchIsAResultBatch(t *testing.T) {
	t.Parallel()
	recs := []apiclient.ResultRecord{
		{Kind: apiclient.ResultRecordKindAsset, Asset: &apiclient.AssetRef{Type: "ip", Value: "127.0.0.1"}},
		{Kind: apiclient.ResultRecordKindThreat, Asset: &apiclient.AssetRef{Type: "ip", Value: "127.0.0.1"},
			ExternalId: new("open-port-22"), Title: new("SSH reachable"), Severity: new(apiclient.Low)},
	}
	var raws []json.RawMessage
	for i := range recs {
		raw, err := encodeRecord(&recs[i])
		require.NoError(t, err)
		raws = append(raws, raw)
	}
	body := encodeBatch(12, raws)
	want, err := json.Marshal(apiclient.ResultBatch{SequenceNumber: 12, Records: recs})
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(body))
	assert.Equal(t, recs, decodeBatch(t, body).Records)
	assert.Equal(t, `{"sequence_number":3,"records":[]}`, string(encodeBatch(3, nil)))
	assert.Equal(t, len(`{"sequence_number":2147483647,"records":[]}`), len(encodeBatch(maxSequenceNumber, nil)))
}

func TestEmitBatchesBySizeAndNumbersBatchesFromOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var d fakeDelivery
	attempt := uuid.New()
	s := newResultSender(attempt, 3, maxResultBatchBytes, d.deliver)

	require.NoError(t, s.emit(ctx, dataRecords(0, 2)))
	assert.Empty(t, d.sent(), "below the batch size nothing is sent")
	require.NoError(t, s.emit(ctx, dataRecords(2, 7)))
	sent := d.sent()
	require.Len(t, sent, 2, "7 records make two full batches of 3")
	require.NoError(t, s.flush(ctx))
	require.NoError(t, s.flush(ctx), "a flush with nothing buffered sends nothing")
	sent = d.sent()
	require.Len(t, sent, 3)

	want := [][]int{{0, 1, 2}, {3, 4, 5}, {6}}
	for i, b := range sent {
		seq := i + 1
		assert.Equal(t, seq, b.seq)
		assert.Equal(t, attempt.String()+":"+strconv.Itoa(seq), b.key)
		assert.Equal(t, seq, decodeBatch(t, b.body).SequenceNumber)
		assert.Equal(t, want[i], recordIndexes(t, b.body))
		assert.Equal(t, len(want[i]), b.records)
	}

	acked, err := s.finish(ctx, true)
	require.NoError(t, err)
	assert.Equal(t, 3, acked)
	assert.ErrorIs(t, s.emit(ctx, dataRecords(7, 8)), errResultsClosed, "nothing after the handler returned")
	assert.ErrorIs(t, s.flush(ctx), errResultsClosed)
}

func TestEmitCutsBatchesBeforeTheyGetTooLarge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var d fakeDelivery
	big := func(i int) apiclient.ResultRecord {
		data := apiclient.JSONObject(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", 100)))
		return apiclient.ResultRecord{Kind: apiclient.ResultRecordKindData, Data: &data}
	}
	raw, err := encodeRecord(new(big(0)))
	require.NoError(t, err)
	limit := batchOverhead + 3*len(raw) + 2 // exactly three records fit
	s := newResultSender(uuid.New(), 100, limit, d.deliver)

	for i := range 7 {
		require.NoError(t, s.emit(ctx, []apiclient.ResultRecord{big(i)}))
	}
	require.NoError(t, s.flush(ctx))
	sent := d.sent()
	require.Len(t, sent, 3)
	for i, b := range sent {
		assert.LessOrEqual(t, len(b.body), limit)
		assert.Equal(t, i+1, b.seq)
	}
	assert.Equal(t, []int{3, 3, 1}, []int{sent[0].records, sent[1].records, sent[2].records})
	assert.Len(t, sent[0].body, limit-len("2147483647")+len("1"), "full, but for the sequence number's digits")

	huge := apiclient.ResultRecord{Kind: apiclient.ResultRecordKindData, Data: new(apiclient.JSONObject(`{"pad":"` + strings.Repeat("x", limit) + `"}`))}
	err = s.emit(ctx, []apiclient.ResultRecord{dataRecord(100), huge})
	assert.ErrorContains(t, err, "more than a batch may hold")
	require.NoError(t, s.flush(ctx))
	assert.Len(t, d.sent(), 3, "a rejected call buffers none of its records")
}

func TestEmitRejectsRecordsTheContractRejects(t *testing.T) {
	t.Parallel()
	ip := &apiclient.AssetRef{Type: "ip", Value: "127.0.0.1"}
	for name, r := range map[string]apiclient.ResultRecord{
		"unknown kind":       {Kind: "finding", Asset: ip},
		"asset without ref":  {Kind: apiclient.ResultRecordKindAsset},
		"bad asset type":     {Kind: apiclient.ResultRecordKindAsset, Asset: &apiclient.AssetRef{Type: "IP", Value: "x"}},
		"empty asset value":  {Kind: apiclient.ResultRecordKindAsset, Asset: &apiclient.AssetRef{Type: "ip"}},
		"threat no title":    {Kind: apiclient.ResultRecordKindThreat, Asset: ip, Severity: new(apiclient.High)},
		"bad severity":       {Kind: apiclient.ResultRecordKindThreat, Asset: ip, Title: new("t"), Severity: new(apiclient.Severity("urgent"))},
		"data without data":  {Kind: apiclient.ResultRecordKindData},
		"details not object": {Kind: apiclient.ResultRecordKindAsset, Asset: ip, Details: new(apiclient.JSONObject(`[1]`))},
		"details invalid":    {Kind: apiclient.ResultRecordKindAsset, Asset: ip, Details: new(apiclient.JSONObject(`{"a":`))},
		"data null":          {Kind: apiclient.ResultRecordKindData, Data: new(apiclient.JSONObject(`null`))},
	} {
		_, err := encodeRecord(&r)
		assert.Error(t, err, name)
	}
	var d fakeDelivery
	s := newResultSender(uuid.New(), 1, maxResultBatchBytes, d.deliver)
	err := s.emit(t.Context(), []apiclient.ResultRecord{dataRecord(1), {Kind: apiclient.ResultRecordKindData}})
	assert.ErrorContains(t, err, "result record 1")
	assert.Empty(t, d.sent(), "nothing of a rejected call is buffered")
}

func TestAnInterruptedBatchIsResentWithTheSameKeyAndBody(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := fakeDelivery{outcomes: []delivery{{err: context.DeadlineExceeded}}}
	s := newResultSender(uuid.New(), 2, maxResultBatchBytes, d.deliver)

	err := s.emit(ctx, dataRecords(0, 3))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, s.emit(ctx, dataRecords(3, 4)), "the next call sends the queued batch first")
	sent := d.sent()
	require.Len(t, sent, 3)
	assert.Same(t, sent[0], sent[1], "the retry is the same batch")
	assert.Equal(t, 1, sent[1].seq)
	assert.Equal(t, []int{0, 1}, recordIndexes(t, sent[1].body))
	assert.Equal(t, 2, sent[2].seq)
	assert.Equal(t, []int{2, 3}, recordIndexes(t, sent[2].body))
	acked, err := s.finish(ctx, true)
	require.NoError(t, err)
	assert.Equal(t, 2, acked)
}

func TestARefusedBatchStopsAllResults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	refused := &APIError{Op: "submit results", Status: 422, Code: "idempotency-key-reused"}
	d := fakeDelivery{outcomes: []delivery{{}, {final: true, err: refused}}}
	s := newResultSender(uuid.New(), 1, maxResultBatchBytes, d.deliver)

	require.NoError(t, s.emit(ctx, dataRecords(0, 1)))
	require.ErrorIs(t, s.emit(ctx, dataRecords(1, 2)), refused)
	assert.ErrorIs(t, s.emit(ctx, dataRecords(2, 3)), refused, "later calls fail at once")
	assert.ErrorIs(t, s.flush(ctx), refused)
	assert.Len(t, d.sent(), 2)
	acked, err := s.finish(ctx, true)
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, 1, acked, "only the acknowledged batch may be claimed")

	var te *TaskError
	require.ErrorAs(t, undeliveredError(err), &te)
	assert.Equal(t, CodeResultsUndelivered, te.Code)
	assert.False(t, te.Retryable, "a refused batch would be refused again")
	require.ErrorAs(t, undeliveredError(context.DeadlineExceeded), &te)
	assert.True(t, te.Retryable)
}

func TestFinishWithoutFlushDropsTheBuffer(t *testing.T) {
	t.Parallel()
	var d fakeDelivery
	s := newResultSender(uuid.New(), 2, maxResultBatchBytes, d.deliver)
	require.NoError(t, s.emit(t.Context(), dataRecords(0, 3)))
	acked, err := s.finish(t.Context(), false)
	require.NoError(t, err)
	assert.Equal(t, 1, acked)
	assert.Len(t, d.sent(), 1)
}

func TestConcurrentEmitSendsEveryRecordOnceInSequence(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var inFlight, overlap sync.Mutex // a second sender at once would find inFlight locked
	overlapped := false
	d := &fakeDelivery{}
	deliver := func(ctx context.Context, b *resultBatch) (bool, error) {
		if !inFlight.TryLock() {
			overlap.Lock()
			overlapped = true
			overlap.Unlock()
			return d.deliver(ctx, b)
		}
		defer inFlight.Unlock()
		time.Sleep(time.Millisecond)
		return d.deliver(ctx, b)
	}
	s := newResultSender(uuid.New(), 10, maxResultBatchBytes, deliver)
	const goroutines, each = 8, 125
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				assert.NoError(t, s.emit(ctx, []apiclient.ResultRecord{dataRecord(g*each + i)}))
			}
		})
	}
	wg.Wait()
	acked, err := s.finish(ctx, true)
	require.NoError(t, err)

	sent := d.sent()
	assert.False(t, overlapped, "one batch in flight at a time")
	assert.Equal(t, len(sent), acked)
	seen := map[int]bool{}
	for i, b := range sent {
		assert.Equal(t, i+1, b.seq, "sent in sequence, each once")
		assert.LessOrEqual(t, b.records, 10)
		for _, n := range recordIndexes(t, b.body) {
			assert.False(t, seen[n], "record %d sent twice", n)
			seen[n] = true
		}
	}
	assert.Len(t, seen, goroutines*each)
	assert.Equal(t, goroutines*each/10, len(sent), "full batches only")
}

func TestEmitNeedsALeasedTask(t *testing.T) {
	t.Parallel()
	task := &LeasedTask{AttemptID: uuid.New()}
	assert.ErrorIs(t, task.Emit(t.Context(), dataRecord(1)), errNotLeased)
	assert.ErrorIs(t, task.Flush(t.Context()), errNotLeased)
}

func TestResultBatchSizeConfig(t *testing.T) {
	t.Parallel()
	base := Config{GatewayURL: "https://g.test", HTTPClient: http.DefaultClient, Handler: func(context.Context, *LeasedTask) error { return nil }}
	cfg, err := base.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, defaultResultBatchSize, cfg.ResultBatchSize)
	for _, n := range []int{-1, maxResultBatchSize + 1} {
		c := base
		c.ResultBatchSize = n
		_, err := c.withDefaults()
		assert.ErrorContains(t, err, "ResultBatchSize", "%d", n)
	}
	c := base
	c.ResultBatchSize = maxResultBatchSize
	_, err = c.withDefaults()
	assert.NoError(t, err)
}

// ---- the runtime against a fake gateway ----

// resultsRequest is one results request the fake gateway served.
type resultsRequest struct {
	attempt    uuid.UUID
	key, token string
	body       []byte
	at         time.Time
	inline     bool // came as a completion's final_results
}

// fakeResults serves POST /v1/attempts/{id}/results on a fakeGateway as the
// contract says: idempotent by key and body checksum, fenced by the lease.
type fakeResults struct {
	g *fakeGateway

	mu        sync.Mutex
	requests  []resultsRequest
	faults    []fault // one per request, in turn (recorded, unlike g.inject's); a zero fault serves
	failFirst bool    // answer each key's first request 503
	seen      map[string]bool
	sums      map[string][32]byte
	acks      map[string]apiclient.ResultAck
	persisted map[uuid.UUID][]apiclient.ResultBatch
	replays   int
}

func newFakeResults(g *fakeGateway) *fakeResults {
	f := &fakeResults{
		g: g, seen: map[string]bool{}, sums: map[string][32]byte{},
		acks: map[string]apiclient.ResultAck{}, persisted: map[uuid.UUID][]apiclient.ResultBatch{},
	}
	g.mux.HandleFunc("POST /v1/attempts/{id}/results", f.handle)
	g.finalResults = f.acceptFinal
	return f
}

func (f *fakeResults) handle(w http.ResponseWriter, r *http.Request) {
	id := uuid.MustParse(r.PathValue("id"))
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "bad-request")
		return
	}
	if r.Header.Get("Content-Type") != "application/json" {
		writeProblem(w, http.StatusBadRequest, "bad-request")
		return
	}
	a := f.accept(id, r.Header.Get("Idempotency-Key"), r.Header.Get("Lease-Token"), body, false)
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	if a.status != http.StatusOK {
		writeProblem(w, a.status, a.code)
		return
	}
	if a.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Lease-State", string(a.lease.State))
	w.Header().Set("Lease-TTL-Seconds", strconv.FormatFloat(a.lease.LeaseTtlSeconds, 'f', -1, 64))
	writeJSON(w, a.ack)
}

// postsOf counts an attempt's batches that came to /results (not inline).
func (f *fakeResults) postsOf(id uuid.UUID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := map[string]bool{}
	for _, r := range f.requests {
		if r.attempt == id && !r.inline {
			keys[r.key] = true
		}
	}
	return len(keys)
}

// acceptFinal takes a completion's final_results as the gateway does: as
// if sent to /results with the key <attempt>:<sequence>.
func (f *fakeResults) acceptFinal(id uuid.UUID, token string, b apiclient.ResultBatch) (status int, code string) {
	body, err := json.Marshal(b)
	require.NoError(f.g.t, err)
	a := f.accept(id, resultKey(id, b.SequenceNumber), token, body, true)
	return a.status, a.code
}

// batchAnswer is the fake's answer to one result batch.
type batchAnswer struct {
	status           int
	code, retryAfter string
	replayed         bool
	ack              apiclient.ResultAck
	lease            apiclient.LeaseStatus
}

func (f *fakeResults) accept(id uuid.UUID, key, token string, body []byte, inline bool) batchAnswer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, resultsRequest{attempt: id, key: key, token: token, body: body, at: time.Now(), inline: inline})
	if len(f.faults) > 0 {
		ft := f.faults[0]
		f.faults = f.faults[1:]
		if ft.status != 0 {
			return batchAnswer{status: ft.status, code: ft.code, retryAfter: ft.retryAfter}
		}
	}
	if f.failFirst && !f.seen[key] {
		f.seen[key] = true
		return batchAnswer{status: http.StatusServiceUnavailable, code: "unavailable"}
	}
	if key == "" {
		return batchAnswer{status: http.StatusBadRequest, code: "bad-request"}
	}
	f.g.mu.Lock()
	st := f.g.status(id, token)
	f.g.mu.Unlock()
	sum := sha256.Sum256(body)
	if prev, ok := f.sums[key]; ok {
		if prev != sum {
			return batchAnswer{status: http.StatusUnprocessableEntity, code: "idempotency-key-reused"}
		}
		f.replays++
		return batchAnswer{status: http.StatusOK, replayed: true, ack: f.acks[key], lease: st}
	}
	if st.State == "lost" {
		return batchAnswer{status: http.StatusConflict, code: "lease-lost"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var batch apiclient.ResultBatch
	if err := dec.Decode(&batch); err != nil {
		return batchAnswer{status: http.StatusBadRequest, code: "bad-request"}
	}
	for _, b := range f.persisted[id] {
		if b.SequenceNumber == batch.SequenceNumber {
			return batchAnswer{status: http.StatusConflict, code: "sequence-number-used"}
		}
	}
	f.persisted[id] = append(f.persisted[id], batch)
	ack := apiclient.ResultAck{BatchId: uuid.New(), AttemptId: id, SequenceNumber: batch.SequenceNumber,
		Status: "persisted", RecordCount: len(batch.Records), ReceivedAt: time.Now()}
	f.sums[key], f.acks[key] = sum, ack
	return batchAnswer{status: http.StatusOK, ack: ack, lease: st}
}

func (f *fakeResults) inject(ft ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, ft...)
}

func (f *fakeResults) requestsOf(id uuid.UUID) []resultsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rs []resultsRequest
	for _, r := range f.requests {
		if r.attempt == id {
			rs = append(rs, r)
		}
	}
	return rs
}

func (f *fakeResults) persistedOf(id uuid.UUID) []apiclient.ResultBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apiclient.ResultBatch(nil), f.persisted[id]...)
}

func (f *fakeResults) replayCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replays
}

// checkRetriesRepeatThemselves asserts that the requests carry the lease
// token, that keys are "<attempt>:<n>" for n = 1, 2, … in order of first
// use, and that every request under one key has the same body. It returns
// the keys.
func checkRetriesRepeatThemselves(t *testing.T, l apiclient.Lease, reqs []resultsRequest) []string {
	t.Helper()
	var keys []string
	bodies := map[string][]byte{}
	for _, r := range reqs {
		assert.Equal(t, l.LeaseToken, r.token)
		prev, ok := bodies[r.key]
		if !ok {
			keys = append(keys, r.key)
			assert.Equal(t, resultKey(l.AttemptId, len(keys)), r.key, "sequence numbers start at 1 and grow by one")
			bodies[r.key] = r.body
			continue
		}
		assert.Equal(t, prev, r.body, "a retry of %s sends the same bytes", r.key)
	}
	return keys
}

func TestEmitDeliversBatchesExactlyOnceAndCompletionClaimsThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeResults(g)
		w := g.runtime(Config{ResultBatchSize: 100, Handler: func(ctx context.Context, task *LeasedTask) error {
			var wg sync.WaitGroup
			for part := range 5 {
				wg.Go(func() {
					for i := range 50 {
						assert.NoError(t, task.Emit(ctx, dataRecord(part*50+i)))
					}
				})
			}
			wg.Wait()
			return nil // the runtime flushes the last 50
		}})
		// The first request is refused for a second, the next one's answer
		// is lost after the gateway persisted it, the third is in flight.
		f.inject(fault{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: "1"})
		g.inject("results", fault{}, fault{transport: true, afterServe: true})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())

		reqs := f.requestsOf(l.AttemptId)
		keys := checkRetriesRepeatThemselves(t, l, reqs)
		assert.Len(t, keys, 3)
		assert.GreaterOrEqual(t, reqs[1].at.Sub(reqs[0].at), time.Second, "Retry-After honoured")
		assert.Equal(t, 1, f.replayCount(), "the lost answer was replayed")

		batches := f.persistedOf(l.AttemptId)
		require.Len(t, batches, 3)
		seen := map[string]bool{}
		for i, b := range batches {
			assert.Equal(t, i+1, b.SequenceNumber)
			for _, r := range b.Records {
				assert.False(t, seen[string(*r.Data)], "record stored once")
				seen[string(*r.Data)] = true
			}
		}
		assert.Len(t, seen, 250)
		assert.Equal(t, []int{100, 100, 50}, []int{len(batches[0].Records), len(batches[1].Records), len(batches[2].Records)})

		req := g.completionsOf(l.AttemptId)[0].req
		assert.Equal(t, apiclient.AttemptOutcomeSucceeded, req.Outcome)
		require.NotNil(t, req.LastSequenceNumber)
		assert.Equal(t, 3, *req.LastSequenceNumber)
		// The last batch, never sent on its own, travelled in the completion.
		require.NotNil(t, req.FinalResults)
		assert.Equal(t, 3, req.FinalResults.SequenceNumber)
		assert.Len(t, req.FinalResults.Records, 50)
		assert.Equal(t, 2, f.postsOf(l.AttemptId), "batches 1 and 2 went to /results")
	})
}

func TestResultsRetryInFlightAndStopOnRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeResults(g)
		errs := make(chan error, 3)
		w := g.runtime(Config{ResultBatchSize: 2, Handler: func(ctx context.Context, task *LeasedTask) error {
			errs <- task.Emit(ctx, dataRecords(0, 2)...) // batch 1: in flight once, then acknowledged
			errs <- task.Emit(ctx, dataRecords(2, 4)...) // batch 2: refused
			errs <- task.Emit(ctx, dataRecords(4, 5)...) // refused at once
			return nil                                   // ignoring the errors does not make it a success
		}})
		f.inject(
			fault{status: http.StatusConflict, code: "idempotency-in-flight"},
			fault{},
			fault{status: http.StatusBadRequest, code: "bad-request"},
		)
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())

		require.NoError(t, <-errs)
		err2, err3 := <-errs, <-errs
		reqs := f.requestsOf(l.AttemptId)
		checkRetriesRepeatThemselves(t, l, reqs)
		require.Len(t, f.persistedOf(l.AttemptId), 1)
		req := g.completionsOf(l.AttemptId)[0].req
		var apiErr *APIError
		require.ErrorAs(t, err2, &apiErr)
		assert.Equal(t, http.StatusBadRequest, apiErr.Status)
		assert.ErrorIs(t, err3, apiErr, "a refusal is final")
		assert.Len(t, reqs, 3, "in flight retried once, the refusal not at all")
		assert.Equal(t, apiclient.AttemptOutcomeFailed, req.Outcome)
		require.NotNil(t, req.Error)
		assert.Equal(t, CodeResultsUndelivered, req.Error.Code)
		assert.False(t, *req.Error.Retryable)
		require.NotNil(t, req.LastSequenceNumber)
		assert.Equal(t, 1, *req.LastSequenceNumber, "only the acknowledged batch is claimed")
	})
}

func TestResultsLeaseLostCancelsTheHandlerAndSkipsCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeResults(g)
		type outcome struct{ emitErr, cause, after error }
		got := make(chan outcome, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			err := task.Emit(ctx, dataRecord(1))
			if err == nil {
				err = task.Flush(ctx)
			}
			got <- outcome{emitErr: err, cause: context.Cause(ctx), after: task.Emit(ctx, dataRecord(2))}
			return nil
		}})
		f.inject(fault{status: http.StatusConflict, code: "lease-lost"})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		o := <-got
		time.Sleep(time.Minute)
		require.NoError(t, stop())

		assert.ErrorIs(t, o.emitErr, ErrLeaseLost)
		var apiErr *APIError
		require.ErrorAs(t, o.emitErr, &apiErr)
		assert.Equal(t, "lease-lost", apiErr.Code)
		assert.ErrorIs(t, o.cause, ErrLeaseLost, "the handler's context is cancelled at once")
		assert.ErrorIs(t, o.after, ErrLeaseLost)
		assert.Len(t, f.requestsOf(l.AttemptId), 1, "lease-lost is not retried")
		assert.Empty(t, g.completionsOf(l.AttemptId), "a lost lease is not completed")
		for _, ids := range g.heartbeatCalls() {
			assert.NotContains(t, ids, l.AttemptId, "nor renewed")
		}
	})
}

func TestResultsAnswerReportingCancellationCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeResults(g)
		started, proceed := make(chan struct{}), make(chan struct{})
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			close(started)
			<-proceed
			assert.NoError(t, task.Emit(ctx, dataRecord(1)))
			assert.NoError(t, task.Flush(ctx), "the batch itself was acknowledged")
			causes <- context.Cause(ctx) // before any heartbeat could have said so
			return ctx.Err()
		}})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		<-started
		g.setState(l.AttemptId, "cancel_requested")
		heartbeats := len(g.heartbeatCalls())
		close(proceed)
		require.ErrorIs(t, <-causes, ErrCancelRequested)
		assert.Equal(t, heartbeats, len(g.heartbeatCalls()))
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())

		req := g.completionsOf(l.AttemptId)[0].req
		assert.Equal(t, apiclient.AttemptOutcomeCancelled, req.Outcome)
		require.NotNil(t, req.LastSequenceNumber, "a cancelled attempt still claims what was delivered")
		assert.Equal(t, 1, *req.LastSequenceNumber)
		assert.Len(t, f.persistedOf(l.AttemptId), 1)
	})
}

func TestFailedHandlerDoesNotFlushAndClaimsOnlyAcknowledgedBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeResults(g)
		w := g.runtime(Config{ResultBatchSize: 2, Handler: func(ctx context.Context, task *LeasedTask) error {
			if string(task.Payload) == `"none"` {
				return nil
			}
			if err := task.Emit(ctx, dataRecords(0, 3)...); err != nil {
				return err
			}
			return errors.New("target unreachable")
		}})
		stop := runInBackground(t.Context(), w)
		failing, none := g.enqueue(`"fail"`), g.enqueue(`"none"`)
		waitFor(t, time.Minute, func() bool {
			return len(g.completionsOf(failing.AttemptId)) == 1 && len(g.completionsOf(none.AttemptId)) == 1
		})
		require.NoError(t, stop())

		assert.Len(t, f.persistedOf(failing.AttemptId), 1, "the buffered third record is dropped")
		req := g.completionsOf(failing.AttemptId)[0].req
		assert.Equal(t, apiclient.AttemptOutcomeFailed, req.Outcome)
		assert.Equal(t, CodeHandlerError, req.Error.Code)
		require.NotNil(t, req.LastSequenceNumber)
		assert.Equal(t, 1, *req.LastSequenceNumber)

		assert.Empty(t, f.requestsOf(none.AttemptId))
		req = g.completionsOf(none.AttemptId)[0].req
		assert.Equal(t, apiclient.AttemptOutcomeSucceeded, req.Outcome)
		assert.Nil(t, req.LastSequenceNumber, "no batch, no claim")
	})
}

// TestResultsOverRealHTTPS runs the runtime against the fake gateway served
// by a local TLS server, so that headers and bodies cross a real
// connection: each batch's first request is answered 503 and its retry 200.
func TestResultsOverRealHTTPS(t *testing.T) {
	g := newFakeGateway(t)
	f := newFakeResults(g)
	f.failFirst = true
	srv := httptest.NewTLSServer(g.mux)
	defer srv.Close()

	w, err := NewWorker(Config{
		GatewayURL: srv.URL, HTTPClient: srv.Client(), WaitSeconds: 1, ResultBatchSize: 2,
		Logger: slog.New(slog.DiscardHandler),
		Handler: func(ctx context.Context, task *LeasedTask) error {
			return task.Emit(ctx, dataRecords(0, 3)...)
		},
	})
	require.NoError(t, err)
	stop := runInBackground(t.Context(), w)
	l := g.enqueue(`{}`)
	waitFor(t, 10*time.Second, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
	require.NoError(t, stop())

	reqs := f.requestsOf(l.AttemptId)
	require.Len(t, reqs, 4, "two batches, each sent twice")
	keys := checkRetriesRepeatThemselves(t, l, reqs)
	assert.Equal(t, []string{resultKey(l.AttemptId, 1), resultKey(l.AttemptId, 2)}, keys)
	batches := f.persistedOf(l.AttemptId)
	require.Len(t, batches, 2)
	assert.Equal(t, []int{0, 1}, recordIndexes(t, reqs[1].body))
	assert.Equal(t, []int{2}, recordIndexes(t, reqs[3].body))
	req := g.completionsOf(l.AttemptId)[0].req
	assert.Equal(t, apiclient.AttemptOutcomeSucceeded, req.Outcome)
	require.NotNil(t, req.LastSequenceNumber)
	assert.Equal(t, 2, *req.LastSequenceNumber)
}
