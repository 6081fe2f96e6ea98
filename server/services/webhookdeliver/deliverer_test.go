package webhookdeliver

import (
	"context"
	"encoding/base64"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSignMatchesTheSpecsVector: the example of the Standard
// Webhooks specification (its README and reference libraries).
func TestSignMatchesTheSpecsVector(t *testing.T) {
	secret, err := base64.StdEncoding.DecodeString(strings.TrimPrefix("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"))
	require.NoError(t, err)
	got := sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`), [][]byte{secret})
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)
	two := sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`), [][]byte{[]byte("new"), secret})
	require.Len(t, strings.Fields(two), 2)
	require.Equal(t, got, strings.Fields(two)[1])
}

// TestWebhookAddressAllowed: the allow-list admits globally reachable
// unicast addresses only, in every spelling; -webhooks-allow-private adds
// loopback, private and link-local ones and nothing else.
func TestWebhookAddressAllowed(t *testing.T) {
	refused := []string{"127.0.0.1", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "fe80::1",
		"fc00::1", "0.0.0.0", "::", "100.64.0.1", "::ffff:10.0.0.1", "::ffff:127.0.0.1", "224.0.0.1", "64:ff9b::a00:1",
		"64:ff9b:1::a00:1", "::127.0.0.1", "::ffff:0:7f00:1", "2002:7f00:1::", "2002:a9fe:a9fe::", "fec0::1", "240.0.0.1",
		"255.255.255.255", "192.0.2.10", "198.51.100.1", "203.0.113.9", "192.88.99.1", "198.18.0.1", "192.0.0.8",
		"2001:db8::1", "2001::1", "3fff::1", "ff02::1", "fe80::1%eth0", "100::1"}
	for _, a := range refused {
		require.False(t, addressAllowed(netip.MustParseAddr(a), false), a)
	}
	for _, a := range []string{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8", "::ffff:8.8.8.8", "2a00:1450:4001::200e"} {
		require.True(t, addressAllowed(netip.MustParseAddr(a), false), a)
	}
	for _, a := range []string{"127.0.0.1", "::1", "10.0.0.1", "192.168.1.1", "fd00::1", "::ffff:127.0.0.1", "fe80::1%eth0"} {
		require.True(t, addressAllowed(netip.MustParseAddr(a), true), a)
	}
	for _, a := range []string{"255.255.255.255", "224.0.0.1", "0.0.0.0", "::", "2002:7f00:1::", "::127.0.0.1"} {
		require.False(t, addressAllowed(netip.MustParseAddr(a), true), a)
	}
}

// mapResolver answers names from a map; a name it lacks does not resolve.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestWebhookDialRefusesLikeANameThatDoesNotResolve: on every dial a
// name that resolves to a refused address (DNS rebinding), to a mix of
// allowed and refused addresses, or not at all, fails with the one error
// the delivery log records; nothing is dialed.
func TestWebhookDialRefusesLikeANameThatDoesNotResolve(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	r := mapResolver{
		"loopback.test":  {netip.MustParseAddr("127.0.0.1")},
		"mapped.test":    {netip.MustParseAddr("::ffff:127.0.0.1")},
		"compat.test":    {netip.MustParseAddr("::127.0.0.1")},
		"sixtofour.test": {netip.MustParseAddr("2002:7f00:1::")},
		"mixed.test":     {netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("127.0.0.1")},
	}
	d := newDialer(Config{Resolver: r, Timeout: time.Second})
	for _, host := range []string{"loopback.test", "mapped.test", "compat.test", "sixtofour.test", "mixed.test", "missing.test", "127.0.0.1", "::ffff:7f00:1"} {
		conn, err := d.DialContext(t.Context(), "tcp", net.JoinHostPort(host, port))
		require.ErrorIs(t, err, ErrUndeliverableHost, host)
		require.Nil(t, conn, host)
	}
	// The development override reaches the loopback listener.
	dev := newDialer(Config{Resolver: r, Timeout: time.Second, AllowPrivate: true})
	conn, err := dev.DialContext(t.Context(), "tcp", net.JoinHostPort("loopback.test", port))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
}
