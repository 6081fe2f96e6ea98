package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// The load generator speaks raw net/http: one http.Transport per simulated
// worker (so each worker has its own TLS identity and its own HTTP/2
// connection), request bodies built once, and responses decoded into the few
// fields the benchmark needs. That keeps the client's share of the machine's
// CPU small, which matters when the gateway, PostgreSQL and the load
// generator all share one box.

// newTransport returns a TLS 1.3 transport trusting roots and presenting cert
// when given. ForceAttemptHTTP2 is required: a custom TLSClientConfig
// otherwise silently disables HTTP/2.
func newTransport(roots *x509.CertPool, cert *tls.Certificate) *http.Transport {
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Transport{
		TLSClientConfig:     tc,
		ForceAttemptHTTP2:   true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// httpError is a response with an unexpected status.
type httpError struct {
	Status     int
	RetryAfter time.Duration
	Body       string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body)
}

// checkStatus turns an unexpected status into an *httpError (reading a bit
// of the problem body for the message) and always leaves the body drained
// and closed so the connection is reused.
func checkStatus(res *http.Response, want int) error {
	if res.StatusCode == want {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	e := &httpError{Status: res.StatusCode, Body: strings.TrimSpace(string(b))}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func drainClose(res *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	_ = res.Body.Close()
}

// benchWorker is one simulated worker: a worker identity registered with
// the gateway and an HTTP client presenting its certificate.
type benchWorker struct {
	ID        uuid.UUID
	Name      string
	base      string
	transport *http.Transport
	client    *http.Client
	// created is true for a worker the benchmark registered with a
	// throwaway certificate: it is disabled when the scenario ends.
	created bool
	// roots and cert open further connections for the same identity.
	roots *x509.CertPool
	cert  tls.Certificate
}

func newBenchWorker(base string, id uuid.UUID, name string, roots *x509.CertPool, cert tls.Certificate, created bool) *benchWorker {
	// The overall timeout only catches a hung gateway: long-polls are
	// bounded by wait_seconds plus the server's answer time.
	return newBenchConn(base, id, name, roots, cert, created, 90*time.Second)
}

func newBenchConn(base string, id uuid.UUID, name string, roots *x509.CertPool, cert tls.Certificate, created bool, timeout time.Duration) *benchWorker {
	tr := newTransport(roots, &cert)
	return &benchWorker{
		ID: id, Name: name, base: base, transport: tr, created: created, roots: roots, cert: cert,
		client: &http.Client{Transport: tr, Timeout: timeout},
	}
}

// sibling is the same worker (identity, certificate) on a connection of its
// own, whose requests may take up to timeout. A worker with more concurrent
// requests than one HTTP/2 connection carries (the server's
// MaxConcurrentStreams) spreads them over siblings. Close it with close().
func (w *benchWorker) sibling(timeout time.Duration) *benchWorker {
	return newBenchConn(w.base, w.ID, w.Name, w.roots, w.cert, w.created, timeout)
}

// lease is the part of a granted lease the benchmark uses.
type lease struct {
	AttemptID  string `json:"attempt_id"`
	LeaseToken string `json:"lease_token"`
	Task       struct {
		ID             string `json:"id"`
		OrganizationID string `json:"organization_id"`
	} `json:"task"`
}

// warmAll opens every worker's connection (see warm).
func warmAll(ctx context.Context, workers []*benchWorker) error {
	for _, w := range workers {
		if err := w.warm(ctx); err != nil {
			return fmt.Errorf("connect worker %s: %w", w.Name, err)
		}
	}
	return nil
}

// warm opens the worker's connection (TCP, TLS handshake, HTTP/2 preface)
// so that handshakes do not count in what is measured.
func (w *benchWorker) warm(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"/healthz", nil)
	if err != nil {
		return err
	}
	res, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer drainClose(res)
	return checkStatus(res, http.StatusOK)
}

// postJSON sends one POST of a JSON body with the given headers, requires
// 200, and decodes the answer into out (when not nil).
func (w *benchWorker) postJSON(ctx context.Context, path string, body []byte, header http.Header, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusOK); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s answer: %w", path, err)
	}
	return nil
}

