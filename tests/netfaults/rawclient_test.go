package netfaults

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/worker-gateway/gateway/workerclient"
)

// rawClient speaks the worker protocol call by call, as any HTTP client
// would, so a test decides exactly what is sent when; its calls are
// recorded like everyone's. It also remembers which attempts the gateway
// said were lost, and counts later writes to them that were accepted anyway.
type rawClient struct {
	url  string
	hc   *http.Client
	caps map[string]any

	mu        sync.Mutex
	lost      map[uuid.UUID]bool
	stale     int
	completed []uuid.UUID
}

func newRawClient(url string, hc *http.Client, caps map[string]any) *rawClient {
	return &rawClient{url: url, hc: hc, caps: caps, lost: map[uuid.UUID]bool{}}
}

// answer is what one call got back.
type answer struct {
	status     int
	code       string
	retryAfter time.Duration
	replayed   bool
	body       []byte
	err        error
}

// transient answers ask for the same request again: no answer at all, or
// the gateway saying "not now".
func (a answer) transient() bool {
	return a.err != nil || a.status == http.StatusServiceUnavailable || a.status == http.StatusTooManyRequests ||
		a.code == "idempotency-in-flight"
}

func (c *rawClient) post(ctx context.Context, path string, header map[string]string, body any) answer {
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+path, bytes.NewReader(b))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	if a.body, a.err = io.ReadAll(res.Body); a.err != nil {
		return a
	}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
		a.retryAfter = time.Duration(s) * time.Second
	}
	if res.StatusCode >= 300 {
		var p struct{ Code string }
		_ = json.Unmarshal(a.body, &p)
		a.code = p.Code
	}
	return a
}

// poll asks for up to n leases, waiting up to wait seconds; key (may be
// empty) makes a repeated poll return the same leases.
func (c *rawClient) poll(ctx context.Context, n, wait int, key string) ([]workerclient.Lease, answer) {
	caps, _ := json.Marshal(c.caps)
	raw := workerclient.Capabilities(caps)
	header := map[string]string{}
	if key != "" {
		header["Idempotency-Key"] = key
	}
	a := c.post(ctx, "/v1/leases", header, workerclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait, Capabilities: &raw})
	var res workerclient.LeaseResponse
	if a.status == http.StatusOK && a.err == nil {
		a.err = json.Unmarshal(a.body, &res)
	}
	return res.Leases, a
}

// heartbeat renews leases in one batch heartbeat and returns their states.
func (c *rawClient) heartbeat(ctx context.Context, leases ...workerclient.Lease) ([]workerclient.LeaseStatus, answer) {
	refs := make([]workerclient.LeaseRef, len(leases))
	for i, l := range leases {
		refs[i] = workerclient.LeaseRef{AttemptId: l.AttemptId, LeaseToken: l.LeaseToken}
	}
	a := c.post(ctx, "/v1/heartbeat", nil, workerclient.WorkerHeartbeatRequest{Leases: refs})
	var res workerclient.WorkerHeartbeatResponse
	if a.status == http.StatusOK && a.err == nil {
		a.err = json.Unmarshal(a.body, &res)
	}
	for _, st := range res.Leases {
		if st.State == "lost" {
			c.markLost(st.AttemptId)
		} else {
			c.noteAccepted(st.AttemptId, answer{status: http.StatusOK})
		}
	}
	return res.Leases, a
}

// sendResults sends result batch seq reporting hosts, with the key every
// retry of that batch carries.
func (c *rawClient) sendResults(ctx context.Context, l workerclient.Lease, seq int, hosts []string) answer {
	a := c.post(ctx, "/v1/attempts/"+l.AttemptId.String()+"/results",
		map[string]string{"Lease-Token": l.LeaseToken, "Idempotency-Key": l.AttemptId.String() + ":" + strconv.Itoa(seq)},
		workerclient.ResultBatch{SequenceNumber: seq, Records: assetRecords(hosts)})
	c.noteAccepted(l.AttemptId, a)
	return a
}

// complete finishes an attempt as succeeded after batches 1..lastSeq.
func (c *rawClient) complete(ctx context.Context, l workerclient.Lease, lastSeq int) answer {
	a := c.post(ctx, "/v1/attempts/"+l.AttemptId.String()+"/complete", map[string]string{"Lease-Token": l.LeaseToken},
		workerclient.CompleteRequest{Outcome: workerclient.AttemptOutcomeSucceeded, LastSequenceNumber: &lastSeq})
	c.noteAccepted(l.AttemptId, a)
	if a.err == nil && a.status == http.StatusOK {
		c.mu.Lock()
		c.completed = append(c.completed, l.AttemptId)
		c.mu.Unlock()
	}
	return a
}

// noteAccepted judges a write's answer: lease-lost marks the attempt lost,
// and a write that takes effect (not a replay of one that did before)
// after the gateway said the lease was lost is a stale write accepted.
func (c *rawClient) noteAccepted(attempt uuid.UUID, a answer) {
	switch {
	case a.code == "lease-lost":
		c.markLost(attempt)
	case a.err == nil && a.status < 300 && !a.replayed:
		c.mu.Lock()
		if c.lost[attempt] {
			c.stale++
		}
		c.mu.Unlock()
	}
}

func (c *rawClient) markLost(attempt uuid.UUID) {
	c.mu.Lock()
	c.lost[attempt] = true
	c.mu.Unlock()
}

// acknowledged returns the attempts whose succeeded completion was answered 200.
func (c *rawClient) acknowledged() []uuid.UUID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uuid.UUID(nil), c.completed...)
}

// staleAccepted counts writes accepted after their lease was reported lost.
func (c *rawClient) staleAccepted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stale
}

// retry repeats one request (same bytes, same keys) while its answer is
// transient, pausing as the gateway asks, until it gets a final answer or
// ctx ends.
func retry(ctx context.Context, send func() answer) answer {
	a := send()
	for a.transient() && ctx.Err() == nil {
		pause(ctx, a)
		a = send()
	}
	return a
}

// pause waits as a transient answer asks: its Retry-After (capped, so a
// test does not idle), or a moment after a transport error.
func pause(ctx context.Context, a answer) {
	d := min(max(a.retryAfter, 100*time.Millisecond), 2*time.Second)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// serve leases and finishes tasks until ctx ends: poll (repeating the
// poll's Idempotency-Key until it is answered), heartbeat, one result
// batch, complete — each repeated with the same bytes until the gateway
// answers for good.
func (c *rawClient) serve(ctx context.Context) {
	for ctx.Err() == nil {
		key := uuid.NewString()
		var leases []workerclient.Lease
		retry(ctx, func() answer {
			var a answer
			leases, a = c.poll(ctx, 2, 2, key)
			return a
		})
		for _, l := range leases {
			c.finish(ctx, l)
		}
	}
}

func (c *rawClient) finish(ctx context.Context, l workerclient.Lease) {
	var states []workerclient.LeaseStatus
	retry(ctx, func() answer {
		var a answer
		states, a = c.heartbeat(ctx, l)
		return a
	})
	if len(states) != 1 || states[0].State != "active" {
		return
	}
	hosts := hostsOf(l.Task.Payload)
	if a := retry(ctx, func() answer { return c.sendResults(ctx, l, 1, hosts) }); a.status != http.StatusOK {
		return
	}
	retry(ctx, func() answer { return c.complete(ctx, l, 1) })
}
