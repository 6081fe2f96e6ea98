package scanscope

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
)

// TestHostAddrReadsEveryNumericForm: a host a resolver reads as an address
// is that address to the scope, in every spelling inet_aton accepts.
func TestHostAddrReadsEveryNumericForm(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"127.0.0.1":        "127.0.0.1",
		"127.1":            "127.0.0.1",
		"127.0.1":          "127.0.0.1",
		"2130706433":       "127.0.0.1",
		"0x7f000001":       "127.0.0.1",
		"0X7F000001":       "127.0.0.1",
		"0x7f.1":           "127.0.0.1",
		"0177.0.0.1":       "127.0.0.1",
		"017700000001":     "127.0.0.1",
		"127.0.0.1.":       "127.0.0.1",
		"0":                "0.0.0.0",
		"10.0x10.1":        "10.16.0.1",
		"::ffff:127.0.0.1": "127.0.0.1",
		"::ffff:7f00:1":    "127.0.0.1",
		"fe80::1%eth0":     "fe80::1",
		"::1":              "::1",
	} {
		a, ok := hostAddr(host)
		require.True(t, ok, host)
		assert.Equal(t, netip.MustParseAddr(want), a, host)
	}
	for _, host := range []string{"", "vm", "localhost", "ip6-localhost", "08", "0x", "1.2.3.4.5", "256.0.0.1",
		"1.16777216", "4294967296", "-1", "+1", "1_0", "1..2", "a.com", "0x7f000001x"} {
		_, ok := hostAddr(host)
		assert.False(t, ok, host)
	}
}

// TestScopeChecksEveryHostSpelling: a scope of 10.0.0.0/8 and a.com refuses
// loopback and single-label names in every spelling a worker could be
// handed.
func TestScopeChecksEveryHostSpelling(t *testing.T) {
	t.Parallel()
	ts := New(true, []Entry{{Kind: CIDR, Value: "10.0.0.0/8"}, {Kind: Domain, Value: "a.com"}})
	for _, target := range []string{"10.1.2.3", "012.1", "0x0a000001", "167772161", "::ffff:10.0.0.1", "[::ffff:10.0.0.1]:22",
		"http://0x0a.1/", "a.com", "A.com.:443"} {
		assert.True(t, ts.AllowsTarget(target), target)
	}
	for _, target := range []string{"vm", "intranet:22", "ip6-localhost", "localhost", "127.1", "2130706433", "0x7f000001",
		"0177.0.0.1", "http://127.1/", "http://2130706433:8080/", "::ffff:127.0.0.1", "[::1]:22", "127.0.0.1.", "::127.0.0.1"} {
		assert.False(t, ts.AllowsTarget(target), target)
	}
}

// TestInputKeysFoldAsTheWorkerDecodes: a key that Go's encoding/json would
// decode into a target field is a target key, whatever its case or
// Unicode folding; the top-level assets of a scanner payload are held by
// type.
func TestInputKeysFoldAsTheWorkerDecodes(t *testing.T) {
	t.Parallel()
	// What the reference worker's decoder makes of the folded key.
	var decoded struct {
		Addresses []string `json:"addresses"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"addreſſes": ["vm:22"]}`), &decoded))
	require.Equal(t, []string{"vm:22"}, decoded.Addresses, "encoding/json folds ſ to s")

	for payload, want := range map[string][]string{
		`{"input": {"addreſſes": ["db"]}}`:                             {"db"},
		`{"input": {"ADDRESSES": ["db"]}}`:                             {"db"},
		`{"input": {"Urls": ["x"]}}`:                                   {"x"},
		`{"input": {"hoſt": "db"}}`:                                    {"db"},
		`{"input": {"tarǧet": "db"}}`:                                  nil, // ǧ is not g under any folding
		`{"assets": [{"type": "ip", "value": "vm"}]}`:                  {"vm"},
		`{"aſſets": [{"type": "ip", "value": "vm"}]}`:                  {"vm"},
		`{"ASSETS": [{"TYPE": "port", "VALUE": "intranet:22"}]}`:       {"intranet:22", "intranet:22"},
		`{"assets": [{"type": "hostname", "value": "ip6-localhost"}]}`: {"ip6-localhost", "ip6-localhost"},
		`{"assets": [{"type": "ip", "value": "2130706433"}]}`:          {"2130706433"},
		`{"assets": [{"type": "certificate", "value": "sha256:aa"}]}`:  nil,
		`{"assets": [{"type": "technology", "value": "evil.com"}]}`:    {"evil.com", "evil.com"},
	} {
		assert.Equal(t, want, InputTargets(json.RawMessage(payload)), payload)
	}
}

// TestNetworkLocationsUnderOtherKeys: under a key not known to name targets,
// host:port with any host name and unambiguous numeric addresses are
// locations; numbers, versions and times are not.
func TestNetworkLocationsUnderOtherKeys(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]string{
		"intranet:22":    "intranet:22",
		"vm:18443":       "vm:18443",
		"0x7f000001":     "0x7f000001",
		"0177.0.0.1":     "0177.0.0.1",
		"0x7f.1:80":      "0x7f.1:80",
		"ip6-localhost":  "ip6-localhost",
		"localhost6":     "localhost6",
		"127.0.0.1":      "127.0.0.1",
		"evil.com/admin": "evil.com",
		"[::1]:22":       "[::1]:22",
	} {
		got, ok := networkLocation(s)
		require.True(t, ok, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"12:30", "2130706433", "1.2", "5.0.1", "fast", "words", "lists/words.txt", "Mozilla/5.0 (X11)", "1:2:3", "2130706433:8080"} {
		_, ok := networkLocation(s)
		assert.False(t, ok, s)
	}
}

// TestParseEntryCanonicalForms: an entry is kept in the one form targets
// compare with — names lower case in ASCII, "*." as subdomains, mapped
// IPv4 as IPv4, prefixes masked, URL prefixes normalized — and a value
// that is not of its kind is refused with a reason a client may read.
func TestParseEntryCanonicalForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind, value string
		want        string
		subdomains  bool
	}{
		{Domain, "A.com.", "a.com", false},
		{Domain, "*.Sub.org", "sub.org", true},
		{Domain, "bücher.de", "xn--bcher-kva.de", false},
		{IP, "::ffff:10.0.0.1", "10.0.0.1", false},
		{CIDR, "10.1.2.3/8", "10.0.0.0/8", false},
		{CIDR, "::ffff:192.168.0.0/112", "192.168.0.0/16", false},
		{URLPrefix, "HTTPS://App.net", "https://app.net/", false},
	} {
		got, sub, err := ParseEntry(tc.kind, tc.value, false)
		require.NoError(t, err, tc.value)
		assert.Equal(t, tc.want, got, tc.value)
		assert.Equal(t, tc.subdomains, sub, tc.value)
	}
	for _, bad := range []Entry{{Kind: Domain, Value: "a b"}, {Kind: Domain, Value: "127.1"}, {Kind: IP, Value: "fe80::1%eth0"},
		{Kind: CIDR, Value: "10.0.0.0"}, {Kind: URLPrefix, Value: "ftp://a.com/"}, {Kind: "host", Value: "a.com"}} {
		_, _, err := ParseEntry(bad.Kind, bad.Value, false)
		require.Error(t, err, bad)
		text, ok := problem.PublicText(err)
		require.True(t, ok, bad)
		assert.Contains(t, string(text), bad.Kind, bad)
	}
}