// poll sends one POST /v1/leases with a prepared body and returns the leases
// granted (possibly none).
func (w *benchWorker) poll(ctx context.Context, body []byte) ([]lease, error) {
	var out struct {
		Leases []lease `json:"leases"`
	}
	if err := w.postJSON(ctx, "/v1/leases", body, nil, &out); err != nil {
		return nil, err
	}
	return out.Leases, nil
}

var completeBody = []byte(`{"outcome":"succeeded"}`)

// completeNext finishes an attempt with outcome succeeded and, when next
// is above 0, asks for up to next leases in the same call (answered at
// once, without waiting) and returns them.
func (w *benchWorker) completeNext(ctx context.Context, l lease, next int) ([]lease, error) {
	body := completeBody
	if next > 0 {
		body = fmt.Appendf(nil, `{"outcome":"succeeded","next":{"max_tasks":%d}}`, next)
	}
	var out struct {
		Leases []lease `json:"leases"`
	}
	err := w.postJSON(ctx, "/v1/attempts/"+l.AttemptID+"/complete", body, http.Header{"Lease-Token": {l.LeaseToken}}, &out)
	return out.Leases, err
}

// completeDetached completes an attempt even when ctx has ended (within
// 30 s): completions are not cut short by the end of a run, since a task
// left leased would fail verification for the wrong reason.
func (w *benchWorker) completeDetached(ctx context.Context, l lease) error {
	_, err := w.completeNextDetached(ctx, l, 0)
	return err
}

// completeNextDetached is completeNext, detached as completeDetached is.
func (w *benchWorker) completeNextDetached(ctx context.Context, l lease, next int) ([]lease, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return w.completeNext(cctx, l, next)
}

// completeManyDetached completes leases with outcome succeeded in one
// POST /v1/attempts/complete, even when ctx has ended (within 30 s), and
// returns those the gateway answered 200 for, and the up to next leases
// the call asked for (none when next is 0).
func (w *benchWorker) completeManyDetached(ctx context.Context, leases []lease, next int) (done, more []lease, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	type item struct {
		AttemptID  string `json:"attempt_id"`
		LeaseToken string `json:"lease_token"`
		Outcome    string `json:"outcome"`
	}
	items := make([]item, len(leases))
	for i, l := range leases {
		items[i] = item{AttemptID: l.AttemptID, LeaseToken: l.LeaseToken, Outcome: "succeeded"}
	}
	req := map[string]any{"completions": items}
	if next > 0 {
		req["next"] = map[string]int{"max_tasks": next}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	var out struct {
		Completions []struct {
			Status int `json:"status"`
		} `json:"completions"`
		Leases []lease `json:"leases"`
	}
	if err := w.postJSON(ctx, "/v1/attempts/complete", body, nil, &out); err != nil {
		return nil, nil, err
	}
	if len(out.Completions) != len(leases) {
		return nil, out.Leases, fmt.Errorf("%d answers for %d completions", len(out.Completions), len(leases))
	}
	more = out.Leases
	var failed int
	for i, a := range out.Completions {
		if a.Status == http.StatusOK {
			done = append(done, leases[i])
		} else {
			failed++
		}
	}
	if failed > 0 {
		return done, more, fmt.Errorf("%d of %d completions refused", failed, len(leases))
	}
	return done, more, nil
}

// close drops the worker's idle connections.
func (w *benchWorker) close() { w.transport.CloseIdleConnections() }

// producer creates tasks through the control plane with a bearer token.
type producer struct {
	base   string
	token  string
	client *http.Client
}

func newProducer(base, token string, roots *x509.CertPool) *producer {
	return &producer{base: base, token: token, client: &http.Client{Transport: newTransport(roots, nil), Timeout: 30 * time.Second}}
}

// noopTaskBody is the POST /v1/tasks body of one no-op task of org.
func noopTaskBody(org uuid.UUID) []byte {
	return fmt.Appendf(nil, `{"organization_id":%q,"task_type":"scanner_plugin","payload":{"plugin":"echo"}}`, org)
}

// createTask creates one no-op task and returns its id and the instant the
// answer arrived (the task is committed by then: the handler answers only
// after its transaction commits).
func (p *producer) createTask(ctx context.Context, body []byte) (id string, returned time.Time, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/tasks", bytes.NewReader(body))
	if err != nil {
		return "", time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.token)
	res, err := p.client.Do(req)
	returned = time.Now()
	if err != nil {
		return "", returned, err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusCreated); err != nil {
		return "", returned, err
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return "", returned, fmt.Errorf("decode task: %w", err)
	}
	return out.ID, returned, nil
}

// close drops the producer's idle connections.
func (p *producer) close() { p.client.CloseIdleConnections() }

// warm opens the producer's connection.
func (p *producer) warm(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/healthz", nil)
	if err != nil {
		return err
	}
	res, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer drainClose(res)
	return checkStatus(res, http.StatusOK)
}

// waitingPolls reads the gateway's gateway_waiting_polls gauge (long-polls
// parked in its hub) from GET /metrics.
func (p *producer) waitingPolls(ctx context.Context) (int, error) {
	text, err := p.metricsText(ctx)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, "gateway_waiting_polls "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("gateway_waiting_polls: %w", err)
			}
			return int(f), nil
		}
	}
	return 0, errors.New("/metrics has no gateway_waiting_polls")
}

