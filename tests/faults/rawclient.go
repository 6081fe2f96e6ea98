package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
)

// RawClient speaks the worker protocol in plain HTTP calls, as a worker in
// any language would, spreading its calls over the replicas. Every call goes
// through the history's recorder. Safe for concurrent use.
type RawClient struct {
	name   string
	id     int       // in the history
	worker uuid.UUID // its identity
	http   *http.Client
	// url picks the replica for the next call.
	url  func() string
	caps *capabilities
	plan Plan

	mu  sync.Mutex
	rng *rand.Rand
	// polls numbers this client's polls, for their Idempotency-Keys.
	polls int
}

// Plan is how a raw client behaves.
type Plan struct {
	MaxTasks    int
	WaitSeconds int
	Batches     int // result batches per attempt
	// FailRate and AbandonRate apply only to attempts with at least
	// spareAttempts attempts left, so that faults never exhaust a task.
	FailRate    float64 // completed failed (retryable) instead of succeeded
	AbandonRate float64 // dropped without a word: the lease expires
}

const (
	spareAttempts = 5
	// callTimeout bounds one call besides a poll's wait: a call that takes
	// longer has an unknown outcome.
	callTimeout = 20 * time.Second
	// tries bounds the retries of one call whose outcome is unknown.
	tries = 8
)

// RawLease is a lease as a raw client reads it.
type RawLease struct {
	AttemptID  uuid.UUID `json:"attempt_id"`
	LeaseToken string    `json:"lease_token"`
	Task       struct {
		ID            uuid.UUID `json:"id"`
		AttemptNumber int       `json:"attempt_number"`
		MaxAttempts   int       `json:"max_attempts"`
	} `json:"task"`
}

// BatchKey is the Idempotency-Key of the attempt's result batch seq.
func (l RawLease) BatchKey(seq int) string { return l.AttemptID.String() + ":" + strconv.Itoa(seq) }

func (l RawLease) spare() bool { return l.Task.MaxAttempts-l.Task.AttemptNumber >= spareAttempts }

// answer is a call's answer; status 0 when there was none.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// definite reports an answer that settles the call: a 2xx or a 4xx other
// than a request to come back later.
func (a answer) definite() bool {
	if a.err != nil || a.status >= 500 || a.status == http.StatusTooManyRequests {
		return false
	}
	return !(a.status == http.StatusConflict && problemCode(a.body) == "idempotency-in-flight")
}

func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// call makes one POST to a replica.
func (c *RawClient) call(ctx context.Context, timeout time.Duration, path string, header map[string]string, body any) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return answer{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url()+path, bytes.NewReader(b))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: out, err: err}
}

// retry repeats a call — the same key, the same body — on random replicas
// until it is answered definitely, the tries run out or ctx ends.
func (c *RawClient) retry(ctx context.Context, timeout time.Duration, path string, header map[string]string, body any) answer {
	var a answer
	for i := 0; i < tries && ctx.Err() == nil; i++ {
		if a = c.call(ctx, timeout, path, header, body); a.definite() {
			return a
		}
		c.pause(ctx)
	}
	return a
}

// pause backs off a little before a retry.
func (c *RawClient) pause(ctx context.Context) {
	_ = sleep(ctx, time.Duration(50+250*c.chance())*time.Millisecond)
}

// chance draws a number in [0, 1).
func (c *RawClient) chance() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Float64()
}

// ID is the client's id in the history.
func (c *RawClient) ID() int { return c.id }

// Worker is the worker the client is.
func (c *RawClient) Worker() uuid.UUID { return c.worker }

// Advertise replaces the capabilities the client's polls advertise.
func (c *RawClient) Advertise(caps map[string]any) { c.caps = newCapabilities(caps) }

// Run polls and works until ctx ends.
func (c *RawClient) Run(ctx context.Context) {
	for ctx.Err() == nil {
		leases := c.Poll(ctx)
		if len(leases) == 0 {
			c.pause(ctx)
		}
		for _, l := range leases {
			c.Work(ctx, l)
		}
	}
}

