package main

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// offlineResolver is the Go resolver with no DNS server: it answers from
// /etc/hosts only, so tests never send a DNS query anywhere.
func offlineResolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS server in tests")
	}}
}

// fakeResolver answers from a map and records the names asked.
type fakeResolver struct {
	mu    sync.Mutex
	addrs map[string][]string
	asked []string
}

func (f *fakeResolver) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	f.mu.Lock()
	f.asked = append(f.asked, host)
	f.mu.Unlock()
	if host == "slow.test" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	ips, ok := f.addrs[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, ip := range ips {
		out = append(out, net.IPAddr{IP: net.ParseIP(ip)})
	}
	return out, nil
}

func TestDNSResolveLocalhost(t *testing.T) {
	c, rec := newCall(t, `{"timeout_ms": 2000}`, []string{"localhost", "127.0.0.1", "no-such-host.invalid"}, nil)
	require.NoError(t, dnsResolve(t.Context(), c, offlineResolver()))

	var hostnames, fromTarget, resolved []record
	for _, r := range records(rec) {
		require.Equal(t, "asset", r.Kind)
		switch {
		case r.Type == "hostname":
			hostnames = append(hostnames, r)
		case r.Type == "ip" && r.Details == nil:
			fromTarget = append(fromTarget, r)
		case r.Type == "ip":
			resolved = append(resolved, r)
		default:
			t.Fatalf("unexpected record %+v", r)
		}
	}
	assert.Equal(t, []record{{Kind: "asset", Type: "ip", Value: "127.0.0.1"}}, fromTarget, "an IP target is reported as is")
	require.Len(t, hostnames, 1, "the unresolvable name is not reported")
	assert.Equal(t, "localhost", hostnames[0].Value)
	require.NotEmpty(t, resolved)
	for _, r := range resolved {
		ip := net.ParseIP(r.Value)
		require.NotNil(t, ip, r.Value)
		assert.True(t, ip.IsLoopback(), "localhost resolves to loopback: %s", r.Value)
		assert.Equal(t, map[string]any{"hostname": "localhost"}, r.Details)
		assert.Contains(t, hostnames[0].Details["addresses"], r.Value)
	}
}

func TestDNSResolveTargetsAndHostnameAssets(t *testing.T) {
	res := &fakeResolver{addrs: map[string][]string{
		"a.test": {"192.0.2.10", "192.0.2.10", "2001:db8::1", "::ffff:192.0.2.11"},
		"b.test": {"198.51.100.7"},
	}}
	c, rec := newCall(t, "", []string{
		"https://A.test:8443/login", // the host of a URL
		"a.test",                    // twice: resolved once
		"[::1]",                     // an IPv6 target
		"127.0.0.1:22",              // host:port
		"10.0.0.0/8",                // neither: skipped
		"gone.test",                 // does not resolve: logged
	}, []Asset{
		{Type: "hostname", Value: "b.test."},
		{Type: "ip", Value: "203.0.113.9"}, // not a hostname asset: ignored
	})
	require.NoError(t, dnsResolve(t.Context(), c, res))

	assert.ElementsMatch(t, []string{"a.test", "gone.test", "b.test"}, res.asked)
	assert.Equal(t, []record{
		{Kind: "asset", Type: "hostname", Value: "a.test", Details: map[string]any{"addresses": []any{"192.0.2.10", "192.0.2.11", "2001:db8::1"}}},
		{Kind: "asset", Type: "hostname", Value: "b.test", Details: map[string]any{"addresses": []any{"198.51.100.7"}}},
		{Kind: "asset", Type: "ip", Value: "127.0.0.1"},
		{Kind: "asset", Type: "ip", Value: "192.0.2.10", Details: map[string]any{"hostname": "a.test"}},
		{Kind: "asset", Type: "ip", Value: "192.0.2.11", Details: map[string]any{"hostname": "a.test"}},
		{Kind: "asset", Type: "ip", Value: "198.51.100.7", Details: map[string]any{"hostname": "b.test"}},
		{Kind: "asset", Type: "ip", Value: "2001:db8::1", Details: map[string]any{"hostname": "a.test"}},
		{Kind: "asset", Type: "ip", Value: "::1"},
	}, records(rec))
	assert.Equal(t, []string{
		"hostname:a.test resolves_to ip:192.0.2.10",
		"hostname:a.test resolves_to ip:192.0.2.11",
		"hostname:a.test resolves_to ip:2001:db8::1",
		"hostname:b.test resolves_to ip:198.51.100.7",
	}, edges(rec))
}

func TestDNSResolveTimesOutPerLookupAndHonoursItsContext(t *testing.T) {
	res := &fakeResolver{addrs: map[string][]string{"a.test": {"192.0.2.1"}}}
	start := time.Now()
	c, rec := newCall(t, `{"timeout_ms": 50}`, []string{"slow.test", "a.test"}, nil)
	require.NoError(t, dnsResolve(t.Context(), c, res), "a lookup timing out is not fatal")
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Len(t, records(rec), 2)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := dnsResolve(ctx, call(t, "", []string{"slow.test"}, nil), res)
	assert.ErrorIs(t, err, context.Canceled, "a scan cut short is not a success")
}

func TestDNSResolveFailsWhenEmitFails(t *testing.T) {
	res := &fakeResolver{addrs: map[string][]string{"a.test": {"192.0.2.1"}}}
	boom := errors.New("lease lost")
	err := dnsResolve(t.Context(), failingCall(t, boom, "", []string{"a.test"}, nil), res)
	assert.ErrorIs(t, err, boom)
}

func TestDNSResolveRejectsBadInput(t *testing.T) {
	err := dnsResolve(t.Context(), call(t, `{"timeout_ms": -1}`, nil, nil), &fakeResolver{})
	assert.Equal(t, "bad-input", taskError(t, err).Code)
}

func TestHostname(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.": "example.com", "localhost": "localhost", "_srv.a-b.test": "_srv.a-b.test",
		"": "", "-a.test": "", "a..test": "", "a b": "", "10.0.0.0/8": "",
	} {
		got, ok := hostname(in)
		assert.Equal(t, want != "", ok, in)
		assert.Equal(t, want, got, in)
	}
}
