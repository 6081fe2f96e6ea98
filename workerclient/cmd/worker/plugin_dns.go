package main

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// dns-resolve: resolves the hostnames among the targets and the scan's
// hostname assets, and reports each as a hostname asset with one ip asset per
// address, each related to it by a resolves_to edge. Targets that are IP addresses are reported as ip assets directly.
// A name that does not resolve is logged, not an error.
//
// Input: {"timeout_ms": 5000} (per lookup).

const (
	dnsDefaultTimeout = 5 * time.Second
	dnsConcurrency    = 16
)

type dnsResolveInput struct {
	TimeoutMS int `json:"timeout_ms"`
}

// ipResolver is what dns-resolve needs of a *net.Resolver.
type ipResolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

func dnsResolvePlugin(ctx context.Context, c *Call) error {
	return dnsResolve(ctx, c, net.DefaultResolver)
}

func dnsResolve(ctx context.Context, c *Call, resolver ipResolver) error {
	var in dnsResolveInput
	if err := decodeInput(c, &in); err != nil {
		return err
	}
	timeout, err := timeoutInput(in.TimeoutMS, dnsDefaultTimeout)
	if err != nil {
		return err
	}

	var names []string
	var ips []apiclient.ResultRecord
	seenIP := map[netip.Addr]bool{}
	for _, t := range append(slices.Clone(c.Targets), assetValues(c.Assets, "hostname")...) {
		host := hostOf(t)
		if addr, err := netip.ParseAddr(host); err == nil {
			addr = addr.WithZone("").Unmap()
			if !seenIP[addr] {
				seenIP[addr] = true
				ips = append(ips, assetRecord("ip", addr.String(), nil))
			}
			continue
		}
		name, ok := hostname(host)
		if !ok {
			c.Log.Info("not a hostname or an IP address; skipped", "target", t)
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	c.Printf("dns-resolve: %d IP address targets, %d hostnames to resolve (timeout %s per lookup)",
		len(ips), len(names), timeout)
	if len(ips) > 0 {
		if err := c.Emit(ctx, ips...); err != nil {
			return err
		}
	}

	var resolved atomic.Int64
	err = forEach(ctx, names, dnsConcurrency, func(ctx context.Context, name string) error {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		addrs, err := resolver.LookupIPAddr(lctx, name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.Log.Info("hostname does not resolve", "hostname", name, "error", err)
			return nil
		}
		var found []netip.Addr
		for _, a := range addrs {
			if addr, ok := netip.AddrFromSlice(a.IP); ok {
				if addr = addr.Unmap(); !slices.Contains(found, addr) {
					found = append(found, addr)
				}
			}
		}
		if len(found) == 0 {
			c.Log.Info("hostname has no address", "hostname", name)
			return nil
		}
		slices.SortFunc(found, netip.Addr.Compare)
		addresses := make([]string, len(found))
		for i, a := range found {
			addresses[i] = a.String()
		}
		recs := []apiclient.ResultRecord{assetRecord("hostname", name, map[string]any{"addresses": addresses})}
		for _, a := range addresses {
			recs = append(recs, assetRecord("ip", a, map[string]any{"hostname": name}),
				edgeRecord("hostname", name, apiclient.ResolvesTo, "ip", a))
		}
		resolved.Add(1)
		return c.Emit(ctx, recs...)
	})
	c.Printf("dns-resolve: %d of %d hostnames resolved", resolved.Load(), len(names))
	return err
}

// hostname returns host as a DNS name (lower case, without a trailing dot),
// or false when it is not one.
func hostname(host string) (string, bool) {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "" || len(name) > 253 {
		return "", false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "", false
			}
		}
	}
	return name, true
}
