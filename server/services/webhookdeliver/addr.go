package webhookdeliver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Where webhooks may go: one decision (hostAddrs, built on
// addressAllowed), taken when a target is created or changed
// (Config.CheckHost) and again on every dial, so a name that resolved to a
// public address then and to an internal one now (DNS rebinding) is
// refused.

// ErrUndeliverableHost is the one answer for a host the gateway will not
// deliver to, whatever the reason: it does not resolve, or it resolves to
// an address that is not globally reachable. Telling those apart would let
// an organization probe the gateway's DNS and network (an oracle).
var ErrUndeliverableHost = errors.New("the target's host does not resolve to a public address the gateway delivers to")

// Resolver resolves a target's host name; *net.Resolver is one. Tests
// give the gateway their own to map names to any address.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// lookupTimeout bounds a creation-time lookup; a dial's lookup is bounded
// by the try's timeout.
const lookupTimeout = 5 * time.Second

// CheckHost answers ErrUndeliverableHost when webhooks may not go to host
// (a target's, when it is created or changed): the decision every dial
// takes again.
func (c Config) CheckHost(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	_, err := hostAddrs(ctx, c.Resolver, host, c.AllowPrivate)
	return err
}

// hostAddrs resolves a target's host (an IP literal in any of its
// spellings, or a name) and answers its addresses only when every one of
// them is allowed; otherwise ErrUndeliverableHost, whether the name did
// not resolve or resolved to a refused address.
func hostAddrs(ctx context.Context, r Resolver, host string, allowPrivate bool) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if r == nil {
			r = net.DefaultResolver
		}
		addrs, err = r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, ErrUndeliverableHost
		}
	}
	if len(addrs) == 0 {
		return nil, ErrUndeliverableHost
	}
	for i, a := range addrs {
		if !addressAllowed(a, allowPrivate) {
			return nil, ErrUndeliverableHost
		}
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// addressAllowed is the allow-list: a webhook may reach a globally
// reachable unicast address (the IANA special-purpose address registries)
// and nothing else. allowPrivate (-webhooks-allow-private, for development
// and tests) adds loopback, private and link-local unicast addresses.
//
// Every spelling is normalised first: an IPv4-mapped IPv6 address is
// judged as its IPv4 address. The IPv6 forms that carry or reach an IPv4
// address some other way (IPv4-compatible ::/96, IPv4-translated
// ::ffff:0:0:0/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16, Teredo in 2001::/23) are refused whole.
func addressAllowed(a netip.Addr, allowPrivate bool) bool {
	a = a.Unmap()
	if !a.IsValid() {
		return false
	}
	if allowPrivate && (a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast()) {
		return true
	}
	if a.Zone() != "" {
		return false // only link-local addresses take a zone
	}
	if a.Is4() {
		for _, p := range refusedIPv4 {
			if p.Contains(a) {
				return false
			}
		}
		return true
	}
	if !globalUnicastIPv6.Contains(a) {
		return false
	}
	for _, p := range refusedIPv6 {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// refusedIPv4 is every IPv4 range the IANA IPv4 Special-Purpose Address
// Registry does not mark globally reachable, plus multicast and the
// reserved 240/4 (which holds the limited broadcast address).
var refusedIPv4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),      // private
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local (cloud metadata)
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255
}

// globalUnicastIPv6 is the IPv6 global unicast space; everything outside
// it (loopback, unspecified, mapped, compatible and translated IPv4, NAT64,
// discard, unique local, site-local, link-local, multicast) is refused.
var globalUnicastIPv6 = netip.MustParsePrefix("2000::/3")

// refusedIPv6 are the special-purpose ranges inside 2000::/3.
var refusedIPv6 = []netip.Prefix{
	netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments: Teredo, ORCHID, benchmarking, …
	netip.MustParsePrefix("2001:db8::/32"), // documentation
	netip.MustParsePrefix("2002::/16"),     // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("3fff::/20"),     // documentation
}

// dialer dials a target: it resolves the host itself, through
// hostAddrs, and connects to the addresses that decision returned,
// one after the other. The net.Dialer's Control hook checks each address
// actually connected to once more, so no path dials an address the
// allow-list refuses.
type dialer struct {
	resolver     Resolver
	allowPrivate bool
	dialer       *net.Dialer
}

func newDialer(cfg Config) *dialer {
	d := &dialer{resolver: cfg.Resolver, allowPrivate: cfg.AllowPrivate, dialer: &net.Dialer{Timeout: cfg.Timeout}}
	d.dialer.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !addressAllowed(ap.Addr(), d.allowPrivate) {
			return ErrUndeliverableHost
		}
		return nil
	}
	return d
}

// DialContext is the http.Transport's dial.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, ErrUndeliverableHost
	}
	addrs, err := hostAddrs(ctx, d.resolver, host, d.allowPrivate)
	if err != nil {
		return nil, err
	}
	var first error
	for _, a := range addrs {
		conn, err := d.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}
