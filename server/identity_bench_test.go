package server_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// BenchmarkHeartbeatIdentityCheck measures heartbeats per second through
// the whole stack (TLS 1.3, HTTP/2, validation, the fenced renewal) with the
// per-request identity check (a lookup of the certificate's fingerprint in
// PostgreSQL) and with it skipped, to show what the check costs.
//
//	go test ./server -run '^$' -bench HeartbeatIdentityCheck -benchtime 5s
func BenchmarkHeartbeatIdentityCheck(b *testing.B) {
	for _, skip := range []bool{false, true} {
		name := "with-check"
		if skip {
			name = "without-check"
		}
		b.Run(name, func(b *testing.B) {
			g := harness.Start(b)
			org := g.NewOrganization(b, "bench")
			w := g.NewWorker(b, "bench", 64, org)
			if skip {
				server.SkipWorkerLookup(g.Server, store.WorkerIdentity{ID: w.ID, Enabled: true})
			}
			for range 64 {
				g.CreateTask(b, org, harness.TaskSpec{LeaseDurationSeconds: 3600})
			}
			n, wait := 64, 0
			res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
			if err != nil || len(res.JSON200.Leases) != 64 {
				b.Fatalf("lease: %v %s", err, res.Body)
			}
			leases := res.JSON200.Leases
			b.SetParallelism(8)
			b.ResetTimer()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l := leases[int(next.Add(1))%len(leases)]
					hb, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), l.AttemptId,
						&apiclient.HeartbeatAttemptParams{LeaseToken: l.LeaseToken})
					if err != nil || hb.StatusCode() != http.StatusOK {
						panic(fmt.Sprintf("heartbeat: %v %d", err, hb.StatusCode()))
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
		})
	}
}
