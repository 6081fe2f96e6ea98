// Package faults runs the gateway under faults — replicas killed with
// SIGKILL or crashing at commit failpoints, stalled workers, skewed clocks —
// records every worker call as a history and checks it: invariants in SQL
// and, per task, linearizability against a model of the lease state machine
// (porcupine).
package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Outcome is what the caller can know about a call's effect.
type Outcome int

const (
	// OK: answered 2xx.
	OK Outcome = iota
	// Failed: answered 4xx, or never sent (connection refused): no effect.
	Failed
	// Unknown: the call timed out, the connection died, or the gateway
	// answered 5xx — it may or may not have taken effect.
	Unknown
)

func (o Outcome) String() string {
	return [...]string{"ok", "failed", "unknown"}[o]
}

// Result is one attempt's share of a call's answer.
type Result int

const (
	ResOK        Result = iota // accepted (a lease granted, a renewal, a new batch, a completion)
	ResReplayed                // a result batch answered as an idempotent replay
	ResLeaseLost               // 409 lease-lost, or a heartbeat answering "lost"
	ResRefused                 // another definite refusal, without effect
	ResUnknown                 // may or may not have taken effect
)

func (r Result) String() string {
	return [...]string{"ok", "replayed", "lease-lost", "refused", "unknown"}[r]
}

// Op names the worker operations the history knows.
const (
	OpLease        = "lease"
	OpHeartbeat    = "heartbeat"     // one lease: /v1/attempts/{id}/heartbeat
	OpHeartbeatAll = "heartbeat-all" // the worker's leases: /v1/heartbeat
	OpStart        = "start"
	OpResult       = "result"
	OpComplete     = "complete"      // /v1/attempts/{id}/complete
	OpCompleteMany = "complete-many" // /v1/attempts/complete
	OpOther        = "other"
)

// Item is what a call did to one attempt: a call about several attempts
// (a poll granting two leases, a worker-wide heartbeat) has one per attempt.
type Item struct {
	Attempt uuid.UUID
	Task    uuid.UUID // known from lease answers; the checker fills in the rest
	Token   string
	Key     string // result batch Idempotency-Key
	Outcome string // completion outcome
	// Retryable is a failed completion's error.retryable.
	Retryable bool
	Result    Result
	Code      string // problem code of a refusal
	TaskState string // a completion's answer
	// ExpiresAt and TTL are the lease as answered (zero when not given).
	ExpiresAt time.Time
	TTL       float64
}

// Call is one HTTP call of a worker, from invocation to answer.
type Call struct {
	Client  int
	Replica string // host:port connected to (the URL's when no connection was made)
	Op      string
	Key     string // Idempotency-Key header (polls, results)
	// Invoke and Return are on the history's monotonic clock; the wall
	// times are for comparing with the database's clock.
	Invoke, Return         time.Duration
	InvokeWall, ReturnWall time.Time
	Outcome                Outcome
	Status                 int
	Code                   string
	// RetryAfter and ContentType are the answer's headers (the media type
	// only), for judging how a gateway says it cannot serve now.
	RetryAfter, ContentType string
	Err                     string
	Items                   []Item
}

// History records calls. Safe for concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	calls []Call
	names []string
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// NewClient registers a client and returns its id (porcupine's ClientId).
func (h *History) NewClient(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names = append(h.names, name)
	return len(h.names) - 1
}

// ClientName is the name a client was registered with.
func (h *History) ClientName(id int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.names[id]
}

// Calls returns a copy of the calls recorded so far.
func (h *History) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Call(nil), h.calls...)
}

// CallsOf is the calls of one client among calls.
func CallsOf(calls []Call, client int) []Call {
	var out []Call
	for _, c := range calls {
		if c.Client == client {
			out = append(out, c)
		}
	}
	return out
}

func (h *History) add(c Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

// Transport wraps inner so that every call through it is recorded for
// client. Raw clients, Go runtimes and the proxy in front of worker
// processes all record through it, so one decoder reads every call.
func (h *History) Transport(client int, inner http.RoundTripper) http.RoundTripper {
	return &recorder{h: h, client: client, inner: inner}
}

type recorder struct {
	h      *History
	client int
	inner  http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	c := describeRequest(req, body)
	c.Client = r.client
	// The replica is the address connected to: behind a dialer that picks
	// the replica, the URL names none.
	var remote atomic.Value
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { remote.Store(info.Conn.RemoteAddr().String()) },
	}))
	c.Invoke, c.InvokeWall = time.Since(r.h.start), time.Now()

	res, err := r.inner.RoundTrip(req)
	if addr, ok := remote.Load().(string); ok {
		c.Replica = addr
	}
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(answer))
	}
	c.Return, c.ReturnWall = time.Since(r.h.start), time.Now()
	if err != nil {
		c.Err = err.Error()
		c.Outcome = Unknown
		if neverSent(err) {
			c.Outcome = Failed
		}
		c.settle(ResultOf(c.Outcome, ""))
		r.h.add(c)
		if n, ok := nextLeaseCall(c, body, nil); ok {
			r.h.add(n)
		}
		return nil, err
	}
	decodeAnswer(&c, res, answer)
	r.h.add(c)
	if n, ok := nextLeaseCall(c, body, answer); ok {
		r.h.add(n)
	}
	return res, nil
}

