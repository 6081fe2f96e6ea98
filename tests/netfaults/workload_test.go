package netfaults

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// leaseSeconds is every task's lease: short, so that faults of a few
// seconds outlast leases and force re-leases.
const leaseSeconds = 5

// taskPayload names the hosts a task's worker reports as assets: natural
// keys that are the same for every attempt of the task, so an asset row
// counted twice or missing shows in the organization's asset count.
type taskPayload struct {
	Plugin string `json:"plugin"`
	Input  struct {
		Hosts []string `json:"hosts"`
	} `json:"input"`
}

func hostsOf(payload json.RawMessage) []string {
	var p taskPayload
	_ = json.Unmarshal(payload, &p)
	return p.Input.Hosts
}

func assetRecords(hosts []string) []workerclient.ResultRecord {
	records := make([]workerclient.ResultRecord, len(hosts))
	for i, h := range hosts {
		records[i] = workerclient.ResultRecord{Kind: workerclient.ResultRecordKindAsset,
			Asset: &workerclient.AssetRef{Type: "hostname", Value: h}}
	}
	return records
}

// createTasks creates n tasks that only workers with caps can lease, each
// naming two hosts, and returns their ids and every host they name.
func createTasks(t testing.TB, g *harness.Gateway, org uuid.UUID, prefix string, n int, caps map[string]any) ([]uuid.UUID, []string) {
	t.Helper()
	base, maxDelay := 0.2, 2.0
	ids := make([]uuid.UUID, 0, n)
	var hosts []string
	for i := range n {
		var p taskPayload
		p.Plugin = "echo"
		p.Input.Hosts = []string{fmt.Sprintf("%s-%d-a.netfaults.test", prefix, i), fmt.Sprintf("%s-%d-b.netfaults.test", prefix, i)}
		payload, _ := json.Marshal(p)
		ids = append(ids, g.CreateTask(t, org, harness.TaskSpec{Payload: string(payload), RequiredCapabilities: caps,
			// Faults end attempts by lease expiry; they must not exhaust a task.
			MaxAttempts: 50, LeaseDurationSeconds: leaseSeconds,
			Retry: &workerclient.RetryPolicy{BaseSeconds: &base, MaxSeconds: &maxDelay}}))
		hosts = append(hosts, p.Input.Hosts...)
	}
	return ids, hosts
}

// emitHandler reports the task's hosts, one result batch each (the runtime
// runs with ResultBatchSize 1, the last one may ride in the completion),
// then works for a while so that faults hit tasks in flight.
func emitHandler(work time.Duration) workerclient.Handler {
	return func(ctx context.Context, task *workerclient.LeasedTask) error {
		for _, r := range assetRecords(hostsOf(task.Payload)) {
			if err := task.Emit(ctx, r); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(work):
			return nil
		}
	}
}

// startRuntime runs the Go worker runtime as w against url (a replica or a
// proxy in front of one), with every call recorded by rec.
func startRuntime(t testing.TB, w *harness.Worker, url string, rec *recorder, slots int, caps map[string]any, handler workerclient.Handler) (stop func()) {
	t.Helper()
	return w.Runtime(t, slots, handler, func(cfg *workerclient.Config) {
		cfg.GatewayURL = url
		// Short enough that a request lost in a partition is retried soon.
		cfg.HTTPClient = rec.client(w.HTTP.Transport, 10*time.Second)
		cfg.WaitSeconds = 2
		cfg.Capabilities = caps
		cfg.ResultBatchSize = 1
	})
}