// Poll asks for leases under one Idempotency-Key, repeated until answered.
func (c *RawClient) Poll(ctx context.Context) []RawLease {
	c.mu.Lock()
	c.polls++
	key := fmt.Sprintf("%s-poll-%d", c.name, c.polls)
	c.mu.Unlock()
	body := map[string]any{"max_tasks": c.plan.MaxTasks, "wait_seconds": c.plan.WaitSeconds, "capabilities": c.caps.get()}
	a := c.retry(ctx, time.Duration(c.plan.WaitSeconds)*time.Second+callTimeout, "/v1/leases", map[string]string{"Idempotency-Key": key}, body)
	if a.status != http.StatusOK {
		return nil
	}
	var res struct {
		Leases []RawLease `json:"leases"`
	}
	_ = json.Unmarshal(a.body, &res)
	return res.Leases
}

// Succeeded is the outcome of an attempt that succeeded.
var Succeeded = map[string]any{"outcome": "succeeded"}

// Work runs one attempt: renewals, result batches, a completion — unless it
// abandons the lease.
func (c *RawClient) Work(ctx context.Context, l RawLease) {
	if l.spare() && c.chance() < c.plan.AbandonRate {
		return
	}
	if !c.Heartbeat(ctx, l) {
		return
	}
	for seq := 1; seq <= c.plan.Batches; seq++ {
		if !c.SendBatch(ctx, l, seq) {
			return
		}
	}
	if !c.Heartbeat(ctx, l) {
		return
	}
	outcome := Succeeded
	if l.spare() && c.chance() < c.plan.FailRate {
		outcome = map[string]any{"outcome": "failed", "error": map[string]any{"code": "fault-test", "retryable": true}}
	}
	c.Complete(ctx, l, outcome)
}

// held reports whether an answer leaves the lease held.
func held(a answer) bool { return a.status == http.StatusOK }

// Heartbeat renews the lease, one lease or the worker's, at random, and
// reports whether the lease is held.
func (c *RawClient) Heartbeat(ctx context.Context, l RawLease) bool {
	if c.chance() < 0.5 {
		return held(c.retry(ctx, callTimeout, "/v1/attempts/"+l.AttemptID.String()+"/heartbeat",
			map[string]string{"Lease-Token": l.LeaseToken}, struct{}{}))
	}
	a := c.retry(ctx, callTimeout, "/v1/heartbeat", nil,
		map[string]any{"leases": []map[string]any{{"attempt_id": l.AttemptID, "lease_token": l.LeaseToken}}})
	var res struct {
		Leases []struct {
			State string `json:"state"`
		} `json:"leases"`
	}
	_ = json.Unmarshal(a.body, &res)
	return held(a) && len(res.Leases) == 1 && res.Leases[0].State == "active"
}

// SendBatch sends result batch seq under the key the Go runtime would use
// and reports whether it was accepted (or replayed).
func (c *RawClient) SendBatch(ctx context.Context, l RawLease, seq int) bool {
	header := map[string]string{"Lease-Token": l.LeaseToken, "Idempotency-Key": l.BatchKey(seq)}
	return held(c.retry(ctx, callTimeout, "/v1/attempts/"+l.AttemptID.String()+"/results", header,
		map[string]any{"sequence_number": seq, "records": batchRecords(l.Task.ID, seq)}))
}

// Complete ends the attempt through either complete route, at random.
func (c *RawClient) Complete(ctx context.Context, l RawLease, outcome map[string]any) {
	if c.chance() < 0.5 {
		c.retry(ctx, callTimeout, "/v1/attempts/"+l.AttemptID.String()+"/complete", map[string]string{"Lease-Token": l.LeaseToken}, outcome)
		return
	}
	item := map[string]any{"attempt_id": l.AttemptID, "lease_token": l.LeaseToken}
	for k, v := range outcome {
		item[k] = v
	}
	c.retry(ctx, callTimeout, "/v1/attempts/complete", nil, map[string]any{"completions": []any{item}})
}

// capabilities is what raw clients advertise; scenarios open more of them
// while running (a rescuer that may now take over a stranded task).
type capabilities struct {
	mu   sync.Mutex
	caps map[string]any
}

func newCapabilities(caps map[string]any) *capabilities {
	return &capabilities{caps: caps}
}

func (c *capabilities) get() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]any, len(c.caps))
	for k, v := range c.caps {
		out[k] = v
	}
	return out
}

func (c *capabilities) add(key string, value any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.caps[key] = value
}
