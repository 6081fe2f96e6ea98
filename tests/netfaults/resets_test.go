package netfaults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/worker-gateway/gateway/workerclient"
)

// TestResetsMidRequest cuts connections in the middle of requests. A raw
// client loses the answer to each of its writes (or the request itself) to
// a reset or a dropped connection: it cannot know whether the write took
// effect, repeats it unchanged, and it takes effect once. A Go runtime
// worker behind another proxy has its connections reset over and over
// while it works, and retries by itself. Every task is done exactly once.
func TestResetsMidRequest(t *testing.T) {
	e := newNetEnv(t)
	rawCaps, loadCaps := map[string]any{"raw": true}, map[string]any{"load": true}
	rawIDs, hosts := createTasks(t, e.g, e.org, "raw", 2, rawCaps)
	n := scaled(30, 120)
	_, loadHosts := createTasks(t, e.g, e.org, "load", n, loadCaps)
	hosts = append(hosts, loadHosts...)

	rawProxy := newToxicProxy(t, e.g.URL)
	_, raw := e.rawClient(t, "raw", 2, rawProxy.URL, rawCaps)
	leases := leaseAll(t, raw, len(rawIDs))
	ctx := context.Background()
	began := time.Now()
	var replays int
	// cutOnce sends one write while the proxy cuts the connection (on
	// stream, closeAfter ms after its first bytes), which must cost the
	// client its answer, then repeats it unchanged on a clean path.
	cutOnce := func(name, stream string, closeAfter int, send func() answer) {
		rawProxy.add(t, name, cutToxicType, stream, map[string]any{"timeout": closeAfter})
		first := send()
		rawProxy.remove(t, name)
		require.Error(t, first.err, "%s: the client got no answer", name)
		a := retry(ctx, send)
		require.NoError(t, a.err, name)
		require.Equal(t, http.StatusOK, a.status, "%s: %s", name, a.body)
		if a.replayed {
			replays++
		}
	}
	for i, l := range leases {
		hb := func() answer { _, a := raw.heartbeat(ctx, l); return a }
		results := func() answer { return raw.sendResults(ctx, l, 1, hostsOf(l.Task.Payload)) }
		complete := func() answer { return raw.complete(ctx, l, 1) }
		// The request never reaches the gateway: reset on its first bytes.
		cutOnce(fmt.Sprintf("hb-%d", i), "upstream", 0, hb)
		// The answer is lost: reset when it comes back, or dropped and
		// the connection reset a moment later.
		cutOnce(fmt.Sprintf("results-%d", i), "downstream", 0, results)
		cutOnce(fmt.Sprintf("complete-%d", i), "downstream", 500, complete)
	}
	for _, id := range rawIDs {
		require.Equal(t, workerclient.TaskState("completed"), e.g.Task(t, id).State)
	}
	t.Logf("raw client: %d writes cut and repeated in %s", 3*len(leases), time.Since(began).Round(time.Millisecond))
	began = time.Now()

	// A runtime worker whose connections keep being reset mid-request.
	flakyProxy := newToxicProxy(t, e.g.URL)
	flaky := e.g.NewWorker(t, "flaky", 3, e.org)
	startRuntime(t, flaky, flakyProxy.URL, e.rec, 3, loadCaps, emitHandler(100*time.Millisecond))
	for i := range scaled(6, 24) {
		name := fmt.Sprintf("flaky-%d", i)
		// Each connection dies 200 ms into its next transfer.
		flakyProxy.add(t, name, cutToxicType, []string{"upstream", "downstream"}[i%2], map[string]any{"timeout": 200})
		time.Sleep(500 * time.Millisecond) // the fault's length, not a synchronisation
		flakyProxy.remove(t, name)
		time.Sleep(500 * time.Millisecond) // and the calm between two faults
	}
	waitCompleted(t, e.g, e.org, len(rawIDs)+n)
	t.Logf("flaky runtime: %d tasks done in %s", n, time.Since(began).Round(time.Millisecond))
	judgeRun(t, e.g.Pool, e.org, hosts, e.rec, rawProxy.added+flakyProxy.added,
		fmt.Sprintf("raw_retries_replayed=%d", replays), raw)
}
