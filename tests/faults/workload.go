package faults

import (
	"cmp"
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
	"github.com/worker-gateway/gateway/workerclient/apiclient"
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

// Workload is a scenario's organization, tasks and workers, all recording
// into one history.
type Workload struct {
	t      *testing.T
	cl     *cluster
	g      *harness.Gateway
	h      *History
	org    uuid.UUID
	caps   *capabilities // what raw clients advertise
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	raw    []*RawClient
	// runtimes are the Go runtimes' stop functions.
	runtimes   []func()
	transports []*http.Transport
}

func newWorkload(t *testing.T, cl *cluster) *Workload {
	w := NewWorkload(t, cl.g)
	w.cl = cl
	return w
}

// NewWorkload starts an empty workload on g: a new organization and
// history. Its workers are stopped at the end of the test.
func NewWorkload(t *testing.T, g *harness.Gateway) *Workload {
	return NewWorkloadIn(t, g, g.NewOrganization(t, "faults"))
}

// NewWorkloadIn is NewWorkload in an organization of g's that exists (one
// the previous release created, in tests/upgrade).
func NewWorkloadIn(t *testing.T, g *harness.Gateway, org uuid.UUID) *Workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{t: t, g: g, h: NewHistory(), org: org,
		caps: newCapabilities(LoadCapabilities()), ctx: ctx, cancel: cancel}
	t.Cleanup(w.Stop)
	return w
}

// LoadCapabilities are what the workload's tasks need and its workers
// advertise, unless told otherwise.
func LoadCapabilities() map[string]any { return map[string]any{"faults": true} }

// History is the workload's history.
func (w *Workload) History() *History { return w.h }

// CreateTasks creates n tasks needing caps, for the workload's handlers.
func (w *Workload) CreateTasks(n int, caps map[string]any) []uuid.UUID {
	w.t.Helper()
	return w.CreateTasksWith(n, caps, `{"plugin": "fault-test"}`)
}

// CreateTasksWith creates n tasks of the workload's organization needing
// caps, with payload, for workers other than the workload's handlers (a
// reference worker process runs its plugins).
func (w *Workload) CreateTasksWith(n int, caps map[string]any, payload string) []uuid.UUID {
	w.t.Helper()
	var ids []uuid.UUID
	for range n {
		ids = append(ids, w.createTask(w.org, caps, payload))
	}
	return ids
}

// Organization is the workload's organization.
func (w *Workload) Organization() uuid.UUID { return w.org }

