package operations

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/server/services/pruner"
	"github.com/worker-gateway/gateway/server/services/queuevacuum"
	"github.com/worker-gateway/gateway/server/services/scheduletimer"
	"github.com/worker-gateway/gateway/server/services/sweeper"
	"github.com/worker-gateway/gateway/server/services/webhookdeliver"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
)

// fakeService is a background service only this test knows: it records
// that it ran, the wake-ups it was handed, the catch-ups, and its stop.
type fakeService struct {
	started, stopped chan struct{}
	catchUps         atomic.Int64
	mu               sync.Mutex
	woken            []store.Wakeup
}

func (f *fakeService) Name() string { return "fake" }

func (f *fakeService) Run(ctx context.Context) error {
	close(f.started)
	<-ctx.Done()
	close(f.stopped)
	return nil
}

func (f *fakeService) Subscriptions() []store.WakeupKind {
	return []store.WakeupKind{store.WakeSchedules}
}

func (f *fakeService) Wake(w store.Wakeup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.woken = append(f.woken, w)
}

func (f *fakeService) CatchUp() { f.catchUps.Add(1) }

func (f *fakeService) wakeups() []store.Wakeup {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.woken)
}

// TestServiceAddedByTheListAlone: a service added to the replica's list of
// background services — and nowhere else — is run by a real gateway, caught
// up when its LISTEN connection comes up, woken by the wake-ups of the kind
// it subscribes to and by no other, and stopped when the gateway shuts down,
// which waits for it.
func TestServiceAddedByTheListAlone(t *testing.T) {
	t.Parallel()
	fake := &fakeService{started: make(chan struct{}), stopped: make(chan struct{})}
	// Registered before the gateway starts, so it runs after the gateway's
	// own cleanup has shut it down and waited for its background work.
	t.Cleanup(func() {
		select {
		case <-fake.stopped:
		default:
			t.Error("the gateway shut down without stopping the service")
		}
	})
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Services = append(slices.Clone(server.DefaultServices),
			server.ServiceSpec{Service: func(*server.Server) services.Service { return fake }})
	}})
	harness.WaitFor(t, 10*time.Second, "the service running", func() bool {
		select {
		case <-fake.started:
			return true
		default:
			return false
		}
	})
	harness.WaitFor(t, 10*time.Second, "the catch-up on connecting", func() bool { return fake.catchUps.Load() > 0 })

	ctx := context.Background()
	notify := func(w store.Wakeup) {
		_, err := g.Pool.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel, w.Payload())
		require.NoError(t, err)
	}
	org := uuid.New()
	// A kind it does not subscribe to, then one it does: notices arrive in
	// order, so once the second is handed over the first would have been.
	notify(store.Wakeup{Kind: store.WakeWebhooks, Organization: org})
	notify(store.Wakeup{Kind: store.WakeSchedules, Organization: org})
	harness.WaitFor(t, 10*time.Second, "the schedules wake-up", func() bool { return len(fake.wakeups()) > 0 })
	require.Equal(t, []store.Wakeup{{Kind: store.WakeSchedules, Organization: org}}, fake.wakeups(),
		"only the subscribed kind is handed over")
	select {
	case <-fake.stopped:
		t.Fatal("the service stopped while the gateway runs")
	default:
	}
}

// TestServiceNamesAreUnique: the name labels a service's logs and spans,
// so a list naming two services alike is refused.
func TestServiceNamesAreUnique(t *testing.T) {
	a := &fakeService{}
	_, err := services.NewGroup(harness.Logger(), a, a)
	require.ErrorContains(t, err, "two background services are named fake")
}

// TestServiceIterationsAreTracedApart: each pass of a background service
// is a trace of its own, a root span named after the service (issue 36:
// background work is traced as its own unit, not inside a request's trace).
func TestServiceIterationsAreTracedApart(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.TracerProvider = provider }})
	require.True(t, g.Server.Kick(sweeper.Name))
	harness.WaitFor(t, 10*time.Second, "a sweeper pass's span", func() bool {
		for _, s := range spans.Ended() {
			if s.Name() == "sweeper" {
				require.False(t, s.Parent().IsValid(), "a sweeper pass is the root of its own trace")
				return true
			}
		}
		return false
	})
}

// withoutServices is the default list less the named services: each entry
// builds as before, and a service of those names is left off.
func withoutServices(names ...string) []server.ServiceSpec {
	list := slices.Clone(server.DefaultServices)
	for i, spec := range list {
		build := spec.Service
		list[i].Service = func(s *server.Server) services.Service {
			svc := build(s)
			if svc != nil && slices.Contains(names, svc.Name()) {
				return nil
			}
			return svc
		}
	}
	return list
}

// TestDefaultServicesAreTheListsAlone: the sweeper, the pruner and the
// webhook deliverer run because the list builds them, and only then: a
// list without them gives a gateway that serves leases (the request path
// reaches the sweeper only through the group), runs none of them, and
// exposes none of their metrics.
func TestDefaultServicesAreTheListsAlone(t *testing.T) {
	t.Parallel()
	full := harness.Start(t)
	require.Equal(t, []string{sweeper.Name, pruner.Name, queuevacuum.Name, scheduletimer.Name, webhookdeliver.Name,
		"webhook-watcher", "security-audit", "webhook-secret-sealing"}, full.Server.Services())
	m := scrape(t, full, full.AdminToken)
	require.Contains(t, m, "gateway_sweeper_runs_total")
	require.Contains(t, m, "gateway_lease_expiries_total")
	require.Contains(t, m, `gateway_webhook_tries_total{outcome="delivered"}`)

	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Services = withoutServices(sweeper.Name, pruner.Name, webhookdeliver.Name)
	}})
	require.NotContains(t, g.Server.Services(), sweeper.Name)
	require.NotContains(t, g.Server.Services(), pruner.Name)
	require.NotContains(t, g.Server.Services(), webhookdeliver.Name)
	require.False(t, g.Server.Kick(sweeper.Name))
	require.False(t, g.Server.Kick(pruner.Name))
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	require.Len(t, lease(t, w, 1, 0), 1)
	m = scrape(t, g, g.AdminToken)
	require.NotContains(t, m, "gateway_sweeper_runs_total")
	require.NotContains(t, m, "gateway_lease_expiries_total")
	require.NotContains(t, m, `gateway_webhook_tries_total{outcome="delivered"}`)
}

// TestSweeperWokenByItsReplicasGrants: a dormant sweeper (nothing could
// expire, so it planned its next pass an hour away) is woken by a lease
// its replica grants, through the group (services.DeadlineWatcher), and
// expires that lease when it runs out.
func TestSweeperWokenByItsReplicasGrants(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.SweepIdleInterval = time.Hour
		c.SweepDormantInterval = time.Hour
	}})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 5})
	require.Len(t, lease(t, w, 1, 0), 1)
	harness.WaitFor(t, 30*time.Second, "the silent worker's lease expired by the sweeper", func() bool {
		a := g.Task(t, task).Attempts
		return len(a) > 0 && a[0].Status == "expired"
	})
}
