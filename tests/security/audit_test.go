package security

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// auditReplica is a second gateway over a harness gateway's database that a
// test can stop, to see what it writes at shutdown.
type auditReplica struct {
	URL  string
	Stop func()
}

func startAuditReplica(t *testing.T, g *harness.Gateway, tune func(*server.Config)) *auditReplica {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Logger = harness.Logger()
	cfg.ValidateResponses = true
	cfg.Identity.CA = g.CA
	tune(&cfg)
	srv, err := server.New(g.Pool, cfg)
	require.NoError(t, err)
	issued, err := g.CA.IssueServer([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, g.DatabaseURL) })
	wg.Go(func() { _ = srv.Serve(ctx, ln, server.TLSConfig(cert), 5*time.Second) })
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	harness.WaitFor(t, 10*time.Second, "LISTEN connection", srv.ListenerReady)
	return &auditReplica{URL: "https://" + ln.Addr().String(), Stop: stop}
}

// clientFrom returns a client that opens a new connection (so a new source
// port) for every request, from local address ip — any 127.0.0.0/8 address
// reaches loopback — presenting cert when given.
func clientFrom(g *harness.Gateway, ip string, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: g.CAPool, MinVersion: tls.VersionTLS13}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tc, DialContext: dialer.DialContext, DisableKeepAlives: true}}
}

// refuseToken sends a well-formed but unknown API token and expects 401.
func refuseToken(t *testing.T, c *http.Client, url string) {
	t.Helper()
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	req, err := http.NewRequest(http.MethodGet, url+"/v1/organizations", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+store.APITokenPrefix+hex.EncodeToString(secret))
	res, err := c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
}

// auditRow is a security audit event with its details decoded.
type auditRow struct {
	ActorID string
	Source  string
	Kind    string
	Count   int
	Details map[string]any
}

func auditRowsOf(t *testing.T, g *harness.Gateway, action string) []auditRow {
	t.Helper()
	limit := 500
	res, err := g.Control.ListAuditEventsWithResponse(context.Background(), &apiclient.ListAuditEventsParams{Action: &action, Limit: &limit})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	var rows []auditRow
	for _, e := range res.JSON200.Items {
		var d map[string]any
		require.NotNil(t, e.Details)
		require.NoError(t, json.Unmarshal(*e.Details, &d))
		row := auditRow{Details: d}
		if e.ActorId != nil {
			row.ActorID = *e.ActorId
		}
		row.Source, _ = d["source_address"].(string)
		row.Kind, _ = d["kind"].(string)
		count, _ := d["count"].(float64)
		row.Count = int(count)
		rows = append(rows, row)
	}
	return rows
}

// countsBySource sums the counts of rows per source address.
func countsBySource(rows []auditRow) map[string]int {
	out := map[string]int{}
	for _, r := range rows {
		out[r.Source] += r.Count
	}
	return out
}

func TestAuditRefusedTokensAreCountedPerAddress(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	r := startAuditReplica(t, g, func(c *server.Config) { c.SecurityAuditWindow = time.Hour })
	client := clientFrom(g, "127.0.0.1", nil)
	for range 30 {
		refuseToken(t, client, r.URL)
	}

	rows := auditRowsOf(t, g, "security.token_refused")
	require.Len(t, rows, 1, "thirty refusals on thirty connections: one row now")
	require.Equal(t, auditRow{ActorID: "127.0.0.1", Source: "127.0.0.1", Kind: "token_refused", Count: 1,
		Details: map[string]any{"source_address": "127.0.0.1", "kind": "token_refused", "count": 1.0, "path": "/v1/organizations"}},
		rows[0], "the source address without its port")

	// The window is an hour: the count comes with the shutdown.
	r.Stop()
	rows = auditRowsOf(t, g, "security.token_refused")
	require.Len(t, rows, 2)
	require.Equal(t, map[string]int{"127.0.0.1": 30}, countsBySource(rows), "every refusal counted")
	require.Equal(t, 29, rows[0].Count)
	require.Equal(t, "token_refused", rows[0].Kind)
}

