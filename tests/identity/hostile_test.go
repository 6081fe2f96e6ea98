package identity

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
)

// endlessBody is a generator of up to n bytes of a JSON string's inside
// (after an opening `{"software_version":"`), counting what it produced, so
// a test can tell how much the client sent before the server cut it off.
type endlessBody struct {
	n        int64
	produced atomic.Int64
	prefix   []byte
}

func newEndlessBody(n int64) *endlessBody {
	return &endlessBody{n: n, prefix: []byte(`{"software_version":"`)}
}

func (b *endlessBody) Read(p []byte) (int, error) {
	done := b.produced.Load()
	if done >= b.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), b.n-done)]
	for i := range p {
		off := done + int64(i)
		if off < int64(len(b.prefix)) {
			p[i] = b.prefix[off]
		} else {
			p[i] = 'x'
		}
	}
	b.produced.Add(int64(len(p)))
	return len(p), nil
}

type problemBody struct {
	Type, Title, Code, Detail string
	Status                    int
}

// requireProblem checks a 4xx application/problem+json answer and returns
// its code.
func requireProblem(t *testing.T, status int, header http.Header, raw []byte) string {
	t.Helper()
	require.GreaterOrEqual(t, status, 400, string(raw))
	require.Less(t, status, 500, "never a 5xx: %s", raw)
	require.Equal(t, "application/problem+json", header.Get("Content-Type"), string(raw))
	var p problemBody
	require.NoError(t, json.Unmarshal(raw, &p), string(raw))
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Code)
	return p.Code
}

