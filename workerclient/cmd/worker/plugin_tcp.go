package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// tcp-connect: connects to every port of every host, and to every explicit
// address, and reports each that accepts a TCP connection as a port asset
// "host:port", related to its host by a has_port edge. The hosts are the scan's ip assets, or its targets when it has
// none.
//
// Input: {"ports": [22, 80, 443, 8080, 8443], "timeout_ms": 1000,
// "addresses": ["host:port", …]}.

const (
	tcpDefaultTimeout = time.Second
	tcpConcurrency    = 64
	tcpMaxProbes      = 1 << 16
)

var tcpDefaultPorts = []int{22, 80, 443, 8080, 8443}

type tcpConnectInput struct {
	Ports     []int    `json:"ports"`
	TimeoutMS int      `json:"timeout_ms"`
	Addresses []string `json:"addresses"`
}

// tcpProbe is one host:port to connect to.
type tcpProbe struct {
	host string
	port int
}

func (p tcpProbe) address() string { return net.JoinHostPort(p.host, strconv.Itoa(p.port)) }

func tcpConnectPlugin(ctx context.Context, c *Call) error {
	var in tcpConnectInput
	if err := decodeInput(c, &in); err != nil {
		return err
	}
	timeout, err := timeoutInput(in.TimeoutMS, tcpDefaultTimeout)
	if err != nil {
		return err
	}
	probes, err := tcpProbes(c, in)
	if err != nil {
		return err
	}
	if len(probes) == 0 {
		c.Log.Info("nothing to connect to: no ip assets, targets or addresses")
		c.Printf("tcp-connect: nothing to connect to (no ip assets, targets or addresses)")
		return nil
	}

	c.Printf("tcp-connect: connecting to %d addresses (timeout %s)", len(probes), timeout)
	dialer := &net.Dialer{Timeout: timeout}
	var open atomic.Int64
	err = forEach(ctx, probes, tcpConcurrency, func(ctx context.Context, p tcpProbe) error {
		conn, err := dialer.DialContext(ctx, "tcp", p.address())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.Log.Debug("port closed or filtered", "address", p.address(), "error", err)
			return nil
		}
		_ = conn.Close()
		open.Add(1)
		return c.Emit(ctx, assetRecord("port", p.address(), map[string]any{"host": p.host, "port": p.port}),
			edgeRecord(hostType(p.host), p.host, apiclient.HasPort, "port", p.address()))
	})
	c.Printf("tcp-connect: %d of %d addresses accept connections", open.Load(), len(probes))
	return err
}

// tcpProbes lists the host:port pairs to try, without repeats.
func tcpProbes(c *Call, in tcpConnectInput) ([]tcpProbe, error) {
	ports := in.Ports
	if len(ports) == 0 {
		ports = tcpDefaultPorts
	}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, workerclient.Permanent("bad-input", fmt.Sprintf("port %d is outside 1..65535", p))
		}
	}
	hosts, err := ipAssetAddresses(c.Assets)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		for _, t := range c.Targets {
			if h := hostOf(t); h != "" && !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	if len(hosts)*len(ports)+len(in.Addresses) > tcpMaxProbes {
		return nil, workerclient.Permanent("bad-input",
			fmt.Sprintf("%d hosts × %d ports and %d addresses is more than %d connections",
				len(hosts), len(ports), len(in.Addresses), tcpMaxProbes))
	}

	var probes []tcpProbe
	seen := map[tcpProbe]bool{}
	add := func(p tcpProbe) {
		if !seen[p] {
			seen[p] = true
			probes = append(probes, p)
		}
	}
	for _, h := range hosts {
		for _, p := range ports {
			add(tcpProbe{host: h, port: p})
		}
	}
	for _, a := range in.Addresses {
		h, ps, err := net.SplitHostPort(a)
		p, perr := strconv.Atoi(ps)
		if err != nil || perr != nil || h == "" || p < 1 || p > 65535 {
			return nil, workerclient.Permanent("bad-input", fmt.Sprintf("address %q is not host:port", a))
		}
		add(tcpProbe{host: h, port: p})
	}
	return probes, nil
}
