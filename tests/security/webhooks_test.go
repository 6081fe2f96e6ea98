package security

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// notGloballyReachable are addresses the gateway accepted as webhook
// targets before targets were held to an allow-list of global unicast
// addresses: IPv4 loopback written as IPv4-compatible and IPv4-translated
// IPv6, 6to4 addresses embedding loopback and the metadata address, IPv6
// site-local, the reserved 240/4 and the broadcast address.
var notGloballyReachable = []string{"::127.0.0.1", "::ffff:0:7f00:1", "2002:7f00:1::", "2002:a9fe:a9fe::", "fec0::1",
	"240.0.0.1", "255.255.255.255"}

// hostURL is an http URL naming an address (or a name) as a host.
func hostURL(host, port string) string {
	return "http://" + net.JoinHostPort(host, port) + "/hook"
}

// switchResolver is a DNS the test controls: each name answers the
// addresses last set, and a name without any does not resolve.
type switchResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
}

func (r *switchResolver) set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names == nil {
		r.names = map[string][]netip.Addr{}
	}
	r.names[name] = nil
	for _, a := range addrs {
		r.names[name] = append(r.names[name], netip.MustParseAddr(a))
	}
}

func (r *switchResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.names[host]; len(a) > 0 {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// createWebhookAnswer creates a target and returns the status and the
// problem (without its request id), or the created target's id.
func createWebhookAnswer(t *testing.T, g *harness.Gateway, org uuid.UUID, url string) (int, map[string]any, uuid.UUID) {
	t.Helper()
	res, err := g.Control.CreateWebhookWithResponse(t.Context(), apiclient.CreateWebhookRequest{OrganizationId: org, Url: url,
		EventTypes: []apiclient.WebhookEventType{apiclient.WorkerRevoked}})
	require.NoError(t, err)
	if res.JSON201 != nil {
		return res.StatusCode(), nil, res.JSON201.Id
	}
	var p map[string]any
	require.NoError(t, json.Unmarshal(res.Body, &p), string(res.Body))
	delete(p, "request_id")
	return res.StatusCode(), p, uuid.Nil
}

// TestWebhookTargetsAreGlobalUnicastOnly: a target whose host is an
// address that is not globally reachable is refused, in every spelling,
// and so is a name that resolves to one; the answer is the same as for a
// plain loopback target.
func TestWebhookTargetsAreGlobalUnicastOnly(t *testing.T) {
	t.Parallel()
	dns := &switchResolver{}
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Webhooks.Resolver = dns }})
	org := g.NewOrganization(t, "ssrf-allow-list")

	status, want, _ := createWebhookAnswer(t, g, org, hostURL("127.0.0.1", "80"))
	require.Equal(t, http.StatusBadRequest, status)
	for i, a := range notGloballyReachable {
		status, got, _ := createWebhookAnswer(t, g, org, hostURL(a, "80"))
		require.Equal(t, http.StatusBadRequest, status, "%s is not globally reachable", a)
		require.Equal(t, want, got, a)

		name := "target-" + string(rune('a'+i)) + ".test"
		dns.set(name, a)
		status, got, _ = createWebhookAnswer(t, g, org, hostURL(name, "80"))
		require.Equal(t, http.StatusBadRequest, status, "%s resolves to %s", name, a)
		require.Equal(t, want, got, name)
	}
	// A name with one public and one refused address is refused too.
	dns.set("mixed.test", "9.9.9.9", "::ffff:0:7f00:1")
	status, got, _ := createWebhookAnswer(t, g, org, hostURL("mixed.test", "80"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, want, got)

	// A global unicast address, literal or resolved, is accepted.
	dns.set("public.test", "2a00:1450:4001::200e", "9.9.9.9")
	for _, url := range []string{hostURL("9.9.9.9", "80"), hostURL("2a00:1450:4001::200e", "443"), hostURL("public.test", "80")} {
		status, p, _ := createWebhookAnswer(t, g, org, url)
		require.Equal(t, http.StatusCreated, status, "%s: %v", url, p)
	}
}

// TestWebhookTargetNoDNSOracle: a name that does not resolve gets exactly
// the answer of a name that resolves to loopback (status, code, detail),
// so creating targets tells an organization nothing about the gateway's
// DNS or network. Uses the system resolver.
func TestWebhookTargetNoDNSOracle(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "ssrf-oracle")
	s1, loopback, _ := createWebhookAnswer(t, g, org, hostURL("localhost", "80"))
	s2, missing, _ := createWebhookAnswer(t, g, org, hostURL("no-such-host.invalid", "80"))
	require.Equal(t, http.StatusBadRequest, s1)
	require.Equal(t, s1, s2)
	require.Equal(t, loopback, missing)
}

// TestWebhookDialRefusesRebindingWithOneAnswer: a target created while its
// name resolved to a public address and resolving to a refused address
// when delivered (DNS rebinding) is not dialed, and its delivery log says
// exactly what it says of a name that stopped resolving; the loopback
// receiver the names point at gets nothing.
func TestWebhookDialRefusesRebindingWithOneAnswer(t *testing.T) {
	t.Parallel()
	dns := &switchResolver{}
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Webhooks.Resolver = dns
		c.Webhooks.Timeout = 2 * time.Second
		c.Webhooks.Policy.MaxAttempts = 1
	}})
	org := g.NewOrganization(t, "ssrf-rebind")
	var reached atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	t.Cleanup(rcv.Close)
	_, port, err := net.SplitHostPort(rcv.Listener.Addr().String())
	require.NoError(t, err)

	rebinding := append([]string{"127.0.0.1"}, notGloballyReachable...)
	hooks := map[string]uuid.UUID{}
	for i, a := range append(rebinding, "") {
		name := "rebind-" + string(rune('a'+i)) + ".test"
		dns.set(name, "9.9.9.9")
		status, p, id := createWebhookAnswer(t, g, org, hostURL(name, port))
		require.Equal(t, http.StatusCreated, status, "%v", p)
		if a == "" {
			dns.set(name) // stops resolving
		} else {
			dns.set(name, a)
		}
		hooks[a] = id
	}
	w := g.NewWorker(t, "revoked", 1, org)
	res, err := g.Control.RevokeWorkerWithResponse(t.Context(), w.ID, apiclient.RevokeRequest{Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))

	lastError := func(id uuid.UUID) *string {
		res, err := g.Control.ListWebhookDeliveriesWithResponse(t.Context(), id, &apiclient.ListWebhookDeliveriesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		if len(res.JSON200.Items) != 1 || res.JSON200.Items[0].State != apiclient.WebhookDeliveryStateFailed {
			return nil
		}
		return res.JSON200.Items[0].LastError
	}
	harness.WaitFor(t, 30*time.Second, "every try recorded", func() bool {
		for _, id := range hooks {
			if lastError(id) == nil {
				return false
			}
		}
		return true
	})
	want := *lastError(hooks[""])
	for a, id := range hooks {
		require.Equal(t, want, *lastError(id), "the log of a target rebound to %q", a)
	}
	require.Zero(t, reached.Load(), "nothing reached the loopback receiver")
}
