package netfaults

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// toxicProxy is an in-process toxiproxy TCP proxy on 127.0.0.1 in front of
// a gateway: TLS passes through it untouched (the server certificate names
// 127.0.0.1), and toxics added to it hit every connection, open or new.
type toxicProxy struct {
	proxy *toxiproxy.Proxy
	// URL is the gateway's URL through the proxy.
	URL string
	// added counts the toxics ever added: the faults injected.
	added int
}

func newToxicProxy(t *testing.T, gatewayURL string) *toxicProxy {
	t.Helper()
	u, err := url.Parse(gatewayURL)
	require.NoError(t, err)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "gateway", "127.0.0.1:0", u.Host)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	tp := &toxicProxy{proxy: p, URL: "https://" + p.Listen}
	// A reset_peer toxic that never fires (toxicity 0) still makes the
	// proxy set SO_LINGER 0 on every connection it opens: each connection
	// a cut toxic closes then ends with a TCP reset, as a real reset would.
	tp.addWith(t, "linger", "reset_peer", "upstream", 0, map[string]any{"timeout": 0})
	tp.added--
	return tp
}

// add puts a toxic of type kind ("latency", cutToxicType, …) on stream
// "upstream" (worker to gateway) or "downstream" (the answers).
func (tp *toxicProxy) add(t *testing.T, name, kind, stream string, attributes map[string]any) {
	t.Helper()
	tp.addWith(t, name, kind, stream, 1, attributes)
}

func (tp *toxicProxy) addWith(t *testing.T, name, kind, stream string, toxicity float64, attributes map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes})
	require.NoError(t, err)
	_, err = tp.proxy.Toxics.AddToxicJson(bytes.NewReader(body))
	require.NoError(t, err)
	tp.added++
}

func (tp *toxicProxy) remove(t *testing.T, name string) {
	t.Helper()
	require.NoError(t, tp.proxy.Toxics.RemoveToxic(context.Background(), name))
}

// partition black-holes both directions: bytes are dropped, connections
// stay open, as when a network path silently dies.
func (tp *toxicProxy) partition(t *testing.T) {
	t.Helper()
	tp.add(t, "cut-up", cutToxicType, "upstream", map[string]any{"timeout": -1})
	tp.add(t, "cut-down", cutToxicType, "downstream", map[string]any{"timeout": -1})
}

func (tp *toxicProxy) heal(t *testing.T) {
	t.Helper()
	tp.remove(t, "cut-up")
	tp.remove(t, "cut-down")
}

// cutToxicType is a toxic of these tests: it drops every byte of its
// stream and, timeout milliseconds after the first one, closes the
// connection (0: at once; negative: never, a black hole). toxiproxy's own
// reset_peer and timeout toxics stop reading once they close a connection,
// and v2.5's link goroutines then block forever on the unread channel — a
// leak the binary's goroutine check reports; this one drains until the peer
// is gone.
const cutToxicType = "netfaults_cut"

func init() { toxics.Register(cutToxicType, new(cutToxic)) }

type cutToxic struct {
	Timeout int64 `json:"timeout"`
}

func (c *cutToxic) Pipe(stub *toxics.ToxicStub) {
	var closeAt <-chan time.Time
	for {
		select {
		case <-stub.Interrupt:
			return
		case <-closeAt:
			stub.Close()
			for range stub.Input {
			}
			return
		case chunk := <-stub.Input:
			if chunk == nil {
				stub.Close()
				return
			}
			if closeAt == nil && c.Timeout >= 0 {
				closeAt = time.After(time.Duration(c.Timeout) * time.Millisecond)
			}
		}
	}
}