// nextLeaseCall is the poll a completion call made for its `next` leases,
// recorded as a call of its own over the same span: to the model it is a
// poll, keyed as the gateway keys it (by the attempts completed, so that a
// repeated call is a repeated poll). False when the call asked for none.
func nextLeaseCall(c Call, body, answer []byte) (Call, bool) {
	if c.Op != OpComplete && c.Op != OpCompleteMany {
		return Call{}, false
	}
	var b struct {
		Next json.RawMessage `json:"next"`
	}
	if json.Unmarshal(body, &b) != nil || len(b.Next) == 0 || string(b.Next) == "null" {
		return Call{}, false
	}
	ids := make([]string, 0, len(c.Items))
	for _, it := range c.Items {
		ids = append(ids, it.Attempt.String())
	}
	slices.Sort(ids)
	n := c
	n.Op, n.Key, n.Items = OpLease, "next:"+strings.Join(slices.Compact(ids), ","), nil
	if c.Outcome == OK {
		decodeLeases(&n, answer)
	}
	return n, true
}

// neverSent reports a call that cannot have reached a gateway: its
// connection was refused (the replica is down).
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// describeRequest reads what a call asks for from its method, path, headers
// and body. Until the answer says otherwise (a worker-wide heartbeat may
// leave a lease out of its answer), each item's result is unknown.
func describeRequest(req *http.Request, body []byte) Call {
	c := parseRequest(req, body)
	for i := range c.Items {
		c.Items[i].Result = ResUnknown
	}
	return c
}

func parseRequest(req *http.Request, body []byte) Call {
	c := Call{Replica: req.URL.Host, Op: OpOther, Key: req.Header.Get("Idempotency-Key")}
	if req.Method != http.MethodPost {
		return c
	}

	token := req.Header.Get("Lease-Token")
	path := strings.TrimPrefix(req.URL.Path, "/v1/")
	switch path {
	case "leases":
		c.Op = OpLease
		return c
	case "heartbeat":
		c.Op = OpHeartbeatAll
		var b struct {
			Leases []struct {
				AttemptID  uuid.UUID `json:"attempt_id"`
				LeaseToken string    `json:"lease_token"`
			} `json:"leases"`
		}
		_ = json.Unmarshal(body, &b)
		for _, l := range b.Leases {
			c.Items = append(c.Items, Item{Attempt: l.AttemptID, Token: l.LeaseToken})
		}
		return c
	case "attempts/complete":
		c.Op = OpCompleteMany
		var b struct {
			Completions []completionBody `json:"completions"`
		}
		_ = json.Unmarshal(body, &b)
		for _, it := range b.Completions {
			c.Items = append(c.Items, it.item())
		}
		return c
	}
	rest, ok := strings.CutPrefix(path, "attempts/")
	if !ok {
		return c
	}
	id, action, _ := strings.Cut(rest, "/")
	attempt, err := uuid.Parse(id)
	if err != nil {
		return c
	}
	it := Item{Attempt: attempt, Token: token}
	switch action {
	case "heartbeat":
		c.Op = OpHeartbeat
	case "start":
		c.Op = OpStart
	case "results":
		c.Op, it.Key = OpResult, c.Key
	case "complete":
		c.Op = OpComplete
		var b completionBody
		_ = json.Unmarshal(body, &b)
		b.AttemptID, b.LeaseToken = attempt, token
		it = b.item()
	default:
		return c
	}
	c.Items = []Item{it}
	return c
}

// completionBody is a completion as either complete route takes it.
type completionBody struct {
	AttemptID  uuid.UUID `json:"attempt_id"`
	LeaseToken string    `json:"lease_token"`
	Outcome    string    `json:"outcome"`
	Error      *struct {
		Retryable bool `json:"retryable"`
	} `json:"error"`
}

func (b completionBody) item() Item {
	it := Item{Attempt: b.AttemptID, Token: b.LeaseToken, Outcome: b.Outcome}
	if b.Error != nil {
		it.Retryable = b.Error.Retryable
	}
	return it
}

