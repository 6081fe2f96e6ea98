package scanscope

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/idna"

	"github.com/worker-gateway/gateway/problem"
)

// Entry kinds.
const (
	Domain    = "domain"
	IP        = "ip"
	CIDR      = "cidr"
	URLPrefix = "url_prefix"
)

// Entry is one approved target, in its canonical form (ParseEntry).
type Entry struct {
	Kind              string
	Value             string
	IncludeSubdomains bool
}

// ParseEntry checks an entry and returns its canonical value and whether it
// includes subdomains ("*.example.com" does). A refusal is a problem.Public
// error naming the entry and why, for the caller to file under its own
// "invalid" kind.
func ParseEntry(kind, value string, includeSubdomains bool) (string, bool, error) {
	value = strings.TrimSpace(value)
	bad := func(why string) (string, bool, error) {
		return "", false, problem.Public(problem.Text(fmt.Sprintf("scope %s %q: %s", kind, value, why)))
	}
	switch kind {
	case Domain:
		if rest, ok := strings.CutPrefix(value, "*."); ok {
			value, includeSubdomains = rest, true
		}
		name, ok := dnsName(value)
		if !ok {
			return bad("not a DNS name")
		}
		if _, isAddr := hostAddr(name); isAddr {
			return bad("an IP address in numeric form; use kind ip")
		}
		return name, includeSubdomains, nil
	case IP:
		addr, err := netip.ParseAddr(value)
		if err != nil || addr.Zone() != "" {
			return bad("not an IP address")
		}
		return addr.Unmap().String(), false, nil
	case CIDR:
		p, err := netip.ParsePrefix(value)
		if err != nil || p.Addr().Zone() != "" {
			return bad("not a CIDR prefix")
		}
		return unmapPrefix(p).String(), false, nil
	case URLPrefix:
		u, err := url.Parse(value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("not an http or https URL")
		}
		return NormalizeAssetValue("url", value), false, nil
	}
	return bad("kind must be domain, ip, cidr or url_prefix")
}

// dnsName is value as a DNS name (lower case, no trailing dot; an
// internationalized name in its ASCII "xn--" form, so both spellings match
// the same entry).
func dnsName(value string) (string, bool) {
	name := strings.TrimSuffix(strings.ToLower(value), ".")
	if strings.ContainsFunc(name, func(r rune) bool { return r >= 0x80 }) {
		ascii, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", false
		}
		name = ascii
	}
	if name == "" || len(name) > 253 {
		return "", false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
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

// unmapPrefix is p masked, and an IPv4-mapped IPv6 prefix no wider than
// the mapped space as the IPv4 prefix it is (::ffff:10.0.0.0/104 is
// 10.0.0.0/8), so its bits compare with IPv4 entries'.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}
