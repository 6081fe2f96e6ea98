package upgrade

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// The releases of the fleet, as the census and the crossings name them.
const (
	previous = "previous"
	current  = "this"
)

// fleet is the replicas of both releases over one database and the load
// balancer in front of them: workers and the control plane reach a replica
// it picks among those in service.
type fleet struct {
	t  *testing.T
	mu sync.Mutex
	// serving are the replicas behind the balancer.
	serving []*harness.Process
	// releases names the release of every replica that ever served, by
	// host:port (a call's Replica).
	releases map[string]string
	// control is the control plane's transport, whose idle connections to
	// a stopped replica are dropped.
	control *http.Transport
}

func newFleet(t *testing.T) *fleet {
	return &fleet{t: t, releases: map[string]string{}}
}

// add puts replicas of release behind the balancer.
func (f *fleet) add(release string, procs ...*harness.Process) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range procs {
		f.serving = append(f.serving, p)
		f.releases[hostOf(p)] = release
	}
}

// releaseOf is the release of the replica at host:port.
func (f *fleet) releaseOf(host string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.releases[host]
}

// pick is a random serving replica's URL.
func (f *fleet) pick() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.serving[rand.IntN(len(f.serving))].URL
}

// dial connects to a random serving replica whatever address was asked
// for: the balancer in front of Go runtimes, proxies and the control plane.
func (f *fleet) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	return faults.DialTo(strings.TrimPrefix(f.pick(), "https://"))(ctx, network, "")
}

// stop takes a replica out of the balancer, as a rolling update does, and
// then signals it: calls in flight on it and connections workers hold to it
// meet the signal. It returns the process's exit error.
func (f *fleet) stop(p *harness.Process, sig syscall.Signal) error {
	f.mu.Lock()
	for i, s := range f.serving {
		if s == p {
			f.serving = append(f.serving[:i:i], f.serving[i+1:]...)
			break
		}
	}
	require.NotEmpty(f.t, f.serving, "a replica stays in service")
	f.mu.Unlock()
	err := p.Stop(sig)
	if f.control != nil {
		f.control.CloseIdleConnections()
	}
	return err
}

// controlClient is a control-plane client of g's admin that reaches the
// replicas through the balancer.
func (f *fleet) controlClient(g *harness.Gateway) *apiclient.ClientWithResponses {
	f.t.Helper()
	f.control = &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: g.CAPool, MinVersion: tls.VersionTLS13},
		DialContext:       f.dial,
		ForceAttemptHTTP2: true,
	}
	// The dialer picks the replica; the name is what the server
	// certificate is for.
	c, err := apiclient.NewClientWithResponses("https://localhost",
		apiclient.WithHTTPClient(&http.Client{Transport: f.control, Timeout: time.Minute}),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+g.AdminToken)
			return nil
		}))
	require.NoError(f.t, err)
	return c
}

// hostOf is a replica's host:port, as calls name it.
func hostOf(p *harness.Process) string { return strings.TrimPrefix(p.URL, "https://") }
