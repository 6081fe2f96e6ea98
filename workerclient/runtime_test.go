package workerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
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

// The runtime tests drive a Worker against fakeGateway, an in-memory
// implementation of the worker routes served through an in-process
// transport, inside a synctest bubble: time is virtual, so leases, heartbeats
// and drains of many seconds take none, and the bubble proves that Run leaves
// no goroutine behind.

// fault is one injected failure of a worker call.
type fault struct {
	transport  bool   // fail with a transport error…
	afterServe bool   // …after the gateway served the request (a lost answer)
	status     int    // or answer this problem status
	code       string // with this problem code
	retryAfter string
}

type pollRecord struct {
	key      string
	maxTasks int
	at       time.Time
}

type completion struct {
	req apiclient.CompleteRequest
	at  time.Time
}

type fakeGateway struct {
	t        *testing.T
	mux      *http.ServeMux
	ttl      float64 // lease_ttl_seconds granted and renewed
	interval float64 // heartbeat_interval_seconds

	mu         sync.Mutex
	overGrant  bool // ignore max_tasks
	refuseNext bool // answer a completion call with next 400, as a release before it
	queue      []apiclient.Lease
	wake       chan struct{} // closed when the queue grows
	tokens     map[uuid.UUID]string
	intervals  map[uuid.UUID]float64
	calls      map[string]int // every call, failed ones included
	state      map[uuid.UUID]apiclient.LeaseState
	byKey      map[string][]apiclient.Lease // poll idempotency keys
	faults     map[string][]fault
	down       map[string]bool // every call fails with a transport error
	polls      []pollRecord
	heartbeats [][]uuid.UUID
	starts     []uuid.UUID
	completes  map[uuid.UUID][]completion
	// finalResults takes a completion's final_results (set by newFakeResults).
	finalResults func(id uuid.UUID, token string, b apiclient.ResultBatch) (status int, code string)
}

func newFakeGateway(t *testing.T) *fakeGateway {
	g := &fakeGateway{
		t: t, mux: http.NewServeMux(), ttl: 30, interval: 10,
		wake:      make(chan struct{}),
		tokens:    map[uuid.UUID]string{},
		intervals: map[uuid.UUID]float64{},
		calls:     map[string]int{},
		state:     map[uuid.UUID]apiclient.LeaseState{},
		byKey:     map[string][]apiclient.Lease{},
		faults:    map[string][]fault{},
		down:      map[string]bool{},
		completes: map[uuid.UUID][]completion{},
	}
	g.mux.HandleFunc("POST /v1/leases", g.handleLeases)
	g.mux.HandleFunc("POST /v1/heartbeat", g.handleHeartbeat)
	g.mux.HandleFunc("POST /v1/attempts/{id}/start", g.handleStart)
	g.mux.HandleFunc("POST /v1/attempts/{id}/complete", g.handleComplete)
	g.mux.HandleFunc("POST /v1/attempts/complete", g.handleCompleteMany)
	return g
}

// runtime returns a Worker wired to g, with cfg's zero fields filled in.
func (g *fakeGateway) runtime(cfg Config) *Worker {
	cfg.GatewayURL = "https://gateway.test"
	cfg.HTTPClient = &http.Client{Transport: g}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w, err := NewWorker(cfg)
	require.NoError(g.t, err)
	return w
}

// enqueue makes a task with this payload leasable and returns its lease.
func (g *fakeGateway) enqueue(payload string, edit ...func(*apiclient.Lease)) apiclient.Lease {
	return g.enqueueAs("active", payload, edit...)
}