// metricsText scrapes the gateway's GET /metrics. It needs a token without
// organization scope and the metrics on the main listener (the default);
// otherwise it returns an error. A scrape also runs the gateway's
// gateway_tasks query in the database.
func (p *producer) metricsText(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	res, err := p.client.Do(req)
	if err != nil {
		return "", err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusOK); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return string(b), err
}

// errorTally counts failed requests by kind ("lease 429", "complete 409",
// "create transport", ...), for the summary.
type errorTally struct {
	mu     sync.Mutex
	counts map[string]int
	total  int
}

// add records one error and returns how many were recorded so far.
func (t *errorTally) add(op string, err error) int {
	kind := op + " transport"
	if he, ok := errors.AsType[*httpError](err); ok {
		kind = fmt.Sprintf("%s %d", op, he.Status)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	t.counts[kind]++
	t.total++
	return t.total
}

func (t *errorTally) snapshot() (map[string]int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.counts))
	for k, v := range t.counts {
		out[k] = v
	}
	return out, t.total
}

// String lists the counts, largest first.
func (t *errorTally) String() string {
	counts, total := t.snapshot()
	if total == 0 {
		return "none"
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// backoffAfter sleeps before retrying a failed request: the server's
// Retry-After when it gave one, else a short pause. It returns false when
// ctx ended.
func backoffAfter(ctx context.Context, err error) bool {
	d := 50 * time.Millisecond
	if he, ok := errors.AsType[*httpError](err); ok && he.RetryAfter > 0 {
		d = he.RetryAfter
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// problemCode is the problem's `code` of an HTTP error ("lease-lost",
// "idempotency-in-flight", ...), or "" when err is not one.
func problemCode(err error) string {
	he, ok := errors.AsType[*httpError](err)
	if !ok {
		return ""
	}
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal([]byte(he.Body), &p) != nil {
		return ""
	}
	return p.Code
}

// retryable says whether repeating the same request can succeed: a
// transport error, a 409 idempotency-in-flight, 429 or 503.
func retryable(err error) bool {
	he, ok := errors.AsType[*httpError](err)
	if !ok {
		return true
	}
	switch he.Status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusConflict:
		return problemCode(err) == "idempotency-in-flight"
	}
	return false
}

// leaseOne long-polls (max_tasks 1) until the worker holds one lease, or
// ctx ends. Setup for the scenarios that need a live attempt.
func (w *benchWorker) leaseOne(ctx context.Context, errs *errorTally) (lease, error) {
	body := []byte(`{"max_tasks":1,"wait_seconds":5}`)
	for {
		leases, err := w.poll(ctx, body)
		if err != nil {
			if ctx.Err() != nil {
				return lease{}, ctx.Err()
			}
			errs.add("lease", err)
			if !backoffAfter(ctx, err) {
				return lease{}, ctx.Err()
			}
			continue
		}
		if len(leases) > 0 {
			return leases[0], nil
		}
		if ctx.Err() != nil {
			return lease{}, ctx.Err()
		}
	}
}

// postResults sends one result batch (POST /v1/attempts/{id}/results) and
// returns the acknowledgement's bytes and whether the gateway answered it as
// a replay (header Idempotent-Replayed: true).
func (w *benchWorker) postResults(ctx context.Context, l lease, key string, body []byte) (ack []byte, replayed bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+"/v1/attempts/"+l.AttemptID+"/results", bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lease-Token", l.LeaseToken)
	req.Header.Set("Idempotency-Key", key)
	res, err := w.client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusOK); err != nil {
		return nil, false, err
	}
	ack, err = io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return nil, false, fmt.Errorf("read acknowledgement: %w", err)
	}
	return ack, res.Header.Get("Idempotent-Replayed") == "true", nil
}

// uploadSession is the answer to POST /v1/attempts/{id}/artifacts.
type uploadSession struct {
	UploadID string            `json:"upload_id"`
	Method   string            `json:"method"`
	URL      string            `json:"url"`
	Headers  map[string]string `json:"headers"`
}

// committedFile is the part of a committed file the benchmark checks.
type committedFile struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	SHA256    string `json:"sha256"`
}

