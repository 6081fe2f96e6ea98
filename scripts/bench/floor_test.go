package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// startTestFloor serves a floor server of tasks leases, batch per poll,
// over its real TLS configuration, every answer checked against
// openapi.yaml as the gateway's are in its tests (Server.responseValidator):
// a non-conforming answer fails the test. It returns the URL and a client
// certificate the server accepts.
func startTestFloor(t *testing.T, tasks, batch int) (url string, ca *pki.CA, client tls.Certificate) {
	t.Helper()
	ca, err := pki.NewCA("floor test CA")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := ca.IssueClient("floor-test-worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if client, err = tls.X509KeyPair(worker.CertPEM, worker.KeyPEM); err != nil {
		t.Fatal(err)
	}
	f, err := newFloorServer(tasks, batch, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tc := floorTLSConfig(cert, roots)
	srv := newFloorHTTPServer(contractChecked(t, f.routes()), tc, log.New(io.Discard, "", 0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(tls.NewListener(ln, tc)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String(), ca, client
}

// contractChecked validates every answer of next on a /v1/ route against
// the embedded openapi.yaml, as the gateway's response validator does.
func contractChecked(t *testing.T, next http.Handler) http.Handler {
	spec, err := api.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	spec.Servers = nil
	spec.OpenAPI = "3.0.3"
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recordedResponse{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			route, pathParams, err := router.FindRoute(r)
			if err != nil {
				t.Errorf("%s %s: no such route in openapi.yaml: %v", r.Method, r.URL.Path, err)
			} else if err := openapi3filter.ValidateResponse(r.Context(), &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: route},
				Status:                 rec.status,
				Header:                 rec.header,
				Body:                   io.NopCloser(bytes.NewReader(rec.body.Bytes())),
				Options:                &openapi3filter.Options{IncludeResponseStatus: true},
			}); err != nil {
				t.Errorf("%s %s: the answer does not match openapi.yaml: %v\n%s", r.Method, r.URL.Path, err, rec.body.Bytes())
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

type recordedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recordedResponse) Header() http.Header         { return r.header }
func (r *recordedResponse) WriteHeader(status int)      { r.status = status }
func (r *recordedResponse) Write(p []byte) (int, error) { return r.body.Write(p) }

// The floor server's answers parse with the generated client as the
// gateway's do, conform to openapi.yaml, and carry what a worker needs:
// distinct attempts, tokens and tasks, the scenario's payload, and
// completion answers naming the attempt and its task.
func TestFloorAnswersParseWithTheGeneratedClient(t *testing.T) {
	url, ca, cert := startTestFloor(t, 5, 3)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	httpClient := &http.Client{Transport: newTransport(roots, &cert), Timeout: 10 * time.Second}
	defer httpClient.CloseIdleConnections()
	c, err := apiclient.NewClientWithResponses(url, apiclient.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	res, err := c.AcquireLeasesWithResponse(ctx, nil, apiclient.LeaseRequest{MaxTasks: ptr(3), WaitSeconds: ptr(1)})
	if err != nil {
		t.Fatal(err)
	}
	if res.HTTPResponse.ProtoMajor != 2 {
		t.Errorf("answered over %s, want HTTP/2", res.HTTPResponse.Proto)
	}
	if res.JSON200 == nil || len(res.JSON200.Leases) != 3 {
		t.Fatalf("lease answer %d: %s", res.StatusCode(), res.Body)
	}
	seen := map[string]bool{}
	for _, l := range res.JSON200.Leases {
		for _, v := range []string{l.AttemptId.String(), l.LeaseToken, l.Task.Id.String()} {
			if seen[v] {
				t.Errorf("%s appears twice in %s", v, res.Body)
			}
			seen[v] = true
		}
		if len(l.LeaseToken) != 64 || string(l.Task.Payload) != `{"plugin":"echo"}` || l.Task.TaskType != apiclient.TaskType("scanner_plugin") || l.LeaseTtlSeconds <= 0 {
			t.Errorf("lease %+v is not the throughput scenario's", l)
		}
	}

	// The sizes of the gateway's answers for the throughput scenario's
	// tasks, measured on it: 455 bytes for one lease (441 of them the
	// lease), 201 for a completion.
	if want := len(`{"leases":[]}`+"\n") + 3*441 + 2; len(res.Body) != want {
		t.Errorf("three leases take %d bytes, want %d as the gateway's: %s", len(res.Body), want, res.Body)
	}

	one := res.JSON200.Leases[0]
	done, err := c.CompleteAttemptWithResponse(ctx, one.AttemptId, &apiclient.CompleteAttemptParams{LeaseToken: one.LeaseToken},
		apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcome("succeeded")})
	if err != nil {
		t.Fatal(err)
	}
	if len(done.Body) != 201 {
		t.Errorf("completion answer of %d bytes, the gateway's has 201: %s", len(done.Body), done.Body)
	}
	if done.JSON200 == nil || done.JSON200.AttemptId != one.AttemptId || done.JSON200.TaskId != one.Task.Id ||
		done.JSON200.AttemptStatus != "succeeded" || done.JSON200.TaskState != "completed" {
		t.Fatalf("completion answer %d: %s", done.StatusCode(), done.Body)
	}

	var items []apiclient.CompletionItem
	for _, l := range res.JSON200.Leases[1:] {
		items = append(items, apiclient.CompletionItem{AttemptId: l.AttemptId, LeaseToken: l.LeaseToken, Outcome: "succeeded"})
	}
	many, err := c.CompleteAttemptsWithResponse(ctx, apiclient.CompleteManyRequest{Completions: items, Next: &apiclient.NextLeases{MaxTasks: ptr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if many.JSON200 == nil || len(many.JSON200.Completions) != 2 {
		t.Fatalf("complete-many answer %d: %s", many.StatusCode(), many.Body)
	}
	for i, a := range many.JSON200.Completions {
		l := res.JSON200.Leases[1+i]
		if a.Status != http.StatusOK || a.AttemptId != l.AttemptId || a.Result == nil || a.Result.TaskId != l.Task.Id {
			t.Errorf("completion %d answered %+v, want 200 for attempt %s of task %s", i, a, l.AttemptId, l.Task.Id)
		}
	}

	if many.JSON200.Leases == nil || len(*many.JSON200.Leases) != 1 || many.HTTPResponse.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("complete-many with next: %s", many.Body)
	}

	// One lease is left of five: then polls come back empty.
	res, err = c.AcquireLeasesWithResponse(ctx, nil, apiclient.LeaseRequest{MaxTasks: ptr(3)})
	if err != nil || res.JSON200 == nil || len(res.JSON200.Leases) != 1 {
		t.Fatalf("second poll: %v, %s", err, res.Body)
	}
	res, err = c.AcquireLeasesWithResponse(ctx, nil, apiclient.LeaseRequest{MaxTasks: ptr(3)})
	if err != nil || res.JSON200 == nil || len(res.JSON200.Leases) != 0 {
		t.Fatalf("poll with nothing left: %v, %s", err, res.Body)
	}
}

// The throughput scenario's worker code (benchWorker: poll, complete,
// complete-many) treats the floor's answers as the gateway's, and the
// floor server counts what it granted and answered.
func TestFloorServesTheBenchWorker(t *testing.T) {
	url, ca, cert := startTestFloor(t, 4, 2)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	w := newBenchWorker(url, uuid.New(), "floor-test", roots, cert, false)
	defer w.close()
	ctx := context.Background()
	if err := w.warm(ctx); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"max_tasks":2,"wait_seconds":0}`)
	leases, err := w.poll(ctx, body)
	if err != nil || len(leases) != 2 {
		t.Fatalf("poll: %d leases, %v", len(leases), err)
	}
	if err := w.completeDetached(ctx, leases[0]); err != nil {
		t.Fatalf("complete: %v", err)
	}
	// The last completion of the lot asks for the next lot, as -next does.
	if leases, err = w.completeNextDetached(ctx, leases[1], 2); err != nil || len(leases) != 2 {
		t.Fatalf("complete with next: %d leases, %v", len(leases), err)
	}
	done, more, err := w.completeManyDetached(ctx, leases, 2)
	if err != nil || len(done) != 2 || len(more) != 0 {
		t.Fatalf("complete-many with next: %d done, %d more, %v", len(done), len(more), err)
	}
	counts, err := floorCounts(ctx, w)
	if err != nil || counts != (floorServerCounts{Granted: 4, Completed: 4}) {
		t.Fatalf("counts %+v, %v; want 4 granted, 4 completed", counts, err)
	}

	// Without a client certificate the handshake fails, as mTLS requires.
	anon := &http.Client{Transport: newTransport(roots, nil), Timeout: 10 * time.Second}
	if res, err := anon.Get(url + "/healthz"); err == nil {
		drainClose(res)
		t.Fatalf("a client without a certificate got %d", res.StatusCode)
	}
}

// A throughput line states its ratio to the floor of the same run, and
// the JSON carries it; a floor that did not hold gives no ratio.
func TestFloorRatioLine(t *testing.T) {
	tp := func() *Result {
		return &Result{Scenario: "throughput", Tasks: 2000, Workers: 32, Batch: 1, WallSeconds: 2,
			TasksPerSec: ptr(3100.0), GatewayCPUMsPerTask: ptr(0.9), Verification: notRun{}}
	}
	floor := &Result{Scenario: "floor", TasksPerSec: ptr(10000.0), FloorServerCPUMsPerTask: ptr(0.3), Verified: true}

	r := tp()
	applyFloor(r, floor)
	var out bytes.Buffer
	r.printHuman(&out)
	for _, want := range []string{
		"throughput     3100 tasks/s (2.00 s from first poll to last completion) — 0.31× floor (10000 tasks/s)\n",
		"0.9 ms CPU per task (3.0× the floor server's)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["floor_ratio"] != 0.31 || m["floor_tasks_per_sec"] != 10000.0 || m["floor_cpu_ratio"] != 3.0 {
		t.Errorf("floor keys in %s", b)
	}

	for name, f := range map[string]*Result{
		"no floor":         nil,
		"floor failed":     {Scenario: "floor", TasksPerSec: ptr(10000.0), Verified: false},
		"floor with error": {Scenario: "floor", TasksPerSec: ptr(10000.0), Verified: true, Error: "time limit"},
	} {
		r := tp()
		applyFloor(r, f)
		out.Reset()
		r.printHuman(&out)
		if strings.Contains(out.String(), "floor") {
			t.Errorf("%s: the summary names a floor:\n%s", name, out.String())
		}
	}
}