// TestHostileBodies sends bodies crafted to hurt a JSON API to the worker
// route POST /v1/leases and the control route POST /v1/tasks: each gets a
// 4xx problem, never a 5xx.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	control := g.HTTPClient(nil)
	bearer := "Bearer " + g.AdminToken
	task := func(extra string) string {
		return `{"organization_id":"` + org.String() + `","task_type":"scanner_plugin"` + extra + `}`
	}
	deepArrays := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	deepObjects := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)

	type tc struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
		// bug, when set, names the server bug this case once exposed, so a
		// regression says what came back.
		bug string
	}
	const (
		bugNUL     = "an escaped NUL (\\u0000) passes checkJSON and PostgreSQL refuses it (text/jsonb): 500 instead of 400"
		bugNumbers = "numbers beyond float64 range pass checkJSON; jsonb expands 1eN to N digits (storage/response amplification)"
	)
	leaseCases := []tc{
		{"deep arrays", "application/json", deepArrays, 400, "bad-request", ""},
		{"deep objects", "application/json", deepObjects, 400, "bad-request", ""},
		{"deep inside capabilities", "application/json", `{"capabilities":` + deepObjects + `}`, 400, "bad-request", ""},
		{"duplicate keys", "application/json", `{"max_tasks":1,"max_tasks":2}`, 400, "bad-request", ""},
		// encoding/json matches field names case-insensitively: a
		// case variant must not smuggle a value past the exact-key checks.
		{"case-variant duplicate", "application/json", `{"max_tasks":1,"MAX_TASKS":2}`, 400, "bad-request", ""},
		{"case-variant alone", "application/json", `{"Max_Tasks":2}`, 400, "bad-request", ""},
		{"case-variant over limit", "application/json", `{"MAX_TASKS":100000}`, 400, "bad-request", ""},
		{"invalid UTF-8 in string", "application/json", "{\"software_version\":\"a\xff\xfeb\"}", 400, "bad-request", ""},
		// A lone surrogate is valid JSON syntax; encoding/json replaces it
		// with U+FFFD: accepted.
		{"lone surrogate escape", "application/json", `{"wait_seconds":0,"software_version":"\ud800"}`, 200, "", ""},
		{"trailing garbage", "application/json", `{"max_tasks":1}{}`, 400, "bad-request", ""},
		{"trailing NUL", "application/json", "{\"max_tasks\":1}\x00", 400, "bad-request", ""},
		{"raw NUL in string", "application/json", "{\"software_version\":\"a\x00b\"}", 400, "bad-request", ""},
		{"escaped NUL in string", "application/json", `{"software_version":"a\u0000b"}`, 400, "bad-request", bugNUL},
		{"escaped NUL in capabilities", "application/json", `{"capabilities":{"k":"a\u0000b"}}`, 400, "bad-request", bugNUL},
		{"1 MiB string", "application/json", `{"software_version":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "payload-too-large", ""},
		{"long string under the body limit", "application/json", `{"software_version":"` + strings.Repeat("x", 60<<10) + `"}`, 400, "bad-request", ""},
		{"1e999", "application/json", `{"max_tasks":1e999}`, 400, "bad-request", ""},
		{"-0 below minimum", "application/json", `{"max_tasks":-0}`, 400, "bad-request", ""},
		{"2^53+1", "application/json", `{"max_tasks":9007199254740993}`, 400, "bad-request", ""},
		{"huge wait", "application/json", `{"wait_seconds":9007199254740993}`, 400, "bad-request", ""},
		{"fraction", "application/json", `{"max_tasks":1.5}`, 400, "bad-request", ""},
		{"text/plain", "text/plain", `{"max_tasks":1}`, 415, "unsupported-media-type", ""},
		{"no content type", "", `{"max_tasks":1}`, 415, "unsupported-media-type", ""},
		{"form", "application/x-www-form-urlencoded", `max_tasks=1`, 415, "unsupported-media-type", ""},
		{"latin1 bytes with charset=latin1", "application/json; charset=latin1", "{\"software_version\":\"caf\xe9\"}", 400, "bad-request", ""},
		{"malformed content type", "application/json; charset", `{"max_tasks":1}`, 415, "unsupported-media-type", ""},
	}
	taskCases := []tc{
		{"deep arrays", "application/json", deepArrays, 400, "bad-request", ""},
		{"deep payload", "application/json", task(`,"payload":` + deepObjects), 400, "bad-request", ""},
		{"duplicate keys", "application/json", task(`,"priority":1,"priority":2`), 400, "bad-request", ""},
		{"duplicate nested keys", "application/json", task(`,"payload":{"a":1,"a":2}`), 400, "bad-request", ""},
		{"case-variant duplicate", "application/json", task(`,"priority":1,"PRIORITY":1000`), 400, "bad-request", ""},
		{"case-variant over limit", "application/json", task(`,"Max_Attempts":100000`), 400, "bad-request", ""},
		{"case-variant nested", "application/json", task(`,"retry":{"base_seconds":1,"BASE_SECONDS":86401}`), 400, "bad-request", ""},
		{"case-variant required field", "application/json", `{"ORGANIZATION_ID":"` + org.String() + `","task_type":"scanner_plugin"}`, 400, "bad-request", ""},
		{"invalid UTF-8 in payload", "application/json", task(",\"payload\":{\"s\":\"\xc3\x28\"}"), 400, "bad-request", ""},
		{"trailing garbage", "application/json", task("") + ` 1`, 400, "bad-request", ""},
		{"NUL after value", "application/json", task("") + "\x00", 400, "bad-request", ""},
		{"escaped NUL in payload", "application/json", task(`,"payload":{"s":"a\u0000b"}`), 400, "bad-request", bugNUL},
		{"escaped NUL in payload key", "application/json", task(`,"payload":{"a\u0000":1}`), 400, "bad-request", bugNUL},
		{"escaped NUL in capabilities", "application/json", task(`,"required_capabilities":{"k":"\u0000"}`), 400, "bad-request", bugNUL},
		{"1 MiB payload string", "application/json", task(`,"payload":{"s":"` + strings.Repeat("x", 1<<20) + `"}`), 413, "payload-too-large", ""},
		{"1 MB organization id", "application/json", `{"organization_id":"` + strings.Repeat("7", 1000000) + `","task_type":"scanner_plugin"}`, 400, "bad-request", ""},
		{"1e999 priority", "application/json", task(`,"priority":1e999`), 400, "bad-request", ""},
		{"1e999 delay", "application/json", task(`,"delay_seconds":1e999`), 400, "bad-request", ""},
		{"-0 max attempts", "application/json", task(`,"max_attempts":-0`), 400, "bad-request", ""},
		{"2^53+1 priority", "application/json", task(`,"priority":9007199254740993`), 400, "bad-request", ""},
		{"2^53+1 attempt timeout", "application/json", task(`,"attempt_timeout_seconds":9007199254740993`), 400, "bad-request", ""},
		{"huge payload number", "application/json", task(`,"payload":{"n":1e999}`), 400, "bad-request", bugNumbers},
		{"enormous payload number", "application/json", task(`,"payload":{"n":1e100000}`), 400, "bad-request", bugNumbers},
		{"tiny payload number", "application/json", task(`,"payload":{"n":1e-100000}`), 400, "bad-request", bugNumbers},
		{"text/plain", "text/plain", task(""), 415, "unsupported-media-type", ""},
		{"latin1 bytes with charset=latin1", "application/json; charset=latin1", task(",\"payload\":{\"s\":\"caf\xe9\"}"), 400, "bad-request", ""},
	}
	run := func(t *testing.T, client *http.Client, path, auth string, c tc) {
		req, err := http.NewRequest(http.MethodPost, g.URL+path, strings.NewReader(c.body))
		require.NoError(t, err)
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		if c.bug != "" && res.StatusCode != c.status {
			t.Fatalf("regression: %s (got %d, %d bytes: %.200s)", c.bug, res.StatusCode, len(raw), raw)
		}
		if c.status < 300 {
			require.Equal(t, c.status, res.StatusCode, string(raw))
			return
		}
		code := requireProblem(t, res.StatusCode, res.Header, raw)
		require.Equal(t, c.status, res.StatusCode, string(raw))
		require.Equal(t, c.code, code, string(raw))
	}
	for _, c := range leaseCases {
		t.Run("leases/"+c.name, func(t *testing.T) { run(t, w.HTTP, "/v1/leases", "", c) })
	}
	for _, c := range taskCases {
		t.Run("tasks/"+c.name, func(t *testing.T) { run(t, control, "/v1/tasks", bearer, c) })
	}

	// A 1 GiB body, streamed (chunked) or declared: cut at the body limit
	// with a 413, and the client stops sending long before the end.
	for _, route := range []struct {
		name, path, auth string
		client           *http.Client
	}{{"leases", "/v1/leases", "", w.HTTP}, {"tasks", "/v1/tasks", bearer, control}} {
		for _, declared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/1 GiB body declared=%v", route.name, declared), func(t *testing.T) {
				body := newEndlessBody(1 << 30)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+route.path, body)
				require.NoError(t, err)
				req.ContentLength = -1
				if declared {
					req.ContentLength = 1 << 30
				}
				req.Header.Set("Content-Type", "application/json")
				if route.auth != "" {
					req.Header.Set("Authorization", route.auth)
				}
				res, err := route.client.Do(req)
				require.NoError(t, err)
				raw, err := io.ReadAll(res.Body)
				res.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, string(raw))
				require.Equal(t, "payload-too-large", requireProblem(t, res.StatusCode, res.Header, raw))
				require.Less(t, body.produced.Load(), int64(10<<20), "the client stopped sending early")
			})
		}
	}
}

// rawConn opens a TLS connection to the gateway speaking HTTP/1.1 with the
// worker's certificate.
func rawConn(t *testing.T, g *harness.Gateway, w *harness.Worker) *tls.Conn {
	t.Helper()
	cfg := w.TLSConfig()
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(g.URL, "https://"), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.Equal(t, "http/1.1", conn.ConnectionState().NegotiatedProtocol)
	return conn
}

// TestHostileContentLengthLies sends bodies shorter and longer than their
// Content-Length over a raw HTTP/1.1 connection.
func TestHostileContentLengthLies(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	body := `{"max_tasks":1,"wait_seconds":0}`

	t.Run("declared shorter than sent", func(t *testing.T) {
		conn := rawConn(t, g, w)
		require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
		_, err := fmt.Fprintf(conn, "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n%s", body)
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// The server read 10 bytes: `{"max_task`, not JSON.
		require.Equal(t, "bad-request", requireProblem(t, res.StatusCode, res.Header, raw))
	})

	t.Run("declared longer than sent, then end of stream", func(t *testing.T) {
		conn := rawConn(t, g, w)
		require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
		_, err := fmt.Fprintf(conn, "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n%s", body)
		require.NoError(t, err)
		// close_notify: the server sees the body end early.
		require.NoError(t, conn.CloseWrite())
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			// Closing without an answer is acceptable too.
			return
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("regression: a body shorter than its Content-Length is answered %d: %s", res.StatusCode, raw)
		}
		requireProblem(t, res.StatusCode, res.Header, raw)
	})

	t.Run("declared longer than sent over HTTP/2 client", func(t *testing.T) {
		// net/http refuses to send fewer bytes than declared: the request
		// fails on the client side and the server answers nothing harmful.
		req, err := http.NewRequest(http.MethodPost, g.URL+"/v1/leases", strings.NewReader(body))
		require.NoError(t, err)
		req.ContentLength = int64(len(body)) + 100
		req.Header.Set("Content-Type", "application/json")
		res, err := w.HTTP.Do(req)
		if err == nil {
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode >= 500 {
				t.Fatalf("regression: an HTTP/2 body shorter than its Content-Length is answered %d: %s", res.StatusCode, raw)
			}
			requireProblem(t, res.StatusCode, res.Header, raw)
		}
	})
}

