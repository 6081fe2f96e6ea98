package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// scale is the size of a scenario: short by default, long with
// FAULTS_LONG=1.
type scale struct {
	Long bool
	// Waves of Tasks (and Scans) are created every WaveEvery.
	Waves, Tasks, Scans int
	WaveEvery           time.Duration
	RawClients          int
	Runtimes            int
	// Faults is how long faults are injected; Drain bounds the wait for
	// every task to end afterwards.
	Faults, Drain time.Duration
}

func scaleOf() scale {
	if os.Getenv("FAULTS_LONG") == "1" {
		return scale{Long: true, Waves: 24, Tasks: 25, Scans: 2, WaveEvery: 10 * time.Second,
			RawClients: 6, Runtimes: 3, Faults: 4 * time.Minute, Drain: 5 * time.Minute}
	}
	return scale{Waves: 3, Tasks: 12, Scans: 1, WaveEvery: 3 * time.Second,
		RawClients: 3, Runtimes: 2, Faults: 9 * time.Second, Drain: 90 * time.Second}
}

// Task settings of the workload: a short lease so expiries happen within a
// scenario, attempts to spare so faults never exhaust a task, and a short
// retry back-off.
const (
	leaseSeconds         = 5
	maxAttempts          = 20
	retryBase, retryMost = 0.1, 1.0 // seconds
	batches              = 2
)

// workload is a scenario's organization, tasks and workers, all recording
// into one history.
type workload struct {
	t      *testing.T
	cl     *cluster
	g      *harness.Gateway
	h      *History
	org    uuid.UUID
	caps   *capabilities // what raw clients advertise
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	raw    []*rawClient
	// runtimes are the Go runtimes' stop functions.
	runtimes   []func()
	transports []*http.Transport
}

func newWorkload(t *testing.T, cl *cluster) *workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{t: t, cl: cl, g: cl.g, h: NewHistory(), org: cl.g.NewOrganization(t, "faults"),
		caps: newCapabilities(map[string]any{"faults": true}), ctx: ctx, cancel: cancel}
	t.Cleanup(w.stop)
	return w
}

// createTasks creates n tasks needing caps, for the workload's handlers.
func (w *workload) createTasks(n int, caps map[string]any) []uuid.UUID {
	w.t.Helper()
	var ids []uuid.UUID
	for range n {
		ids = append(ids, w.createTask(w.org, caps, `{"plugin": "fault-test"}`))
	}
	return ids
}