// createTask creates a task of org needing caps, with the workload's lease,
// attempts and retry policy.
func (w *Workload) createTask(org uuid.UUID, caps map[string]any, payload string) uuid.UUID {
	w.t.Helper()
	required := apiclient.Capabilities(mustJSON(w.t, caps))
	body := apiclient.JSONObject(payload)
	lease, attempts, base, most := leaseSeconds, maxAttempts, retryBase, retryMost
	res, err := w.g.Control.CreateTaskWithResponse(context.Background(), nil, apiclient.CreateTaskRequest{
		OrganizationId: org, TaskType: "scanner_plugin", Payload: &body, RequiredCapabilities: &required,
		LeaseDurationSeconds: &lease, MaxAttempts: &attempts,
		Retry: &apiclient.RetryPolicy{BaseSeconds: &base, MaxSeconds: &most}})
	require.NoError(w.t, err)
	require.Equal(w.t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Id
}

// createScans creates n scans of one job each: their tasks have the default
// lease and attempts, and their threats are detections of the scan job.
func (w *Workload) createScans(n int) {
	w.t.Helper()
	caps := apiclient.Capabilities(`{"faults": true}`)
	for range n {
		res, err := w.g.Control.CreateScanWithResponse(context.Background(), nil, apiclient.CreateScanRequest{
			OrganizationId: w.org, Targets: []string{"faults.test"},
			Plugins: []apiclient.ScanPlugin{{Name: "fault-test", RequiredCapabilities: &caps}}})
		require.NoError(w.t, err)
		require.Equal(w.t, http.StatusCreated, res.StatusCode(), string(res.Body))
	}
}

// wave creates one wave of the scenario's tasks and scans.
func (w *Workload) wave(sc scale) {
	w.t.Helper()
	w.CreateTasks(sc.Tasks, LoadCapabilities())
	w.createScans(sc.Scans)
}

// RawClient registers a worker and returns a raw client for it that calls
// the replicas url picks, advertising the load's capabilities.
func (w *Workload) RawClient(name string, p Plan, url func() string) *RawClient {
	w.t.Helper()
	id := newIdentity(w.t, w.g, name, max(p.MaxTasks, 1), w.org)
	tr := id.transport(w.g, nil)
	w.transports = append(w.transports, tr)
	client := w.h.NewClient(name)
	return &RawClient{name: name, id: client, worker: id.ID, url: url, caps: w.caps, plan: p, rng: rand.New(rand.NewPCG(rand.Uint64(), 0)),
		http: &http.Client{Transport: w.h.Transport(client, tr)}}
}

// startRaw starts n raw clients spreading their calls over the replicas.
func (w *Workload) startRaw(n int, p Plan) {
	w.t.Helper()
	for i := range n {
		w.Run(w.RawClient(fmt.Sprintf("raw-%d", i+1), p, w.cl.pick))
	}
}

// Run runs a raw client until the workload stops.
func (w *Workload) Run(c *RawClient) {
	w.raw = append(w.raw, c)
	w.wg.Go(func() { c.Run(w.ctx) })
}

// assignRaw lets the running raw clients lease the tasks of another
// organization.
func (w *Workload) assignRaw(org uuid.UUID) {
	w.t.Helper()
	for _, c := range w.raw {
		w.g.Assign(w.t, org, c.worker)
	}
}

// startRuntimes starts n Go worker runtimes behind the load balancer.
func (w *Workload) startRuntimes(n int) {
	w.t.Helper()
	for i := range n {
		w.StartRuntime(Runtime{Name: fmt.Sprintf("runtime-%d", i+1), Dial: w.cl.dial})
	}
}

// Runtime is how a Go runtime of the workload runs. Its handler sends the
// workload's result batches, works a while and succeeds.
type Runtime struct {
	Name  string
	Slots int // 0: 2
	// Dial is the runtime's path to the gateway: the cluster's load
	// balancer, or DialTo one replica or proxy.
	Dial DialFunc
	// Capabilities it advertises; nil: the load's.
	Capabilities map[string]any
	// Work is how long the handler works after sending its batches.
	Work time.Duration
	// Timeout bounds each call (0: none): a call lost in a partition is
	// then retried soon.
	Timeout time.Duration
}

// StartRuntime starts a Go runtime and returns its worker's id.
func (w *Workload) StartRuntime(r Runtime) uuid.UUID {
	w.t.Helper()
	slots := cmp.Or(r.Slots, 2)
	if r.Capabilities == nil {
		r.Capabilities = LoadCapabilities()
	}
	id := newIdentity(w.t, w.g, r.Name, slots, w.org)
	tr := id.transport(w.g, r.Dial)
	w.transports = append(w.transports, tr)
	rt, err := workerclient.NewWorker(workerclient.Config{
		// The dialer picks the replica; the name is what the server
		// certificate is for.
		GatewayURL:   "https://localhost",
		HTTPClient:   &http.Client{Transport: w.h.Transport(w.h.NewClient(r.Name), tr), Timeout: r.Timeout},
		Slots:        slots,
		WaitSeconds:  2,
		Capabilities: r.Capabilities,
		Handler:      runtimeHandler(r.Work),
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
	return id.ID
}

func runtimeHandler(work time.Duration) workerclient.Handler {
	return func(ctx context.Context, task *workerclient.LeasedTask) error {
		for seq := 1; seq <= batches; seq++ {
			if err := task.Emit(ctx, batchRecords(task.ID, seq)...); err != nil {
				return err
			}
			if err := task.Flush(ctx); err != nil {
				return err
			}
		}
		return sleep(ctx, work)
	}
}

// sleep waits d unless ctx ends first, and returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	return ctx.Err()
}

// batchRecords are the records of result batch seq of a task: two assets and
// a threat whose natural keys depend only on the task and seq, so a repeated
// batch — or the same batch from another attempt — adds no rows.
func batchRecords(task uuid.UUID, seq int) []apiclient.ResultRecord {
	host := fmt.Sprintf("b%d-%s.faults.test", seq, task)
	alt := "alt-" + host
	external, title, severity := fmt.Sprintf("finding-%d", seq), "fault test finding", apiclient.Severity("low")
	return []apiclient.ResultRecord{
		{Kind: "asset", Asset: &apiclient.AssetRef{Type: "hostname", Value: host}},
		{Kind: "asset", Asset: &apiclient.AssetRef{Type: "hostname", Value: alt}},
		{Kind: "threat", Asset: &apiclient.AssetRef{Type: "hostname", Value: host},
			ExternalId: &external, Title: &title, Severity: &severity},
	}
}

// unfinished counts the tasks not yet in a terminal state.
func (w *Workload) unfinished() int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.g.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM worker_tasks WHERE state NOT IN ('completed', 'failed_terminal', 'cancelled')`).Scan(&n))
	return n
}

// drain waits until every task has ended, then stops the workers.
func (w *Workload) drain(timeout time.Duration) {
	w.t.Helper()
	harness.WaitFor(w.t, timeout, "every task to end", func() bool { return w.unfinished() == 0 })
	w.Stop()
}

// Stop stops every worker and closes their idle connections.
func (w *Workload) Stop() {
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