// TestHostileBodiesMemory rejects 16 concurrent 1 GiB bodies while sampling
// this process's heap (the gateway runs in-process): growth stays far below
// what was attempted.
func TestHostileBodiesMemory(t *testing.T) {
	// Not parallel: the heap is shared with every other test.
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	const n = 16
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	var produced atomic.Int64
	for i := range n {
		wg.Go(func() {
			body := newEndlessBody(1 << 30)
			defer func() { produced.Add(body.produced.Load()) }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			path, client, auth := "/v1/leases", w.HTTP, ""
			if i%2 == 1 {
				path, client, auth = "/v1/tasks", g.HTTPClient(nil), "Bearer "+g.AdminToken
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+path, body)
			req.ContentLength = -1
			req.Header.Set("Content-Type", "application/json")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			res, err := client.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses <- res.StatusCode
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(statuses)
	for s := range statuses {
		require.Equal(t, http.StatusRequestEntityTooLarge, s)
	}
	growth := int64(peak.Load()) - int64(baseline)
	t.Logf("heap baseline %d MiB, peak %d MiB, client produced %d MiB of %d GiB attempted",
		baseline>>20, peak.Load()>>20, produced.Load()>>20, n)
	require.Less(t, growth, int64(256<<20), "heap growth while rejecting %d GiB", n)
	require.Less(t, produced.Load(), int64(n*10<<20))
}

// TestSlowloris holds connections open the slow way; the server must close
// them within its own timeouts (ReadHeaderTimeout 10 s for headers,
// ReadTimeout 30 s for the whole request, constants in NewHTTPServer). Each
// case waits at most 40 s for the close. SLOW: about 30 s of wall time.
func TestSlowloris(t *testing.T) {
	if testing.Short() {
		t.Skip("slowloris takes ~30 s")
	}
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)

	// trickle writes data one byte per interval until the connection fails
	// or stop closes.
	trickle := func(conn net.Conn, data string, every time.Duration, stop <-chan struct{}) {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			if _, err := conn.Write([]byte{data[i%len(data)]}); err != nil {
				return
			}
		}
	}
	// awaitClose reads until the server ends the connection; it fails if
	// our own 40 s deadline fires first.
	awaitClose := func(t *testing.T, conn net.Conn) []byte {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(40*time.Second)))
		got, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept a slowloris connection open for 40 s (read %q)", got)
		}
		return got
	}

	t.Run("headers one byte at a time", func(t *testing.T) {
		t.Parallel()
		conn := rawConn(t, g, w)
		stop := make(chan struct{})
		defer close(stop)
		go trickle(conn, "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nX-Pad: "+strings.Repeat("a", 1<<16), 100*time.Millisecond, stop)
		awaitClose(t, conn)
	})

	t.Run("body one byte at a time", func(t *testing.T) {
		t.Parallel()
		conn := rawConn(t, g, w)
		body := `{"software_version":"` + strings.Repeat("x", 1000) + `"}`
		_, err := fmt.Fprintf(conn, "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		require.NoError(t, err)
		stop := make(chan struct{})
		defer close(stop)
		go trickle(conn, body, 100*time.Millisecond, stop)
		got := awaitClose(t, conn)
		if len(got) > 0 {
			res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
			require.NoError(t, err, "%q", got)
			raw, _ := io.ReadAll(res.Body)
			if res.StatusCode >= 500 {
				t.Fatalf("regression: a body that outlasts ReadTimeout is answered %d: %s", res.StatusCode, raw)
			}
			requireProblem(t, res.StatusCode, res.Header, raw)
		}
	})
}