// createTask creates a task of org needing caps, with the workload's lease,
// attempts and retry policy.
func (w *workload) createTask(org uuid.UUID, caps map[string]any, payload string) uuid.UUID {
	w.t.Helper()
	required := workerclient.Capabilities(mustJSON(w.t, caps))
	body := workerclient.JSONObject(payload)
	lease, attempts, base, most := leaseSeconds, maxAttempts, retryBase, retryMost
	res, err := w.g.Control.CreateTaskWithResponse(context.Background(), nil, workerclient.CreateTaskRequest{
		OrganizationId: org, TaskType: "scanner_plugin", Payload: &body, RequiredCapabilities: &required,
		LeaseDurationSeconds: &lease, MaxAttempts: &attempts,
		Retry: &workerclient.RetryPolicy{BaseSeconds: &base, MaxSeconds: &most}})
	require.NoError(w.t, err)
	require.Equal(w.t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Id
}

// createScans creates n scans of one job each: their tasks have the default
// lease and attempts, and their threats are detections of the scan job.
func (w *workload) createScans(n int) {
	w.t.Helper()
	caps := workerclient.Capabilities(`{"faults": true}`)
	for range n {
		res, err := w.g.Control.CreateScanWithResponse(context.Background(), nil, workerclient.CreateScanRequest{
			OrganizationId: w.org, Targets: []string{"faults.test"},
			Plugins: []workerclient.ScanPlugin{{Name: "fault-test", RequiredCapabilities: &caps}}})
		require.NoError(w.t, err)
		require.Equal(w.t, http.StatusCreated, res.StatusCode(), string(res.Body))
	}
}

// wave creates one wave of the scenario's tasks and scans.
func (w *workload) wave(sc scale) {
	w.t.Helper()
	w.createTasks(sc.Tasks, map[string]any{"faults": true})
	w.createScans(sc.Scans)
}

// rawClient registers a worker and returns a raw client for it that calls
// the replicas url picks.
func (w *workload) rawClient(name string, p plan, url func() string) *rawClient {
	w.t.Helper()
	id := newIdentity(w.t, w.g, name, max(p.MaxTasks, 1), w.org)
	tr := id.transport(w.g, nil)
	w.transports = append(w.transports, tr)
	client := w.h.NewClient(name)
	return &rawClient{name: name, id: client, worker: id.ID, url: url, caps: w.caps, plan: p, rng: rand.New(rand.NewPCG(rand.Uint64(), 0)),
		http: &http.Client{Transport: w.h.Transport(client, tr)}}
}

// startRaw starts n raw clients spreading their calls over the replicas.
func (w *workload) startRaw(n int, p plan) {
	w.t.Helper()
	for i := range n {
		c := w.rawClient(fmt.Sprintf("raw-%d", i+1), p, w.cl.pick)
		w.raw = append(w.raw, c)
		w.wg.Go(func() { c.run(w.ctx) })
	}
}

// assignRaw lets the running raw clients lease the tasks of another
// organization.
func (w *workload) assignRaw(org uuid.UUID) {
	w.t.Helper()
	for _, c := range w.raw {
		w.g.Assign(w.t, org, c.worker)
	}
}

// startRuntimes starts n Go worker runtimes behind the load balancer.
func (w *workload) startRuntimes(n int) {
	w.t.Helper()
	for i := range n {
		w.startRuntime(fmt.Sprintf("runtime-%d", i+1), w.cl.dial)
	}
}

// startRuntime starts a Go runtime whose connections dial goes through. Its
// handler sends the workload's result batches and succeeds.
func (w *workload) startRuntime(name string, dial dialFunc) *identity {
	w.t.Helper()
	const slots = 2
	id := newIdentity(w.t, w.g, name, slots, w.org)
	tr := id.transport(w.g, dial)
	w.transports = append(w.transports, tr)
	rt, err := workerclient.NewWorker(workerclient.Config{
		// The dialer picks the replica; the name is what the server
		// certificate is for.
		GatewayURL:   "https://localhost",
		HTTPClient:   &http.Client{Transport: w.h.Transport(w.h.NewClient(name), tr)},
		Slots:        slots,
		WaitSeconds:  2,
		Capabilities: map[string]any{"faults": true},
		Handler:      runtimeHandler,
		Logger:       harness.Logger(),
		DrainTimeout: 5 * time.Second,
	})
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rt.Run(ctx)
	}()
	w.runtimes = append(w.runtimes, func() { cancel(); <-done })
	return id
}

func runtimeHandler(ctx context.Context, task *workerclient.LeasedTask) error {
	for seq := 1; seq <= batches; seq++ {
		if err := task.Emit(ctx, batchRecords(task.ID, seq)...); err != nil {
			return err
		}
		if err := task.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// batchRecords are the records of result batch seq of a task: two assets and
// a threat whose natural keys depend only on the task and seq, so a repeated
// batch — or the same batch from another attempt — adds no rows.
func batchRecords(task uuid.UUID, seq int) []workerclient.ResultRecord {
	host := fmt.Sprintf("b%d-%s.faults.test", seq, task)
	alt := "alt-" + host
	external, title, severity := fmt.Sprintf("finding-%d", seq), "fault test finding", workerclient.Severity("low")
	return []workerclient.ResultRecord{
		{Kind: "asset", Asset: &workerclient.AssetRef{Type: "hostname", Value: host}},
		{Kind: "asset", Asset: &workerclient.AssetRef{Type: "hostname", Value: alt}},
		{Kind: "threat", Asset: &workerclient.AssetRef{Type: "hostname", Value: host},
			ExternalId: &external, Title: &title, Severity: &severity},
	}
}

// unfinished counts the tasks not yet in a terminal state.
func (w *workload) unfinished() int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.g.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM worker_tasks WHERE state NOT IN ('completed', 'failed_terminal', 'cancelled')`).Scan(&n))
	return n
}

// drain waits until every task has ended, then stops the workers.
func (w *workload) drain(timeout time.Duration) {
	w.t.Helper()
	harness.WaitFor(w.t, timeout, "every task to end", func() bool { return w.unfinished() == 0 })
	w.stop()
}

// stop stops every worker and closes their idle connections.
func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
	for _, stop := range w.runtimes {
		stop()
	}
	w.runtimes = nil
	for _, tr := range w.transports {
		tr.CloseIdleConnections()
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