// enqueueAs enqueues a lease already in state s when the runtime first
// sees it (setting the state after enqueue races with the runtime's poll).
func (g *fakeGateway) enqueueAs(s apiclient.LeaseState, payload string, edit ...func(*apiclient.Lease)) apiclient.Lease {
	l := apiclient.Lease{
		AttemptId:                uuid.New(),
		LeaseToken:               "tok-" + uuid.NewString(),
		LeaseTtlSeconds:          g.ttl,
		HeartbeatIntervalSeconds: g.interval,
		Task: apiclient.TaskSnapshot{
			Id: uuid.New(), TaskType: apiclient.TaskTypeScannerPlugin, OrganizationId: uuid.New(),
			Payload: json.RawMessage(payload), AttemptNumber: 1, MaxAttempts: 3,
		},
	}
	for _, e := range edit {
		e(&l)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = append(g.queue, l)
	g.tokens[l.AttemptId] = l.LeaseToken
	g.intervals[l.AttemptId] = l.HeartbeatIntervalSeconds
	g.state[l.AttemptId] = s
	close(g.wake)
	g.wake = make(chan struct{})
	return l
}

func (g *fakeGateway) inject(op string, f ...fault) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults[op] = append(g.faults[op], f...)
}

func (g *fakeGateway) setDown(op string, down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down[op] = down
}

func (g *fakeGateway) setState(id uuid.UUID, s apiclient.LeaseState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state[id] = s
}

func (g *fakeGateway) completionsOf(id uuid.UUID) []completion {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]completion(nil), g.completes[id]...)
}

// tokenOf is the token that holds a lease now.
func (g *fakeGateway) tokenOf(id uuid.UUID) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tokens[id]
}

func (g *fakeGateway) callCount(op string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[op]
}

func (g *fakeGateway) pollRecords() []pollRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]pollRecord(nil), g.polls...)
}

func (g *fakeGateway) heartbeatCalls() [][]uuid.UUID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]uuid.UUID(nil), g.heartbeats...)
}

// RoundTrip serves req in-process, after any injected fault.
func (g *fakeGateway) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
	if req.Method == http.MethodPut && strings.HasPrefix(req.URL.Path, "/v1/uploads/") {
		op = "upload" // not the upload's id
	}
	g.mu.Lock()
	g.calls[op]++
	var f fault
	if q := g.faults[op]; len(q) > 0 {
		f, g.faults[op] = q[0], q[1:]
	}
	down := g.down[op]
	g.mu.Unlock()
	if down || (f.transport && !f.afterServe) {
		return nil, errors.New("connection reset by peer")
	}
	rec := httptest.NewRecorder()
	if f.status != 0 {
		if f.retryAfter != "" {
			rec.Header().Set("Retry-After", f.retryAfter)
		}
		writeProblem(rec, f.status, f.code)
	} else {
		g.mux.ServeHTTP(rec, req)
	}
	if f.transport {
		return nil, errors.New("connection reset by peer after the request was served")
	}
	return rec.Result(), nil
}

func writeProblem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiclient.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (g *fakeGateway) decode(r *http.Request, v any) {
	body, err := io.ReadAll(r.Body)
	require.NoError(g.t, err)
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	require.NoError(g.t, dec.Decode(v), "request body %s", body)
}

func (g *fakeGateway) handleLeases(w http.ResponseWriter, r *http.Request) {
	var req apiclient.LeaseRequest
	g.decode(r, &req)
	key := r.Header.Get("Idempotency-Key")
	require.NotEmpty(g.t, key, "every poll carries an Idempotency-Key")
	require.NotNil(g.t, req.MaxTasks)
	require.Equal(g.t, ProtocolVersion, *req.ProtocolVersion)
	g.mu.Lock()
	g.polls = append(g.polls, pollRecord{key: key, maxTasks: *req.MaxTasks, at: time.Now()})
	if prev, ok := g.byKey[key]; ok {
		// The gateway stores only token hashes: a replay answers the same
		// leases with fresh tokens, and the old ones stop working.
		replay := make([]apiclient.Lease, len(prev))
		for i, l := range prev {
			l.LeaseToken = "tok-" + uuid.NewString()
			g.tokens[l.AttemptId] = l.LeaseToken
			replay[i] = l
		}
		g.byKey[key] = replay
		g.mu.Unlock()
		writeJSON(w, apiclient.LeaseResponse{Leases: replay})
		return
	}
	g.mu.Unlock()

	timeout := time.NewTimer(time.Duration(*req.WaitSeconds) * time.Second)
	defer timeout.Stop()
	for {
		g.mu.Lock()
		n := min(*req.MaxTasks, len(g.queue))
		if g.overGrant {
			n = len(g.queue)
		}
		granted := append([]apiclient.Lease{}, g.queue[:n]...)
		g.queue = g.queue[n:]
		wake := g.wake
		if n > 0 {
			g.byKey[key] = granted
		}
		g.mu.Unlock()
		if n > 0 {
			writeJSON(w, apiclient.LeaseResponse{Leases: granted})
			return
		}
		select {
		case <-wake:
		case <-timeout.C:
			writeJSON(w, apiclient.LeaseResponse{Leases: []apiclient.Lease{}})
			return
		case <-r.Context().Done():
			return
		}
	}
}