// selfSigned is a fresh self-signed client certificate no gateway knows.
func selfSigned(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestAuditUnknownCertificatesAreCountedPerAddress(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	r := startAuditReplica(t, g, func(c *server.Config) { c.SecurityAuditWindow = time.Hour })
	for i := range 10 {
		cert := selfSigned(t, fmt.Sprintf("stranger-%d", i))
		res, err := clientFrom(g, "127.0.0.1", &cert).Post(r.URL+"/v1/heartbeat", "application/json", bytes.NewReader([]byte(`{"leases": []}`)))
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	}

	rows := auditRowsOf(t, g, "security.certificate_refused")
	require.Len(t, rows, 1, "ten fresh certificates from one address: one row now")
	require.Equal(t, "127.0.0.1", rows[0].Source)
	require.Equal(t, "certificate-unknown", rows[0].Details["code"])
	require.Len(t, rows[0].ActorID, 64, "the first row names the certificate's fingerprint")

	r.Stop()
	rows = auditRowsOf(t, g, "security.certificate_refused")
	require.Len(t, rows, 2)
	require.Equal(t, map[string]int{"127.0.0.1": 10}, countsBySource(rows))
}

func TestAuditCountsAreWrittenWhenTheWindowEnds(t *testing.T) {
	t.Parallel()
	const window = 200 * time.Millisecond
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.SecurityAuditWindow = window }})
	client := clientFrom(g, "127.0.0.1", nil)
	start := time.Now()
	for range 30 {
		refuseToken(t, client, g.URL)
	}
	elapsed := time.Since(start)

	// No request and no shutdown: the count reaches the log by its timer.
	var rows []auditRow
	harness.WaitFor(t, 10*time.Second, "the counts of every refusal", func() bool {
		rows = auditRowsOf(t, g, "security.token_refused")
		return countsBySource(rows)["127.0.0.1"] == 30
	})
	// One row opens each window; at most one count row ends each.
	windows := int(elapsed/window) + 1
	require.LessOrEqual(t, len(rows), 2*windows+1, "rows bounded by windows, not by requests (%d requests in %s)", 30, elapsed)
	if 2*windows+1 < 30 {
		// Fewer windows than requests (the machine was not too slow to
		// fit several refusals in one): fewer rows than requests.
		require.Less(t, len(rows), 30)
	}
	for _, r := range rows {
		require.Equal(t, "127.0.0.1", r.Source)
		require.Positive(t, r.Count)
	}
}

func TestAuditThrottleIsBoundedAcrossAddresses(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	r := startAuditReplica(t, g, func(c *server.Config) {
		c.SecurityAuditWindow = time.Hour
		c.SecurityAuditSources = 3
	})
	for i := range 10 {
		client := clientFrom(g, fmt.Sprintf("127.0.0.%d", 10+i), nil)
		refuseToken(t, client, r.URL)
		refuseToken(t, client, r.URL)
	}

	rows := auditRowsOf(t, g, "security.token_refused")
	require.Len(t, rows, 4, "three tracked addresses and the first of the rest")
	require.Equal(t, true, rows[0].Details["overflow"])

	r.Stop()
	rows = auditRowsOf(t, g, "security.token_refused")
	total := 0
	for _, row := range rows {
		require.NotEmpty(t, row.Source, "every row names a source address")
		total += row.Count
	}
	require.Equal(t, 20, total, "refusals past the bound are counted, not lost")
	require.Equal(t, 2*10-3*2-1, countsBySource(rows)["other"], "the other addresses' refusals, together")
	require.LessOrEqual(t, len(rows), 8)
}

// TestEveryControlPlaneChangeIsAudited is generated from openapi.yaml:
// every operation that changes something (not GET) and takes a bearer
// token is called by an unscoped admin on its own organization's resources,
// and an answer of success must have left an audit row of its change. The
// rows are written by the change's own transaction (store.WithAudit), so an
// operation that forgets to declare its record, or a store verb that
// changes outside inTx, leaves none and fails here.
func TestEveryControlPlaneChangeIsAudited(t *testing.T) {
	t.Parallel()
	// Webhook targets on any host: every name the test's bodies use
	// resolves to a global address.
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Webhooks.Resolver = everyNameResolves{} }})
	spec, err := api.GetSpec()
	require.NoError(t, err)
	admin := principal{name: "unscoped-admin", roles: []string{roleReader, roleProducer, roleAdmin, roleUnscopedAdmin}, token: g.AdminToken}
	changeRows := func() int {
		var n int
		require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events
			WHERE actor_type = 'token' AND action NOT LIKE 'security.%' AND action NOT LIKE 'console.%'`).Scan(&n))
		return n
	}

	var ops []string
	audited := 0
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if method == http.MethodGet || !requiresScheme(spec, op, "bearerAuth") {
				continue
			}
			ops = append(ops, method+" "+path)
			params := append(slices.Clone(item.Parameters), op.Parameters...)
			t.Run(op.OperationID, func(t *testing.T) {
				a := newTenant(t, g, "a-"+op.OperationID)
				b := newTenant(t, g, "b-"+op.OperationID)
				grant, err := g.Control.GrantWorkerWithResponse(context.Background(), a.worker, b.org)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, grant.StatusCode(), string(grant.Body))
				if op.OperationID == "RetryTask" {
					// A retry takes a task that ended: a cancelled one.
					a.task = g.CreateTask(t, a.org, harness.TaskSpec{})
					cancel, err := g.Control.CancelTaskWithResponse(context.Background(), a.task)
					require.NoError(t, err)
					require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
				}
				slots := resourceSlots(op, params)
				before := changeRows()
				res := call(t, g, method, path, op, slots, make([]choice, len(slots)), a, b, admin)
				require.True(t, res.status >= 200 && res.status < 300, "%s %s on its own resources: %d %s", method, path, res.status, res.body)
				require.Greater(t, changeRows(), before, "%s %s changed something and left no audit row", method, path)
				audited++
			})
		}
	}
	require.Equal(t, len(ops), audited, "every changing operation was checked: %v", ops)
	require.Greater(t, audited, 30)
}

// everyNameResolves answers every host name with one global unicast
// address, so that webhook targets named in generated bodies are accepted.
type everyNameResolves struct{}

func (everyNameResolves) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("9.9.9.9")}, nil
}