// TestPollLimits holds long-polls open past PollsPerWorker and MaxPolls:
// the extra polls get 429 with Retry-After, the held ones carry on and are
// answered when their wait ends.
func TestPollLimits(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Limits.PollsPerWorker = 2
		c.Limits.MaxPolls = 3
	}})
	org := g.NewOrganization(t, "acme")
	a := g.NewWorker(t, "a", 1, org)
	b := g.NewWorker(t, "b", 1, org)
	c := g.NewWorker(t, "c", 1, org)

	type answer struct {
		status int
		header http.Header
		raw    []byte
	}
	poll := func(w *harness.Worker, wait int) answer {
		body := `{"max_tasks":1,"wait_seconds":` + strconv.Itoa(wait) + `}`
		req, err := http.NewRequest(http.MethodPost, g.URL+"/v1/leases", strings.NewReader(body))
		if err != nil {
			return answer{}
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := w.HTTP.Do(req)
		if err != nil {
			return answer{raw: []byte(err.Error())}
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return answer{res.StatusCode, res.Header, raw}
	}
	requireRefused := func(a answer, code string) {
		t.Helper()
		require.Equal(t, http.StatusTooManyRequests, a.status, string(a.raw))
		require.Equal(t, code, requireProblem(t, a.status, a.header, a.raw))
		require.NotEmpty(t, a.header.Get("Retry-After"))
		secs, err := strconv.Atoi(a.header.Get("Retry-After"))
		require.NoError(t, err)
		require.Positive(t, secs)
	}

	// Held polls wait 15 s: long enough to outlast the probes below.
	const hold = 15
	held := make(chan answer, 3)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { held <- poll(a, hold) })
	}
	harness.WaitFor(t, 10*time.Second, "a's two polls waiting", func() bool { return g.Server.Hub().Waiting() == 2 })
	requireRefused(poll(a, 0), "capacity-exceeded")
	requireRefused(poll(a, hold), "capacity-exceeded")

	wg.Go(func() { held <- poll(b, hold) })
	harness.WaitFor(t, 10*time.Second, "three polls waiting", func() bool { return g.Server.Hub().Waiting() == 3 })
	requireRefused(poll(c, 0), "too-many-requests")
	requireRefused(poll(b, 0), "too-many-requests")
	require.Equal(t, 3, g.Server.Hub().Waiting(), "the refusals disturbed no held poll")

	// The held polls are answered normally when their wait ends.
	wg.Wait()
	close(held)
	for h := range held {
		require.Equal(t, http.StatusOK, h.status, string(h.raw))
		require.JSONEq(t, `{"leases": []}`, string(h.raw))
	}
	// And their slots are free again.
	for _, w := range []*harness.Worker{a, c} {
		got := poll(w, 0)
		require.Equal(t, http.StatusOK, got.status, string(got.raw))
	}
}
