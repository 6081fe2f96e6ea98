package store_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestScopeMatchingEdges: how targets match scope entries at the edges —
// case and trailing dots, internationalized names, IPv6 and IPv4-mapped
// IPv6, host:port, URL prefixes at path, host and port boundaries.
func TestScopeMatchingEdges(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	for _, e := range []store.ScopeTargetParams{
		{Kind: store.ScopeDomain, Value: "a.com"},
		{Kind: store.ScopeDomain, Value: "*.sub.org"},
		{Kind: store.ScopeDomain, Value: "bücher.de"}, // entered in Unicode
		{Kind: store.ScopeCIDR, Value: "10.0.0.0/8"},
		{Kind: store.ScopeCIDR, Value: "::ffff:192.168.0.0/112"},
		{Kind: store.ScopeIP, Value: "2001:db8::1"},
		{Kind: store.ScopeURLPrefix, Value: "https://app.net/app"},
	} {
		_, _, err := s.AddScopeTarget(ctx, every, b.org.ID, e)
		require.NoError(t, err, e.Value)
	}
	entries, _, _, err := s.ListScopeTargets(ctx, every, b.org.ID, nil, 100)
	require.NoError(t, err)
	var values []string
	for _, e := range entries {
		values = append(values, e.Value)
	}
	require.Contains(t, values, "xn--bcher-kva.de", "an internationalized name is kept in its ASCII form")
	require.Contains(t, values, "192.168.0.0/16", "an IPv4-mapped prefix is kept as the IPv4 prefix it is")

	inScope := []string{"A.COM.", "a.com:8443", "2001:db8::1", "[2001:db8::1]:443", "https://[2001:db8::1]/",
		"::ffff:10.1.2.3", "::ffff:10.0.0.0/104", "10.2.0.0/16", "http://10.2.3.4:8080/x", "192.168.3.4", "::ffff:192.168.3.4",
		"sub.org", "x.Sub.org", "xn--bcher-kva.de", "BÜCHER.de",
		"https://app.net/app", "https://app.net/app/", "https://APP.net/app?x=1", "https://app.net/app/login"}
	for _, target := range inScope {
		_, _, err := s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID, Targets: []string{target},
			Plugins: []store.ScanPlugin{{Name: "echo"}}})
		require.NoError(t, err, target)
	}
	outside := []string{"www.a.com", "a.com.evil.com", "evil.com:443", "2001:db8::2", "[2001:db8::2]:443",
		"::ffff:0.0.0.0/96", "::ffff:10.0.0.0/96", "::ffff:10.0.0.0/103", "10.0.0.0/7", "::ffff:11.0.0.1", "192.169.0.1",
		"https://app.net/apple", "https://app.net.evil.com/app", "https://app.net@evil.com/app", "https://app.net:8443/app",
		"http://app.net/app", "https://app.net/app/../admin", "https://app.net/app/%2e%2e/admin", "bucher.de", "ftp://a.b c"}
	for _, target := range outside {
		_, _, err := s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID, Targets: []string{target},
			Plugins: []store.ScanPlugin{{Name: "echo"}}})
		require.ErrorIs(t, err, store.ErrOutOfScope, target)
	}
}

// TestPluginInputsCannotSmuggleTargets: a plugin input names targets under
// any key, at any depth; every string that reads as a network location is
// held to the scope, whatever key holds it. Other strings (words, versions,
// paths, user agents) are not targets.
func TestPluginInputsCannotSmuggleTargets(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	_, _, err := s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "a.com"})
	require.NoError(t, err)
	_, _, err = s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeCIDR, Value: "10.0.0.0/8"})
	require.NoError(t, err)
	scanWith := func(input string) error {
		_, _, err := s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID, Targets: []string{"a.com"},
			Plugins: []store.ScanPlugin{{Name: "custom", Input: json.RawMessage(input)}}})
		return err
	}

	var oos *store.OutOfScopeError
	for input, named := range map[string][]string{
		`{"domain": "evil.com"}`:                                {"evil.com"},
		`{"config": {"upstream": "https://evil.com/x"}}`:        {"https://evil.com/x"},
		`{"list": ["10.1.1.1:22", "11.1.1.1:22"]}`:              {"11.1.1.1:22"},
		`{"endpoint": "evil.com/admin"}`:                        {"evil.com"},
		`{"resolver": "8.8.8.8", "zone": "A.com."}`:             {"8.8.8.8"},
		`{"net": "::ffff:11.0.0.0/104"}`:                        {"::ffff:11.0.0.0/104"},
		`{"Host": "intranet"}`:                                  {"intranet"},
		`{"probe": {"via": [{"address": "localhost:8080"}]}}`:   {"localhost:8080"},
		`{"ports_by_host": {"evil.com": [443], "a.com": [80]}}`: {"evil.com"},
	} {
		err := scanWith(input)
		require.ErrorAs(t, err, &oos, input)
		require.Equal(t, named, oos.Targets, input)
	}
	require.NoError(t, scanWith(`{"mode": "fast", "version": "1.2", "wordlist": "lists/words.txt", "ports": [22, 443],
		"timeout": "2.5", "ua": "Mozilla/5.0 (X11; Linux)", "time": "12:30", "domain": "a.com.", "path": "/admin",
		"header": "X-Forwarded-For: 11.1.1.1", "subnet": "10.9.0.0/16"}`))

	// A scanner_plugin task's payload is held to the scope the same way,
	// the assets it carries too.
	_, _, err = s.CreateTask(ctx, every, store.CreateTaskParams{OrganizationID: b.org.ID, TaskType: "scanner_plugin",
		Payload: json.RawMessage(`{"plugin": "custom", "input": {}, "assets": [{"type": "ip", "value": "11.1.1.1"}]}`)})
	require.ErrorAs(t, err, &oos)
	require.Equal(t, []string{"11.1.1.1"}, oos.Targets)
}

// TestOutOfScopeAssetsOfOtherTypes: an asset of a type the gateway does not
// know is held to the scope when its value reads as a network location; a
// certificate's fingerprint or a technology is not one.
func TestOutOfScopeAssetsOfOtherTypes(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	_, _, err := s.AddScopeTarget(t.Context(), store.EveryOrganization(), b.org.ID, store.ScopeTargetParams{Kind: store.ScopeCIDR, Value: "127.0.0.0/8"})
	require.NoError(t, err)
	createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "custom")
	l := acquireOne(t, s, b.worker.ID)
	info := sendBatch(t, s, refOf(b.worker.ID, l), 1, "k1",
		asset("service", "127.0.0.1:443", ""),
		asset("service", "evil.example:443", ""),
		asset("cidr", "10.0.0.0/8", ""),
		asset("certificate", "sha256:aa", ""),
		asset("technology", "nginx/1.18", ""),
	)
	require.Equal(t, 3, info.Assets)
	require.Equal(t, 2, info.OutOfScope)
	var outside int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM assets WHERE organization_id = $1
		AND normalized_value IN ('evil.example:443', '10.0.0.0/8')`, b.org.ID).Scan(&outside))
	require.Zero(t, outside, "never an asset of the organization")
}
