package scanscope

import (
	"net/netip"
	"strconv"
	"strings"
)

// hostAddr is the IP address a host names when a resolver reads it as one:
// a literal address (IPv6 with or without a zone, IPv4-mapped IPv6), or
// IPv4 in any of the numeric forms inet_aton accepts and getaddrinfo passes
// on — one to four parts, each decimal, octal (leading 0) or hexadecimal
// (0x), the last filling the bytes left: 127.1, 2130706433, 0x7f000001,
// 0177.0.0.1 and 127.0.0.1 all name 127.0.0.1. A trailing dot is ignored,
// as a resolver does. The address comes back without zone and unmapped, as
// scope entries hold it.
func hostAddr(host string) (netip.Addr, bool) {
	host = strings.TrimSuffix(strings.TrimSpace(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.WithZone("").Unmap(), true
	}
	return numericIPv4(host)
}

// numericIPv4 parses inet_aton's numeric IPv4 forms (see hostAddr).
func numericIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := inetAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		// The last part fills every byte not yet given.
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// inetAtonPart is one part of a numeric IPv4 address: 0x hexadecimal, 0
// octal, else decimal; no sign, no empty part.
func inetAtonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
		p, base = p[2:], 16
	case len(p) > 1 && p[0] == '0':
		p, base = p[1:], 8
	}
	if p == "" || p[0] == '+' || p[0] == '-' || strings.ContainsAny(p, "_") {
		return 0, false
	}
	n, err := strconv.ParseUint(p, base, 32)
	return n, err == nil
}

// isAmbiguousNumber says whether a string that reads as a numeric IPv4
// address (numericIPv4) is also an everyday number: plain decimal in one to
// three parts without leading zeros ("2130706433", "1.2", "5.0.1"). Under
// a key not known to name targets such a string is taken for a number or a
// version; under a target key, in a target list or as an asset's value it is
// the address it denotes.
func isAmbiguousNumber(s string) bool {
	parts := strings.Split(strings.TrimSuffix(s, "."), ".")
	if len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.ContainsFunc(p, func(r rune) bool { return r < '0' || r > '9' }) {
			return false
		}
	}
	return true
}

// loopbackNames are single-label names that resolve to loopback on common
// systems (their hosts files): a string under any key that is one of them is
// a network location.
var loopbackNames = []string{"localhost", "localhost6", "ip6-localhost", "ip6-loopback"}