// status answers for one lease, given its token.
func (g *fakeGateway) status(id uuid.UUID, token string) apiclient.LeaseStatus {
	interval := g.intervals[id]
	st := apiclient.LeaseStatus{AttemptId: id, State: g.state[id], LeaseTtlSeconds: g.ttl, HeartbeatIntervalSeconds: &interval}
	if g.tokens[id] != token || st.State == "" {
		st.State = "lost"
	}
	switch st.State {
	case "lost":
		st.LeaseTtlSeconds, st.HeartbeatIntervalSeconds = 0, nil
	case "cancel_requested":
		st.CancelRequested = true
	}
	return st
}

func (g *fakeGateway) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var req apiclient.WorkerHeartbeatRequest
	g.decode(r, &req)
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]uuid.UUID, 0, len(req.Leases))
	resp := apiclient.WorkerHeartbeatResponse{Leases: []apiclient.LeaseStatus{}}
	for _, ref := range req.Leases {
		ids = append(ids, ref.AttemptId)
		resp.Leases = append(resp.Leases, g.status(ref.AttemptId, ref.LeaseToken))
	}
	g.heartbeats = append(g.heartbeats, ids)
	writeJSON(w, resp)
}

func (g *fakeGateway) handleStart(w http.ResponseWriter, r *http.Request) {
	id := uuid.MustParse(r.PathValue("id"))
	g.mu.Lock()
	defer g.mu.Unlock()
	g.starts = append(g.starts, id)
	st := g.status(id, r.Header.Get("Lease-Token"))
	if st.State == "lost" {
		writeProblem(w, http.StatusConflict, "lease-lost")
		return
	}
	writeJSON(w, st)
}

func (g *fakeGateway) handleComplete(w http.ResponseWriter, r *http.Request) {
	var req apiclient.CompleteRequest
	g.decode(r, &req)
	a := g.completeOne(uuid.MustParse(r.PathValue("id")), r.Header.Get("Lease-Token"), req)
	if a.Status != http.StatusOK {
		writeProblem(w, a.Status, a.Problem.Code)
		return
	}
	writeJSON(w, a.Result)
}

// handleCompleteMany answers each completion as handleComplete would.
func (g *fakeGateway) handleCompleteMany(w http.ResponseWriter, r *http.Request) {
	var req apiclient.CompleteManyRequest
	g.decode(r, &req)
	g.mu.Lock()
	refuse := g.refuseNext && req.Next != nil
	g.mu.Unlock()
	if refuse {
		writeProblem(w, http.StatusBadRequest, "bad-request")
		return
	}
	out := apiclient.CompleteManyResponse{Completions: []apiclient.CompletionAnswer{}}
	ids := []string{}
	for _, it := range req.Completions {
		out.Completions = append(out.Completions, g.completeOne(it.AttemptId, it.LeaseToken, apiclient.CompleteRequest{
			Outcome: it.Outcome, Error: it.Error, LastSequenceNumber: it.LastSequenceNumber, FinalResults: it.FinalResults,
		}))
		ids = append(ids, it.AttemptId.String())
	}
	if req.Next != nil {
		// As the gateway does: a poll keyed by the attempts completed, that
		// does not wait.
		slices.Sort(ids)
		leases := g.grant("next:"+strings.Join(ids, ","), *req.Next.MaxTasks)
		out.Leases = &leases
	}
	writeJSON(w, out)
}

