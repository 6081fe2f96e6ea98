package netfaults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// call is one request a client of these tests sent and what came back.
type call struct {
	Method, Path   string
	Attempt        string // the {attempt_id} of attempt routes
	IdempotencyKey string
	Sent, Received time.Time
	Status         int // 0: no answer (transport error)
	Code           string
	ContentType    string
	RetryAfter     string
	Replayed       bool
	Err            error
}

// isWrite reports an attempt-scoped call that changes state when accepted.
func (c call) isWrite() bool {
	return strings.HasSuffix(c.Path, "/results") || strings.HasSuffix(c.Path, "/complete") ||
		strings.HasSuffix(c.Path, "/heartbeat") || strings.HasSuffix(c.Path, "/start")
}

// recorder keeps every call of the clients built from it, the raw protocol
// client's and the Go runtime's alike, so that every answer can be judged.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

// client returns an HTTP client that records each exchange over base.
func (r *recorder) client(base http.RoundTripper, timeout time.Duration) *http.Client {
	return &http.Client{Transport: &recordingTransport{base: base, rec: r}, Timeout: timeout}
}

func (r *recorder) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

type recordingTransport struct {
	base http.RoundTripper
	rec  *recorder
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := call{Method: req.Method, Path: req.URL.Path, Attempt: attemptOf(req.URL.Path),
		IdempotencyKey: req.Header.Get("Idempotency-Key"), Sent: time.Now()}
	res, err := t.base.RoundTrip(req)
	c.Received = time.Now()
	if err == nil && res.StatusCode >= 300 {
		// Problems are small: read them here to learn their code.
		var body []byte
		body, err = io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
		var p struct{ Code string }
		_ = json.Unmarshal(body, &p)
		c.Code = p.Code
	}
	if res != nil {
		c.Status = res.StatusCode
		c.ContentType, _, _ = mime.ParseMediaType(res.Header.Get("Content-Type"))
		c.RetryAfter = res.Header.Get("Retry-After")
		c.Replayed = res.Header.Get("Idempotent-Replayed") == "true"
	}
	if err != nil {
		c.Status, c.Err = 0, err
	}
	// A call the test itself abandoned (shutdown) proves nothing.
	if !errors.Is(err, context.Canceled) {
		t.rec.mu.Lock()
		t.rec.calls = append(t.rec.calls, c)
		t.rec.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach base.
func (t *recordingTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// attemptOf returns the attempt id of /v1/attempts/{id}/… paths.
func attemptOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/attempts/")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return id
}
