package netfaults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestResetsMidRequest cuts connections in the middle of requests. A raw
// client loses the answer to each of its writes (or the request itself) to
// a reset or a dropped connection: it cannot know whether the write took
// effect, repeats it unchanged, and it takes effect once. A Go runtime
// worker behind another proxy has its connections reset over and over
// while it works, and retries by itself. Every task is done exactly once.
func TestResetsMidRequest(t *testing.T) {
	g, w := startWorkload(t)
	rawCaps := map[string]any{"raw": true}
	rawIDs := w.CreateTasks(2, rawCaps)
	n := scaled(30, 120)
	w.CreateTasks(n, faults.LoadCapabilities())

	rawProxy := newToxicProxy(t, g.URL)
	raw := w.RawClient("raw", faults.Plan{MaxTasks: 2, WaitSeconds: 1}, at(rawProxy.URL))
	raw.Advertise(rawCaps)
	leases := leaseAll(t, raw, len(rawIDs))
	ctx := context.Background()
	began, from := time.Now(), len(w.History().Calls())
	// cutOnce sends one write while the proxy cuts the connection (on
	// stream, closeAfter ms after its first bytes), which must cost the
	// client its answer; once it did, the path is clean again and the
	// client's retry, the same request, must be answered.
	cutOnce := func(name, stream string, closeAfter int, send func() bool) {
		mark := len(w.History().Calls())
		rawProxy.add(t, name, cutToxicType, stream, map[string]any{"timeout": closeAfter})
		done := make(chan bool, 1)
		go func() { done <- send() }()
		harness.WaitFor(t, 30*time.Second, name+": a call without answer", func() bool {
			return unanswered(faults.CallsOf(w.History().Calls()[mark:], raw.ID())) > 0
		})
		rawProxy.remove(t, name)
		require.True(t, <-done, "%s: the repeated request was answered", name)
	}
	for i, l := range leases {
		// The request never reaches the gateway: reset on its first bytes.
		cutOnce(fmt.Sprintf("hb-%d", i), "upstream", 0, func() bool { return raw.Heartbeat(ctx, l) })
		// The answer is lost: reset when it comes back, or dropped and
		// the connection reset a moment later.
		cutOnce(fmt.Sprintf("results-%d", i), "downstream", 0, func() bool { return raw.SendBatch(ctx, l, 1) })
		cutOnce(fmt.Sprintf("complete-%d", i), "downstream", 500, func() bool {
			raw.Complete(ctx, l, faults.Succeeded)
			return true // judged below, by the task's state
		})
	}
	for _, id := range rawIDs {
		require.Equal(t, apiclient.TaskState("completed"), g.Task(t, id).State)
	}
	rawCalls := faults.CallsOf(w.History().Calls()[from:], raw.ID())
	t.Logf("raw client: %d writes cut and repeated in %s (%d calls, %d without answer)",
		3*len(leases), time.Since(began).Round(time.Millisecond), len(rawCalls), unanswered(rawCalls))
	began = time.Now()

	// A runtime worker whose connections keep being reset mid-request.
	flakyProxy := newToxicProxy(t, g.URL)
	w.StartRuntime(runtime("flaky", 3, via(t, flakyProxy.URL), 100*time.Millisecond))
	for i := range scaled(6, 24) {
		name := fmt.Sprintf("flaky-%d", i)
		// Each connection dies 200 ms into its next transfer.
		flakyProxy.add(t, name, cutToxicType, []string{"upstream", "downstream"}[i%2], map[string]any{"timeout": 200})
		time.Sleep(500 * time.Millisecond) // the fault's length, not a synchronisation
		flakyProxy.remove(t, name)
		time.Sleep(500 * time.Millisecond) // and the calm between two faults
	}
	waitCompleted(t, g, len(rawIDs)+n)
	t.Logf("flaky runtime: %d tasks done in %s", n, time.Since(began).Round(time.Millisecond))
	finish(t, w, fmt.Sprintf("raw_retries_replayed=%d", replayed(rawCalls)),
		faults.Fault{Kind: "toxics", Count: rawProxy.added + flakyProxy.added})
}

// unanswered counts the calls that got no answer.
func unanswered(calls []faults.Call) int {
	n := 0
	for _, c := range calls {
		if c.Status == 0 {
			n++
		}
	}
	return n
}

// replayed counts the calls answered as idempotent replays.
func replayed(calls []faults.Call) int {
	n := 0
	for _, c := range calls {
		for _, it := range c.Items {
			if it.Result == faults.ResReplayed {
				n++
			}
		}
	}
	return n
}