// grant leases up to n queued tasks under a poll's key at once, or
// replays the leases the key got before under fresh tokens.
func (g *fakeGateway) grant(key string, n int) []apiclient.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	if prev, ok := g.byKey[key]; ok {
		replay := make([]apiclient.Lease, len(prev))
		for i, l := range prev {
			l.LeaseToken = "tok-" + uuid.NewString()
			g.tokens[l.AttemptId] = l.LeaseToken
			replay[i] = l
		}
		g.byKey[key] = replay
		return replay
	}
	n = min(n, len(g.queue))
	granted := append([]apiclient.Lease{}, g.queue[:n]...)
	g.queue = g.queue[n:]
	g.byKey[key] = granted
	return granted
}

func (g *fakeGateway) completeOne(id uuid.UUID, token string, req apiclient.CompleteRequest) apiclient.CompletionAnswer {
	if req.FinalResults != nil && g.finalResults != nil {
		if status, code := g.finalResults(id, token, *req.FinalResults); status != http.StatusOK {
			return apiclient.CompletionAnswer{AttemptId: id, Status: status,
				Problem: &apiclient.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code}}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tokens[id] != token || g.state[id] == "lost" {
		return apiclient.CompletionAnswer{AttemptId: id, Status: http.StatusConflict,
			Problem: &apiclient.Problem{Type: "about:blank", Title: "Conflict", Status: http.StatusConflict, Code: "lease-lost"}}
	}
	g.completes[id] = append(g.completes[id], completion{req: req, at: time.Now()})
	return apiclient.CompletionAnswer{AttemptId: id, Status: http.StatusOK,
		Result: &apiclient.CompleteResponse{AttemptId: id, AttemptStatus: apiclient.AttemptStatus(req.Outcome), TaskState: "completed", FinishedAt: time.Now()}}
}

// runInBackground runs w until the returned stop is called, and returns
// Run's error from stop.
func runInBackground(ctx context.Context, w *Worker) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// waitFor sleeps (in virtual time) until cond holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within %v", limit)
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunLeasesStartsRunsAndCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		var (
			mu            sync.Mutex
			running, peak int
			seen          []*LeasedTask
		)
		w := g.runtime(Config{Slots: 2, Handler: func(ctx context.Context, task *LeasedTask) error {
			mu.Lock()
			running++
			peak = max(peak, running)
			seen = append(seen, task)
			mu.Unlock()
			time.Sleep(3 * time.Second)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}})
		stop := runInBackground(t.Context(), w)

		var leases []apiclient.Lease
		for i := range 5 {
			leases = append(leases, g.enqueue(fmt.Sprintf(`{"n":%d}`, i)))
		}
		waitFor(t, time.Minute, func() bool {
			for _, l := range leases {
				if len(g.completionsOf(l.AttemptId)) == 0 {
					return false
				}
			}
			return true
		})
		require.NoError(t, stop())

		assert.Equal(t, 2, peak, "never more handlers than slots")
		for _, l := range leases {
			cs := g.completionsOf(l.AttemptId)
			require.Len(t, cs, 1)
			assert.Equal(t, apiclient.AttemptOutcomeSucceeded, cs[0].req.Outcome)
			assert.Nil(t, cs[0].req.Error)
		}
		assert.ElementsMatch(t, attemptIDs(leases), g.starts, "every attempt is started once")
		byAttempt := map[uuid.UUID]*LeasedTask{}
		for _, task := range seen {
			byAttempt[task.AttemptID] = task
		}
		for _, l := range leases {
			task := byAttempt[l.AttemptId]
			require.NotNil(t, task)
			assert.Equal(t, l.Task.Id, task.ID)
			assert.Equal(t, "scanner_plugin", task.Type)
			assert.Equal(t, l.Task.OrganizationId, task.OrganizationID)
			assert.JSONEq(t, string(l.Task.Payload), string(task.Payload))
			assert.Equal(t, 1, task.AttemptNumber)
			assert.Equal(t, 3, task.MaxAttempts)
		}
		keys := map[string]bool{}
		for _, p := range g.pollRecords() {
			assert.True(t, p.maxTasks >= 1 && p.maxTasks <= 2, "max_tasks %d is the free slots, never 0", p.maxTasks)
			assert.False(t, keys[p.key], "a fresh Idempotency-Key per poll")
			keys[p.key] = true
		}
	})
}

