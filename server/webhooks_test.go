package server

import (
	"encoding/base64"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSignWebhookMatchesTheSpecsVector: the example of the Standard
// Webhooks specification (its README and reference libraries).
func TestSignWebhookMatchesTheSpecsVector(t *testing.T) {
	secret, err := base64.StdEncoding.DecodeString(strings.TrimPrefix("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"))
	require.NoError(t, err)
	got := signWebhook("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`), [][]byte{secret})
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)
	two := signWebhook("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`), [][]byte{[]byte("new"), secret})
	require.Len(t, strings.Fields(two), 2)
	require.Equal(t, got, strings.Fields(two)[1])
}

func TestWebhookAddressAllowed(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "fe80::1",
		"fc00::1", "0.0.0.0", "::", "100.64.0.1", "::ffff:10.0.0.1", "::ffff:127.0.0.1", "224.0.0.1", "64:ff9b::a00:1"} {
		require.False(t, webhookAddressAllowed(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8", "192.0.2.10"} {
		require.True(t, webhookAddressAllowed(netip.MustParseAddr(a)), a)
	}
}