// leaseStatus is the lease part of attempt-scoped answers.
type leaseStatus struct {
	AttemptID uuid.UUID `json:"attempt_id"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"lease_expires_at"`
	TTL       float64   `json:"lease_ttl_seconds"`
}

// decodeAnswer fills in the outcome of a call that was answered.
func decodeAnswer(c *Call, res *http.Response, body []byte) {
	c.Status = res.StatusCode
	c.RetryAfter = res.Header.Get("Retry-After")
	c.ContentType, _, _ = mime.ParseMediaType(res.Header.Get("Content-Type"))
	switch {
	case res.StatusCode >= 500:
		c.Outcome = Unknown // the gateway itself may not know (a failed COMMIT)
	case res.StatusCode >= 300:
		c.Outcome = Failed
	}
	if c.Outcome != OK {
		c.Code = problemCode(body)
		c.settle(ResultOf(c.Outcome, c.Code))
		return
	}
	switch c.Op {
	case OpLease:
		decodeLeases(c, body)
	case OpHeartbeat, OpStart:
		var st leaseStatus
		_ = json.Unmarshal(body, &st)
		c.Items[0].applyStatus(st)
	case OpHeartbeatAll:
		var b struct {
			Leases []leaseStatus `json:"leases"`
		}
		_ = json.Unmarshal(body, &b)
		for _, st := range b.Leases {
			for i := range c.Items {
				if c.Items[i].Attempt == st.AttemptID {
					c.Items[i].applyStatus(st)
				}
			}
		}
	case OpResult:
		c.Items[0].Result = ResOK
		if res.Header.Get("Idempotent-Replayed") == "true" {
			c.Items[0].Result = ResReplayed
		}
	case OpComplete:
		var b struct {
			TaskState string `json:"task_state"`
		}
		_ = json.Unmarshal(body, &b)
		c.Items[0].Result, c.Items[0].TaskState = ResOK, b.TaskState
	case OpCompleteMany:
		var b struct {
			Completions []struct {
				Status int `json:"status"`
				Result *struct {
					TaskState string `json:"task_state"`
				} `json:"result"`
				Problem *struct {
					Code string `json:"code"`
				} `json:"problem"`
			} `json:"completions"`
		}
		_ = json.Unmarshal(body, &b)
		for i := range c.Items {
			if i >= len(b.Completions) {
				c.Items[i].Result = ResUnknown
				continue
			}
			a := b.Completions[i]
			switch {
			case a.Result != nil:
				c.Items[i].Result, c.Items[i].TaskState = ResOK, a.Result.TaskState
			case a.Problem != nil:
				c.Items[i].Code = a.Problem.Code
				c.Items[i].Result = ResultOf(outcomeOfStatus(a.Status), a.Problem.Code)
			default:
				c.Items[i].Result = ResUnknown
			}
		}
	}
}

// decodeLeases adds an item per lease an answer's "leases" grants.
func decodeLeases(c *Call, body []byte) {
	var b struct {
		Leases []struct {
			AttemptID  uuid.UUID `json:"attempt_id"`
			LeaseToken string    `json:"lease_token"`
			ExpiresAt  time.Time `json:"lease_expires_at"`
			TTL        float64   `json:"lease_ttl_seconds"`
			Task       struct {
				ID uuid.UUID `json:"id"`
			} `json:"task"`
		} `json:"leases"`
	}
	_ = json.Unmarshal(body, &b)
	for _, l := range b.Leases {
		c.Items = append(c.Items, Item{Attempt: l.AttemptID, Task: l.Task.ID, Token: l.LeaseToken,
			Result: ResOK, ExpiresAt: l.ExpiresAt, TTL: l.TTL})
	}
}

// applyStatus reads a renewal's answer: "lost" is lease-lost in effect.
func (it *Item) applyStatus(st leaseStatus) {
	it.Result, it.ExpiresAt, it.TTL = ResOK, st.ExpiresAt, st.TTL
	if st.State == "lost" {
		it.Result, it.ExpiresAt = ResLeaseLost, time.Time{}
	}
}

// settle gives every item of a call the call's own result.
func (c *Call) settle(r Result) {
	for i := range c.Items {
		c.Items[i].Result, c.Items[i].Code = r, c.Code
	}
}

func outcomeOfStatus(status int) Outcome {
	switch {
	case status >= 500:
		return Unknown
	case status >= 300:
		return Failed
	}
	return OK
}

// ResultOf maps a refused or unknown call to an item's result.
func ResultOf(o Outcome, code string) Result {
	switch {
	case o == Unknown:
		return ResUnknown
	case code == "lease-lost":
		return ResLeaseLost
	case o == Failed:
		return ResRefused
	}
	return ResOK
}