func attemptIDs(leases []apiclient.Lease) []uuid.UUID {
	ids := make([]uuid.UUID, len(leases))
	for i, l := range leases {
		ids[i] = l.AttemptId
	}
	return ids
}

func TestRunReportsHandlerResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		w := g.runtime(Config{Slots: 4, Handler: func(ctx context.Context, task *LeasedTask) error {
			switch string(task.Payload) {
			case `"permanent"`:
				return fmt.Errorf("resolving: %w", Permanent("nxdomain", "no such host"))
			case `"plain"`:
				return errors.New("connection refused")
			case `"panic"`:
				panic("bug")
			}
			return nil
		}})
		stop := runInBackground(t.Context(), w)
		permanent, plain, panicking := g.enqueue(`"permanent"`), g.enqueue(`"plain"`), g.enqueue(`"panic"`)
		all := []apiclient.Lease{permanent, plain, panicking}
		waitFor(t, time.Minute, func() bool {
			for _, l := range all {
				if len(g.completionsOf(l.AttemptId)) == 0 {
					return false
				}
			}
			return true
		})
		require.NoError(t, stop())

		check := func(l apiclient.Lease, code string, retryable bool) {
			t.Helper()
			req := g.completionsOf(l.AttemptId)[0].req
			assert.Equal(t, apiclient.AttemptOutcomeFailed, req.Outcome)
			require.NotNil(t, req.Error)
			assert.Equal(t, code, req.Error.Code)
			assert.Equal(t, retryable, *req.Error.Retryable)
		}
		check(permanent, "nxdomain", false)
		check(plain, CodeHandlerError, true)
		check(panicking, CodeHandlerPanic, true)
	})
}

func TestHeartbeatsRenewAllLeasesInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		release := make(chan struct{})
		w := g.runtime(Config{Slots: 3, Handler: func(ctx context.Context, task *LeasedTask) error {
			<-release
			return nil
		}})
		stop := runInBackground(t.Context(), w)
		slow := g.enqueue(`{}`)
		fast := g.enqueue(`{}`, func(l *apiclient.Lease) { l.HeartbeatIntervalSeconds = 4 })
		time.Sleep(25 * time.Second)

		calls := g.heartbeatCalls()
		assert.Len(t, calls, 25/4, "renewed every 4 s, the shortest interval of the held leases")
		for _, ids := range calls {
			assert.ElementsMatch(t, []uuid.UUID{slow.AttemptId, fast.AttemptId}, ids, "one call renews every lease")
		}
		close(release)
		waitFor(t, time.Minute, func() bool {
			return len(g.completionsOf(slow.AttemptId)) == 1 && len(g.completionsOf(fast.AttemptId)) == 1
		})
		n := len(g.heartbeatCalls())
		time.Sleep(time.Minute)
		assert.Equal(t, n, len(g.heartbeatCalls()), "no heartbeats without leases")
		require.NoError(t, stop())
	})
}

func TestCancelRequestedCancelsTheHandlerAndCompletesCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		time.Sleep(time.Second)
		g.setState(l.AttemptId, "cancel_requested")
		asked := time.Now()

		require.ErrorIs(t, <-causes, ErrCancelRequested)
		assert.LessOrEqual(t, time.Since(asked), 10*time.Second, "within one heartbeat interval")
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		req := g.completionsOf(l.AttemptId)[0].req
		assert.Equal(t, apiclient.AttemptOutcomeCancelled, req.Outcome)
		assert.Nil(t, req.Error)
		require.NoError(t, stop())
	})
}

func TestCancelRequestedAtStartSkipsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		called := false
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error {
			called = true
			return nil
		}})
		stop := runInBackground(t.Context(), w)
		l := g.enqueueAs("cancel_requested", `{}`)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())
		assert.False(t, called)
		assert.Equal(t, apiclient.AttemptOutcomeCancelled, g.completionsOf(l.AttemptId)[0].req.Outcome)
	})
}

func TestLostLeaseIsNotCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		causes := make(chan error, 2)
		w := g.runtime(Config{Slots: 2, Handler: func(ctx context.Context, task *LeasedTask) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}})
		stop := runInBackground(t.Context(), w)

		// Lost at start: the handler never runs.
		atStart := g.enqueueAs("lost", `{}`)
		// Lost while running: the next heartbeat says so.
		running := g.enqueue(`{}`)
		time.Sleep(time.Second)
		g.setState(running.AttemptId, "lost")

		require.ErrorIs(t, <-causes, ErrLeaseLost)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		assert.Empty(t, g.completionsOf(atStart.AttemptId))
		assert.Empty(t, g.completionsOf(running.AttemptId))
		assert.Empty(t, causes, "a lease lost at start never reaches the handler")
	})
}

func TestLeaseExpiresLocallyWhenHeartbeatsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}})
		stop := runInBackground(t.Context(), w)
		g.setDown("heartbeat", true)
		granted := time.Now()
		l := g.enqueue(`{}`)

		require.ErrorIs(t, <-causes, ErrLeaseLost)
		assert.InDelta(t, 30, time.Since(granted).Seconds(), 0.5, "cancelled when the TTL runs out, not before")
		time.Sleep(time.Second)
		require.NoError(t, stop())
		assert.Empty(t, g.completionsOf(l.AttemptId))
		assert.Greater(t, g.callCount("heartbeat"), 3, "failed renewals are retried")
	})
}

func TestAttemptDeadlineCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}})
		stop := runInBackground(t.Context(), w)
		granted := time.Now()
		l := g.enqueue(`{}`, func(l *apiclient.Lease) { l.Task.AttemptDeadlineInSeconds = new(20.0) })

		require.ErrorIs(t, <-causes, ErrAttemptDeadline)
		assert.Equal(t, 19*time.Second, time.Since(granted), "a second before the deadline")
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())
		req := g.completionsOf(l.AttemptId)[0].req
		assert.Equal(t, apiclient.AttemptOutcomeFailed, req.Outcome)
		assert.Equal(t, CodeDeadline, req.Error.Code)
	})
}

func TestDrainLetsTasksFinishThenCancelsTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		w := g.runtime(Config{Slots: 3, DrainTimeout: 10 * time.Second, Handler: func(ctx context.Context, task *LeasedTask) error {
			if string(task.Payload) == `"quick"` {
				time.Sleep(5 * time.Second)
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}})
		stop := runInBackground(t.Context(), w)
		quick, stuck := g.enqueue(`"quick"`), g.enqueue(`"stuck"`)
		time.Sleep(time.Second)

		stopped := time.Now()
		require.NoError(t, stop())
		assert.Equal(t, 10*time.Second, time.Since(stopped), "Run returns once the drain timeout cancelled the rest")
		for _, p := range g.pollRecords() {
			assert.False(t, p.at.After(stopped), "no poll after the shutdown began")
		}
		cs := g.completionsOf(quick.AttemptId)
		require.Len(t, cs, 1)
		assert.Equal(t, apiclient.AttemptOutcomeSucceeded, cs[0].req.Outcome)
		cs = g.completionsOf(stuck.AttemptId)
		require.Len(t, cs, 1)
		assert.Equal(t, apiclient.AttemptOutcomeCancelled, cs[0].req.Outcome, "given back without using an attempt")
		assert.Equal(t, CodeWorkerShutdown, cs[0].req.Error.Code)
	})
}

func TestDrainWithNothingRunningReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		time.Sleep(time.Second)
		stopped := time.Now()
		require.NoError(t, stop())
		assert.Zero(t, time.Since(stopped), "the waiting long-poll is abandoned at once")
	})
}

func TestRevokedWorkerStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()

		l := g.enqueue(`{}`)
		time.Sleep(time.Second)
		g.inject("heartbeat", fault{status: http.StatusForbidden, code: "worker-revoked"})

		err := <-done
		require.ErrorIs(t, err, ErrWorkerRevoked)
		var apiErr *APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusForbidden, apiErr.Status)
		require.ErrorIs(t, <-causes, ErrLeaseLost, "a revoked worker's leases are gone")
		assert.Empty(t, g.completionsOf(l.AttemptId))
	})
}

func TestRevokedAtPollStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		g.inject("leases", fault{status: http.StatusForbidden, code: "worker-revoked"})
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		assert.ErrorIs(t, w.Run(t.Context()), ErrWorkerRevoked)
	})
}

func TestPollRetryReusesItsIdempotencyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		var mu sync.Mutex
		runs := 0
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error {
			mu.Lock()
			runs++
			mu.Unlock()
			return nil
		}})
		l := g.enqueue(`{}`)
		// The first answer is lost after the gateway granted the lease,
		// then the gateway is briefly unavailable.
		g.inject("leases",
			fault{transport: true, afterServe: true},
			fault{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: "1"},
		)
		stop := runInBackground(t.Context(), w)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())

		polls := g.pollRecords()
		require.GreaterOrEqual(t, len(polls), 2)
		assert.Equal(t, polls[0].key, polls[1].key, "the retried poll repeats its key")
		assert.Equal(t, polls[0].maxTasks, polls[1].maxTasks, "and its body")
		assert.Equal(t, 1, runs, "the replayed lease runs once")
		assert.NotEqual(t, l.LeaseToken, g.tokenOf(l.AttemptId), "the replay replaced the token")
	})
}

func TestPollErrorsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		g.setDown("leases", true)
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		// Full jitter capped at 5 s averages 2.5 s a retry once capped.
		n := g.callCount("leases")
		assert.True(t, n > 10 && n < 100, "%d polls in a minute of transport errors", n)
	})
}

func TestPollHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		for range 100 {
			g.inject("leases", fault{status: http.StatusTooManyRequests, code: "too-many-requests", retryAfter: "2"})
		}
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		time.Sleep(9 * time.Second)
		require.NoError(t, stop())
		assert.Equal(t, 5, g.callCount("leases"), "Retry-After: 2 allows polls at 0, 2, 4, 6 and 8 s")
	})
}

func TestCompletionIsRetriedUntilAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		g.inject("complete",
			fault{transport: true, afterServe: true}, // recorded, answer lost
			fault{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: "3"},
			fault{transport: true},
		)
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 2 })
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		cs := g.completionsOf(l.AttemptId)
		require.Len(t, cs, 2, "retried until answered, then never again")
		assert.Equal(t, cs[0].req, cs[1].req, "the repeat is the same call")
		assert.GreaterOrEqual(t, cs[1].at.Sub(cs[0].at), 3*time.Second, "Retry-After honoured")
	})
}

func TestCompletionStopsOnLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		g.inject("complete", fault{status: http.StatusConflict, code: "lease-lost"})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		assert.Empty(t, g.completionsOf(l.AttemptId), "409 is final")
	})
}

func TestRunTwiceAtOnceIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		time.Sleep(time.Second)
		assert.ErrorContains(t, w.Run(t.Context()), "already running")
		require.NoError(t, stop())
	})
}

func TestLeasesBeyondFreeSlotsAreGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		g.overGrant = true
		started := make(chan uuid.UUID, 3)
		w := g.runtime(Config{Slots: 1, Handler: func(ctx context.Context, task *LeasedTask) error {
			started <- task.AttemptID
			<-ctx.Done()
			return nil
		}})
		ls := []apiclient.Lease{g.enqueue(`{}`), g.enqueue(`{}`), g.enqueue(`{}`)}
		stop := runInBackground(t.Context(), w)
		ran := <-started
		time.Sleep(time.Second)
		assert.Empty(t, started, "one slot, one handler")
		for _, l := range ls {
			if l.AttemptId == ran {
				assert.Empty(t, g.completionsOf(l.AttemptId))
				continue
			}
			cs := g.completionsOf(l.AttemptId)
			require.Len(t, cs, 1)
			assert.Equal(t, apiclient.AttemptOutcomeCancelled, cs[0].req.Outcome)
			assert.Equal(t, CodeOverCapacity, cs[0].req.Error.Code)
		}
		g.setState(ran, "cancel_requested")
		require.NoError(t, stop())
	})
}

func TestStartIsRetriedThenTheHandlerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		g.inject("start",
			fault{status: http.StatusServiceUnavailable, code: "unavailable"},
			fault{transport: true},
		)
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())
		assert.Equal(t, 3, g.callCount("start"))
		assert.Equal(t, apiclient.AttemptOutcomeSucceeded, g.completionsOf(l.AttemptId)[0].req.Outcome)
	})
}

func TestStartLeaseLostSkipsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		g.inject("start", fault{status: http.StatusConflict, code: "lease-lost"})
		called := false
		w := g.runtime(Config{Handler: func(context.Context, *LeasedTask) error {
			called = true
			return nil
		}})
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		assert.False(t, called)
		assert.Empty(t, g.completionsOf(l.AttemptId))
	})
}

// TestCompletionCarriesTheNextLease: a one-slot worker with a backlog gets
// each next task in its completion call — one request per task — and polls
// again only when a completion brings none.
func TestCompletionCarriesTheNextLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		var tasks []apiclient.Lease
		for i := range 5 {
			tasks = append(tasks, g.enqueue(fmt.Sprintf(`{"n":%d}`, i)))
		}
		w := g.runtime(Config{Slots: 1, WaitSeconds: 20, Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		waitFor(t, time.Minute, func() bool {
			for _, l := range tasks {
				if len(g.completionsOf(l.AttemptId)) == 0 {
					return false
				}
			}
			return true
		})
		synctest.Wait()
		require.Len(t, g.pollRecords(), 2, "the first poll, and one after the backlog ran out")
		require.Equal(t, 5, g.callCount("complete"))
		for _, l := range tasks {
			require.Len(t, g.completionsOf(l.AttemptId), 1)
		}
		require.NoError(t, stop())
	})
}

// TestNextLeaseOfALostAnswerIsReplayed: the answer to a completion call
// that carried a next lease is lost; the runtime repeats that very call, so
// the gateway replays the lease (under a fresh token) instead of leaving it
// stranded, and the task runs once, completed with the fresh token.
func TestNextLeaseOfALostAnswerIsReplayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		first := g.enqueue(`{}`)
		second := g.enqueue(`{}`)
		var mu sync.Mutex
		runs := map[uuid.UUID]int{}
		w := g.runtime(Config{Slots: 1, WaitSeconds: 20, Handler: func(_ context.Context, task *LeasedTask) error {
			mu.Lock()
			runs[task.ID]++
			mu.Unlock()
			return nil
		}})
		g.inject("complete", fault{transport: true, afterServe: true})
		stop := runInBackground(t.Context(), w)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(second.AttemptId)) > 0 })
		synctest.Wait()
		require.Equal(t, map[uuid.UUID]int{first.Task.Id: 1, second.Task.Id: 1}, runs)
		done := g.completionsOf(second.AttemptId)
		require.Len(t, done, 1, "completed once, with the replayed token (a stale one would be refused)")
		require.Len(t, g.pollRecords(), 2, "the second task came with the repeated completion call, not a poll")
		require.NoError(t, stop())
	})
}

// TestNextRefusedFallsBackToPolling: a gateway that predates next refuses
// it with 400; the completion goes again without it, the worker polls for
// its next task, and stops asking for a while.
func TestNextRefusedFallsBackToPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		g.refuseNext = true
		var tasks []apiclient.Lease
		for range 3 {
			tasks = append(tasks, g.enqueue(`{}`))
		}
		w := g.runtime(Config{Slots: 1, WaitSeconds: 20, Handler: func(context.Context, *LeasedTask) error { return nil }})
		stop := runInBackground(t.Context(), w)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(tasks[2].AttemptId)) > 0 })
		synctest.Wait()
		for _, l := range tasks {
			require.Len(t, g.completionsOf(l.AttemptId), 1)
		}
		require.Equal(t, 4, g.callCount("complete"), "one refused call with next, then three without")
		require.Len(t, g.pollRecords(), 4, "a poll per task, and one waiting")
		require.NoError(t, stop())
	})
}
