package faults

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// skews are the clock offsets of the two skewed replicas: well inside the
// workload's certificates (certWindow), far beyond any lease.
var skews = []string{"+20m", "-20m"}

// TestSkewedReplicaClocks runs the workload across an unskewed replica and
// two whose clocks are 20 minutes ahead and behind (GATEWAY_CLOCK_SKEW).
// Lease decisions are the database's: expiries, renewals and retries behave
// as without skew, and every lease expiry a replica answers is the database
// clock's now() plus the lease duration (the checker's clock check).
func TestSkewedReplicaClocks(t *testing.T) {
	sc := scaleOf()
	cl := startCluster(t, harness.Database{}, []string{"GATEWAY_CLOCK_SKEW=" + skews[0]}, []string{"GATEWAY_CLOCK_SKEW=" + skews[1]})
	w := newWorkload(t, cl)
	skewIsLive(t, w)
	// Abandoned leases expire and failed attempts are retried: both on
	// whichever replica the calls reach.
	w.startRaw(sc.RawClients, Plan{MaxTasks: 2, WaitSeconds: 2, Batches: batches, FailRate: 0.2, AbandonRate: 0.15})
	w.startRuntimes(sc.Runtimes)
	for i := range sc.Waves {
		if i > 0 {
			time.Sleep(sc.WaveEvery) // the load's pace, not a synchronisation
		}
		w.wave(sc)
	}
	w.drain(sc.Drain)
	v := Check(t, w)
	logLeaseDecisions(t, w)
	Summarize(t, v, cl.faults()...)
}

// skewIsLive shows each skewed replica really runs on its own clock: a
// certificate that expires in ten minutes is refused by the replica 20
// minutes ahead, one issued a minute ago by the replica 20 minutes behind,
// while the unskewed replica takes both.
func skewIsLive(t *testing.T, w *Workload) {
	t.Helper()
	now := time.Now()
	expiring := registerIdentity(t, w.g, "expiring", 1, w.org, now.Add(-time.Hour), now.Add(10*time.Minute))
	fresh := registerIdentity(t, w.g, "fresh", 1, w.org, now.Add(-time.Minute), now.Add(time.Hour))
	for _, tc := range []struct {
		id      *identity
		replica int
		want    int
	}{
		{expiring, 0, http.StatusOK}, {expiring, 1, http.StatusUnauthorized},
		{fresh, 0, http.StatusOK}, {fresh, 2, http.StatusUnauthorized},
	} {
		tr := tc.id.transport(w.g, nil)
		req, err := http.NewRequest(http.MethodPost, w.cl.url(tc.replica)+"/v1/heartbeat", strings.NewReader(`{"leases": []}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		res, err := (&http.Client{Transport: tr}).Do(req)
		require.NoError(t, err)
		res.Body.Close()
		tr.CloseIdleConnections()
		require.Equal(t, tc.want, res.StatusCode, "%s's certificate on replica %d", tc.id.Name, tc.replica)
	}
}

// logLeaseDecisions logs what the skewed run decided about leases, per
// replica where the history knows it.
func logLeaseDecisions(t *testing.T, w *Workload) {
	t.Helper()
	var expired, retried int
	require.NoError(t, w.g.Pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE status = 'expired'), count(*) FILTER (WHERE attempt_number > 1)
		FROM worker_task_attempts`).Scan(&expired, &retried))
	replicaOf := map[string]string{}
	for i, u := range w.cl.urls() {
		name := "unskewed"
		if i > 0 {
			name = "skew " + skews[i-1]
		}
		replicaOf[strings.TrimPrefix(u, "https://")] = name
	}
	type counts struct{ leases, renewals, lost, results, completions int }
	per := map[string]*counts{}
	for _, c := range w.h.Calls() {
		name, ok := replicaOf[c.Replica]
		if !ok {
			continue // through the load balancer: replica unknown
		}
		if per[name] == nil {
			per[name] = &counts{}
		}
		for _, it := range c.Items {
			switch {
			case it.Result == ResLeaseLost:
				per[name].lost++
			case it.Result != ResOK:
			case c.Op == OpLease:
				per[name].leases++
			case c.Op == OpHeartbeat || c.Op == OpHeartbeatAll:
				per[name].renewals++
			case c.Op == OpResult:
				per[name].results++
			case isCompletion(c.Op):
				per[name].completions++
			}
		}
	}
	for name, c := range per {
		t.Logf("replica %s: leases=%d renewals=%d lease_lost=%d results=%d completions=%d", name, c.leases, c.renewals, c.lost, c.results, c.completions)
	}
	t.Logf("attempts expired=%d retried (attempt > 1)=%d", expired, retried)
	for i := 1; i < len(skews)+1; i++ {
		c := per["skew "+skews[i-1]]
		require.NotNil(t, c, "the replica with skew %s served raw clients", skews[i-1])
		require.NotZero(t, c.leases+c.renewals, "the replica with skew %s took lease decisions", skews[i-1])
	}
}