// openUpload declares an artifact and returns how to upload it.
func (w *benchWorker) openUpload(ctx context.Context, l lease, name string, size int64, sha256Hex string) (uploadSession, error) {
	body, err := json.Marshal(map[string]any{
		"name": name, "content_type": "application/octet-stream", "size_bytes": size, "sha256": sha256Hex,
	})
	if err != nil {
		return uploadSession{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+"/v1/attempts/"+l.AttemptID+"/artifacts", bytes.NewReader(body))
	if err != nil {
		return uploadSession{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lease-Token", l.LeaseToken)
	res, err := w.client.Do(req)
	if err != nil {
		return uploadSession{}, err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusCreated); err != nil {
		return uploadSession{}, err
	}
	var s uploadSession
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return uploadSession{}, fmt.Errorf("decode upload session: %w", err)
	}
	if s.Method == "" || s.URL == "" {
		return uploadSession{}, fmt.Errorf("upload session without method or url")
	}
	return s, nil
}

// putUpload streams body (exactly size bytes) to the session's URL with the
// session's method and headers and an exact Content-Length. The worker's
// own client is used (the fs backend's URL is the gateway's mTLS route),
// without its overall timeout: ctx bounds the upload.
func (w *benchWorker) putUpload(ctx context.Context, s uploadSession, body io.Reader, size int64) error {
	if size == 0 {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, s.Method, s.URL, body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	res, err := (&http.Client{Transport: w.transport}).Do(req)
	if err != nil {
		return err
	}
	defer drainClose(res)
	if res.StatusCode == http.StatusOK {
		return nil // a presigned S3 PUT answers 200
	}
	return checkStatus(res, http.StatusNoContent)
}

// commitUpload commits an uploaded artifact and returns the file.
func (w *benchWorker) commitUpload(ctx context.Context, uploadID string) (committedFile, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+"/v1/uploads/"+uploadID+"/commit", nil)
	if err != nil {
		return committedFile{}, err
	}
	res, err := w.client.Do(req)
	if err != nil {
		return committedFile{}, err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusOK); err != nil {
		return committedFile{}, err
	}
	var f committedFile
	if err := json.NewDecoder(res.Body).Decode(&f); err != nil {
		return committedFile{}, fmt.Errorf("decode file: %w", err)
	}
	return f, nil
}
