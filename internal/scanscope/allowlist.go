package scanscope

import (
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// AllowList is an organization's scan scope, ready to match: when it is
// enforced, a target is in scope only if an entry covers it; when it is
// not (an unrestricted organization), everything is.
type AllowList struct {
	enforced    bool
	domains     []domainRule
	prefixes    []netip.Prefix
	urlPrefixes []string
}

type domainRule struct {
	name       string
	subdomains bool
}

// New builds the allow-list from canonical entries (as ParseEntry made
// them); an entry it cannot read is left out, so it allows nothing.
func New(enforced bool, entries []Entry) AllowList {
	al := AllowList{enforced: enforced}
	for _, e := range entries {
		switch e.Kind {
		case Domain:
			al.domains = append(al.domains, domainRule{name: e.Value, subdomains: e.IncludeSubdomains})
		case IP:
			if a, err := netip.ParseAddr(e.Value); err == nil {
				al.prefixes = append(al.prefixes, netip.PrefixFrom(a, a.BitLen()))
			}
		case CIDR:
			if p, err := netip.ParsePrefix(e.Value); err == nil {
				al.prefixes = append(al.prefixes, p)
			}
		case URLPrefix:
			al.urlPrefixes = append(al.urlPrefixes, e.Value)
		}
	}
	return al
}

// Enforced says whether the list restricts anything.
func (al AllowList) Enforced() bool { return al.enforced }

func (al AllowList) allowsAddr(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return slices.ContainsFunc(al.prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}

// allowsHost: a hostname or an address in scope. A host that a resolver
// reads as an address in any spelling (hostAddr: 127.1, 2130706433,
// 0x7f000001, 0177.0.0.1) is that address; any other, a single label too
// ("vm", "intranet"), is a name that a domain entry must name.
func (al AllowList) allowsHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, ok := hostAddr(host); ok {
		return al.allowsAddr(a)
	}
	name, ok := dnsName(host)
	if !ok {
		return false
	}
	return slices.ContainsFunc(al.domains, func(d domainRule) bool {
		return name == d.name || d.subdomains && strings.HasSuffix(name, "."+d.name)
	})
}

// allowsURL: a url_prefix covers the URL, or its host is in scope.
func (al AllowList) allowsURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	norm := NormalizeAssetValue("url", raw)
	// "/app/../admin" starts with "/app/" but is /admin on the server.
	prefixes := al.urlPrefixes
	if slices.ContainsFunc(strings.Split(u.Path, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		prefixes = nil
	}
	for _, p := range prefixes {
		if norm == p || strings.HasPrefix(norm, p) && (strings.HasSuffix(p, "/") || strings.ContainsRune("/?#", rune(norm[len(p)]))) {
			return true
		}
	}
	return al.allowsHost(u.Hostname())
}

// AllowsTarget says whether a scan target (hostname, address, CIDR,
// host:port, URL) is in scope. Everything is when the list is not enforced.
func (al AllowList) AllowsTarget(t string) bool {
	if !al.enforced {
		return true
	}
	t = strings.TrimSpace(t)
	if strings.Contains(t, "://") {
		return al.allowsURL(t)
	}
	if p, err := netip.ParsePrefix(t); err == nil {
		p = unmapPrefix(p)
		return slices.ContainsFunc(al.prefixes, func(e netip.Prefix) bool {
			return e.Bits() <= p.Bits() && e.Contains(p.Addr())
		})
	}
	if host, _, err := net.SplitHostPort(t); err == nil {
		return al.allowsHost(host)
	}
	return al.allowsHost(t)
}

// AllowsAsset says whether an asset a worker reports is in scope. An asset
// of another type is held to the scope when its value reads as a network
// location (a "service" evil.example:443, a "cidr"); one without (a
// certificate's fingerprint, a technology, an e-mail address) is in scope:
// it is found on something in scope.
func (al AllowList) AllowsAsset(typ, value string) bool {
	if !al.enforced {
		return true
	}
	switch typ {
	case "hostname", "domain", "ip":
		return al.allowsHost(value)
	case "port":
		host, _, err := net.SplitHostPort(value)
		return err == nil && al.allowsHost(host)
	case "url":
		return al.allowsURL(value)
	}
	if t, ok := networkLocation(value); ok {
		return al.AllowsTarget(t)
	}
	return true
}

// OutOfScope lists the targets outside scope, each once; nil when all are
// in.
func (al AllowList) OutOfScope(targets []string) []string {
	var out []string
	for _, t := range targets {
		if !al.AllowsTarget(t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
