package operations

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
)

// otlpReceiver is a real OTLP/HTTP trace receiver on loopback: it decodes
// every export request and keeps the spans.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// trace is the spans received with one trace id.
func (r *otlpReceiver) trace(id []byte) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if bytes.Equal(s.TraceId, id) {
			out = append(out, s)
		}
	}
	return out
}

// serverSpan is the first server span received with that name.
func (r *otlpReceiver) serverSpan(name string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER && s.Name == name {
			return s
		}
	}
	return nil
}

// stringAttribute is span's attribute key as a string ("" when absent).
func stringAttribute(span *tracepb.Span, key string) string {
	for _, a := range span.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// jsonLines are the output's JSON log lines.
func (b *lockedBuffer) jsonLines() []map[string]any {
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// requestLine is the access-log line of the request with that id.
func requestLine(lines []map[string]any, requestID string) map[string]any {
	for _, l := range lines {
		if l["msg"] == "request" && l["request_id"] == requestID {
			return l
		}
	}
	return nil
}

func TestTracingExportsRequestAndQuerySpansWithTheLoggedTraceID(t *testing.T) {
	t.Parallel()
	receiver := startOTLPReceiver(t)
	g, _ := harness.StartProcesses(t, 1)
	var logs lockedBuffer
	p := g.StartProcessLogging(t, &logs,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.URL,
		"OTEL_BSP_SCHEDULE_DELAY=50", // export within 50 ms, not the default 5 s
		"GATEWAY_LOG_LEVEL=DEBUG", "GATEWAY_LOG_FORMAT=json")

	req, err := http.NewRequest(http.MethodGet, p.URL+"/v1/organizations", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	res, err := g.HTTPClient(nil).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	requestID := res.Header.Get("X-Request-Id")
	require.NotEmpty(t, requestID)

	var span *tracepb.Span
	harness.WaitFor(t, 10*time.Second, "the request's server span", func() bool {
		span = receiver.serverSpan("GET /v1/organizations")
		return span != nil
	})
	var query *tracepb.Span
	harness.WaitFor(t, 10*time.Second, "a query span in the request's trace", func() bool {
		for _, s := range receiver.trace(span.TraceId) {
			if s.Kind == tracepb.Span_SPAN_KIND_CLIENT && stringAttribute(s, "db.system.name") == "postgresql" && stringAttribute(s, "db.query.text") != "" {
				query = s
				return true
			}
		}
		return false
	})
	require.Equal(t, span.TraceId, query.TraceId)
	require.Equal(t, stringAttribute(query, "db.operation.name"), query.Name, "a query span is named by its operation")
	for _, a := range query.Attributes {
		if a.Key == "db.query.text" {
			require.NotContains(t, a.Value.GetStringValue(), g.AdminToken, "a query span never holds arguments")
		}
	}

	var line map[string]any
	harness.WaitFor(t, 10*time.Second, "the request's log line", func() bool {
		line = requestLine(logs.jsonLines(), requestID)
		return line != nil
	})
	require.Equal(t, hex.EncodeToString(span.TraceId), line["trace_id"], "the log line carries the span's trace id")
}

func TestTracingOffWithoutOTELVariables(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		require.Nil(t, c.TracerProvider, "no tracer provider unless asked for")
	}})
	req, err := http.NewRequest(http.MethodGet, g.URL+"/v1/organizations", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	// An incoming trace context is not continued either: nothing traces.
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res, err := g.HTTPClient(nil).Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var line map[string]any
	harness.WaitFor(t, 10*time.Second, "the request's log line", func() bool {
		line = requestLine(logs.jsonLines(), res.Header.Get("X-Request-Id"))
		return line != nil
	})
	require.NotContains(t, line, "trace_id")
}
