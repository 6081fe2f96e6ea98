package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Scope entries, threat exclusions and change lists through gateway ctl.
func TestCtlScopeAndExclusions(t *testing.T) {
	g := harness.Start(t)
	ctl := newAdminCtl(t, g)
	run, ok := ctl.run, ctl.ok
	org := g.NewOrganization(t, "acme").String()

	require.Contains(t, ok("scope", "list", org), "scope policy unrestricted")
	require.Regexp(t, `domain\s+example\.com\s+true`, ok("scope", "add", org, "--kind", "domain", "--value", "*.example.com", "--note", "ours"))
	list := ok("scope", "list", org)
	require.NotContains(t, list, "unrestricted")
	require.Regexp(t, `domain\s+example\.com\s+true\s+ours`, list)

	_, errOut, code := run("scans", "create", "--org", org, "--targets", "www.example.com,evil.test", "--plugins", "echo")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "target-out-of-scope")
	ok("scans", "create", "--org", org, "--targets", "www.example.com", "--plugins", "echo")
	require.Regexp(t, `acme\s+unrestricted`, ok("scope", "policy", org, "unrestricted"))
	require.Regexp(t, `acme\s+allow_list`, ok("scope", "policy", org, "allow_list"))
	require.Regexp(t, `fresh\s+allow_list`, ok("orgs", "create", "--name", "fresh"))
	require.Regexp(t, `open\s+unrestricted`, ok("orgs", "create", "--name", "open", "--scope-policy", "unrestricted"))

	out := ok("exclusions", "create", org, "--external-id", "weak-tls", "--asset-pattern", "*.example.com", "--reason", "accepted risk", "--expires", "2030-01-01T00:00:00Z")
	require.Regexp(t, `asset~\*\.example\.com external_id=weak-tls\s+accepted risk\s+2030-01-01`, out)
	require.Contains(t, ok("exclusions", "list", org), "accepted risk")
	_, errOut, code = run("exclusions", "create", org, "--external-id", "x")
	require.Equal(t, 2, code, errOut)

	require.Contains(t, ok("orgs", "exposure-changes", org, "--kind", "port_opened"), "DETECTED")
	require.Contains(t, ok("orgs", "threats", org, "--include-excluded"), "SEVERITY")
	require.Contains(t, ok("orgs", "asset-edges", org), "RELATION")
	var scans apiclient.ScanList
	require.NoError(t, json.Unmarshal([]byte(ok("scans", "list", "--org", org, "--json")), &scans))
	require.Contains(t, ok("scans", "changes", scans.Items[0].Id.String(), "--since", "2020-01-01T00:00:00Z"), "DETECTED")

	// The organization's id comes first, the object's second; either
	// malformed is a usage error naming which.
	for args, want := range map[[3]string]string{
		{"scope", "remove", "nope"}:      `bad organization id "nope"`,
		{"scope", "remove", org}:         `bad scope entry id "x"`,
		{"exclusions", "delete", org}:    `bad exclusion id "x"`,
		{"exclusions", "delete", "nope"}: `bad organization id "nope"`,
	} {
		_, errOut, code := run(args[0], args[1], args[2], "x")
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, want)
	}

	var exclusions apiclient.ThreatExclusionList
	require.NoError(t, json.Unmarshal([]byte(ok("exclusions", "list", org, "--json")), &exclusions))
	require.Contains(t, ok("exclusions", "delete", org, exclusions.Items[0].Id.String()), "accepted risk")
	var scope apiclient.ScopeTargetList
	require.NoError(t, json.Unmarshal([]byte(ok("scope", "list", org, "--json")), &scope))
	require.Contains(t, ok("scope", "remove", org, scope.Items[0].Id.String()), "example.com")
	require.NotContains(t, ok("scope", "list", org), "example.com")
}
