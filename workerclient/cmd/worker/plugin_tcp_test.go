package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
)

// openPort listens on a loopback port until the test ends and returns it.
func openPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

func portRecord(host string, port int) record {
	return record{Kind: "asset", Type: "port", Value: net.JoinHostPort(host, strconv.Itoa(port)),
		Details: map[string]any{"host": host, "port": float64(port)}}
}

func TestTCPConnectReportsOpenPortsOfIPAssets(t *testing.T) {
	open, closed := openPort(t), closedPort(t)
	c, rec := newCall(t, fmt.Sprintf(`{"ports": [%d, %d], "timeout_ms": 1000}`, open, closed),
		[]string{"localhost"}, // ignored: there are ip assets
		[]Asset{{Type: "ip", Value: "127.0.0.1"}, {Type: "hostname", Value: "localhost"}})
	require.NoError(t, tcpConnectPlugin(t.Context(), c))
	assert.Equal(t, []record{portRecord("127.0.0.1", open)}, records(rec))
	assert.Equal(t, []string{fmt.Sprintf("ip:127.0.0.1 has_port port:127.0.0.1:%d", open)}, edges(rec))
}

func TestTCPConnectFallsBackToTargets(t *testing.T) {
	open := openPort(t)
	c, rec := newCall(t, fmt.Sprintf(`{"ports": [%d]}`, open), []string{"127.0.0.1", "http://127.0.0.1:1/"}, nil)
	require.NoError(t, tcpConnectPlugin(t.Context(), c))
	assert.Equal(t, []record{portRecord("127.0.0.1", open)}, records(rec), "one host, probed once")
}

func TestTCPConnectExplicitAddresses(t *testing.T) {
	open, closed := openPort(t), closedPort(t)
	c, rec := newCall(t, fmt.Sprintf(`{"addresses": ["127.0.0.1:%d", "127.0.0.1:%d", "127.0.0.1:%d"]}`, open, open, closed),
		nil, nil)
	require.NoError(t, tcpConnectPlugin(t.Context(), c))
	assert.Equal(t, []record{portRecord("127.0.0.1", open)}, records(rec))
}

func TestTCPConnectProbes(t *testing.T) {
	c := call(t, "", []string{"127.0.0.1"}, []Asset{{Type: "ip", Value: "::1"}, {Type: "ip", Value: "127.0.0.1"}})
	probes, err := tcpProbes(c, tcpConnectInput{Addresses: []string{"localhost:9"}})
	require.NoError(t, err)
	var addrs []string
	for _, p := range probes {
		addrs = append(addrs, p.address())
	}
	assert.Equal(t, []string{
		"[::1]:22", "[::1]:80", "[::1]:443", "[::1]:8080", "[::1]:8443",
		"127.0.0.1:22", "127.0.0.1:80", "127.0.0.1:443", "127.0.0.1:8080", "127.0.0.1:8443",
		"localhost:9",
	}, addrs, "default ports on every ip asset, then the explicit addresses")
}

func TestTCPConnectRejectsBadInput(t *testing.T) {
	for _, input := range []string{
		`{"ports": [0]}`, `{"ports": [65536]}`, `{"addresses": ["127.0.0.1"]}`, `{"addresses": ["127.0.0.1:http"]}`,
		`{"timeout_ms": 600000}`, `{"ports": "22"}`,
	} {
		err := tcpConnectPlugin(t.Context(), call(t, input, []string{"127.0.0.1"}, nil))
		te := taskError(t, err)
		assert.Equal(t, "bad-input", te.Code, input)
		assert.False(t, te.Retryable)
	}
	ports := make([]int, 65535)
	for i := range ports {
		ports[i] = i + 1
	}
	c := call(t, "", []string{"127.0.0.1", "127.0.0.2"}, nil)
	_, err := tcpProbes(c, tcpConnectInput{Ports: ports})
	assert.Equal(t, "bad-input", taskError(t, err).Code, "too many connections")
}

func TestTCPConnectHonoursItsContextAndEmitErrors(t *testing.T) {
	open := openPort(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c, rec := newCall(t, fmt.Sprintf(`{"ports": [%d]}`, open), []string{"127.0.0.1"}, nil)
	err := tcpConnectPlugin(ctx, c)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, records(rec))

	boom := fmt.Errorf("results refused")
	err = tcpConnectPlugin(t.Context(), failingCall(t, boom, fmt.Sprintf(`{"ports": [%d]}`, open), []string{"127.0.0.1"}, nil))
	assert.ErrorIs(t, err, boom)
}

func TestTCPConnectWithNothingToProbe(t *testing.T) {
	c, rec := newCall(t, "", nil, nil)
	require.NoError(t, tcpConnectPlugin(t.Context(), c))
	assert.Empty(t, rec.Records())
}

// TestTCPConnectRefusesIPAssetsThatAreNotAddresses: an ip asset is the
// address the gateway approved; a name or a numeric form a resolver would
// turn into another address ("vm", "127.1", "2130706433") is refused before
// anything is dialled.
func TestTCPConnectRefusesIPAssetsThatAreNotAddresses(t *testing.T) {
	open := openPort(t)
	for _, value := range []string{"vm", "localhost", "127.1", "2130706433", "0x7f000001", "ip6-localhost"} {
		c, rec := newCall(t, fmt.Sprintf(`{"ports": [%d]}`, open), nil, []Asset{{Type: "ip", Value: value}})
		err := tcpConnectPlugin(t.Context(), c)
		var te *workerclient.TaskError
		require.ErrorAs(t, err, &te, value)
		assert.Equal(t, "bad-input", te.Code, value)
		assert.False(t, te.Retryable, value)
		assert.Empty(t, records(rec), value)
	}
}
