package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// replica is one gateway slot: a process restarted, with the same
// environment, whenever it dies.
type replica struct {
	name string
	env  []string
	proc *harness.Process
}

// cluster is the gateway replicas of a scenario over one database. Replica 0
// serves the control plane and is never killed, so the workload can always
// make progress; the others are the ones faults hit.
type cluster struct {
	t *testing.T
	g *harness.Gateway

	mu       sync.Mutex
	replicas []*replica
	// Kills counts SIGKILLs sent; Crashes counts replicas that died on their
	// own (at a failpoint).
	Kills, Crashes int
}

// startCluster starts the control replica and one replica per environment,
// over db (harness.Database{}: a fresh database).
func startCluster(t *testing.T, db harness.Database, envs ...[]string) *cluster {
	t.Helper()
	return startClusterWith(t, db, nil, envs...)
}

// startClusterWith is startCluster with extra flags for the control
// replica (the others get the default flags and their environment).
func startClusterWith(t *testing.T, db harness.Database, controlArgs []string, envs ...[]string) *cluster {
	t.Helper()
	g, procs := harness.StartProcessesOn(t, 1, db, controlArgs...)
	cl := &cluster{t: t, g: g, replicas: []*replica{{name: "control", proc: procs[0]}}}
	for i, env := range envs {
		r := &replica{name: fmt.Sprintf("chaos-%d", i+1), env: env}
		cl.replicas = append(cl.replicas, r)
		cl.restart(r)
	}
	return cl
}

// urls is the current address of every replica, dead or alive.
func (cl *cluster) urls() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	out := make([]string, len(cl.replicas))
	for i, r := range cl.replicas {
		out[i] = r.proc.URL
	}
	return out
}

// url is replica i's current address.
func (cl *cluster) url(i int) string { return cl.urls()[i] }

// pick is a random replica's address: clients spread their calls, and a
// call to a replica that just died is refused and retried elsewhere.
func (cl *cluster) pick() string {
	urls := cl.urls()
	return urls[rand.IntN(len(urls))]
}

// DialFunc is http.Transport's DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// DialTo connects to addr (host:port) whatever address was asked for: a
// Go runtime's path to one replica, or to a proxy in front of it.
func DialTo(addr string) DialFunc {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	}
}

// dial connects to a random replica whatever address was asked for: the
// load balancer in front of the Go runtimes.
func (cl *cluster) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	u, err := url.Parse(cl.pick())
	if err != nil {
		return nil, err
	}
	return DialTo(u.Host)(ctx, network, "")
}

// faults is what the cluster injected, for the summary.
func (cl *cluster) faults() []Fault {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return []Fault{{"kills", cl.Kills}, {"crashes", cl.Crashes}}
}

// kill sends SIGKILL to replica i, waits until it is gone and starts it
// again; it returns when the kill was sent.
func (cl *cluster) kill(i int) time.Time {
	cl.t.Helper()
	cl.mu.Lock()
	r := cl.replicas[i]
	cl.mu.Unlock()
	at := time.Now()
	// Signal rather than Process.Stop: the replica may be crashing at this
	// very moment, and Stop would read the process state unsynchronised.
	_ = r.proc.Cmd.Process.Signal(syscall.SIGKILL)
	require.Error(cl.t, r.proc.Wait(30*time.Second), "replica %s after SIGKILL", r.name)
	cl.mu.Lock()
	cl.Kills++
	cl.mu.Unlock()
	cl.restart(r)
	return at
}

// reviveCrashed restarts every replica that died on its own.
func (cl *cluster) reviveCrashed() {
	cl.t.Helper()
	for _, r := range cl.snapshot() {
		if exited, _ := r.proc.Exited(); exited {
			cl.mu.Lock()
			cl.Crashes++
			cl.mu.Unlock()
			cl.restart(r)
		}
	}
}

// restart starts the replica's process (again) and waits until it is ready
// or has died once more (an armed replica may crash at a failpoint before
// it is ready; reviveCrashed starts it again).
func (cl *cluster) restart(r *replica) {
	cl.t.Helper()
	p := cl.g.LaunchProcess(cl.t, r.env...)
	harness.WaitFor(cl.t, time.Minute, "replica "+r.name+" ready or crashed", func() bool {
		exited, _ := p.Exited()
		return exited || cl.g.Ready(p)
	})
	cl.mu.Lock()
	r.proc = p
	cl.mu.Unlock()
}

func (cl *cluster) snapshot() []*replica {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]*replica(nil), cl.replicas...)
}

// calmDown ends the faults: it restarts crashed replicas and then replaces
// the failpoint-armed ones with plain replicas, so the workload can drain.
func (cl *cluster) calmDown() {
	cl.t.Helper()
	cl.reviveCrashed()
	for _, r := range cl.snapshot() {
		armed := slices.ContainsFunc(r.env, func(kv string) bool { return strings.HasPrefix(kv, "GATEWAY_FAILPOINTS=") })
		if !armed {
			continue
		}
		_ = r.proc.Cmd.Process.Signal(syscall.SIGKILL)
		_ = r.proc.Wait(30 * time.Second)
		cl.mu.Lock()
		r.env = nil
		cl.mu.Unlock()
		cl.restart(r)
	}
}
