// Package scanscope decides, without a database, what an organization's scan
// scope allows: it parses scope entries (DNS names, addresses, CIDR prefixes,
// URL prefixes), matches targets and assets against them in every spelling a
// resolver or a worker would read, and finds what a task's payload or a
// scan's plugin inputs direct a worker at.
//
// The scan scope is the list of targets an organization is approved to scan
// (not the tenant a store caller acts for, nor an API token's permissions).
// Reading it, locking it and refusing work outside it are the store's
// (store/targetscope.go); this package holds only the rules.
//
// Entry kinds:
//   - domain: a DNS name, and with subdomains every name under it
//     ("*.example.com" is example.com with subdomains);
//   - ip and cidr: an address, or every address of a prefix;
//   - url_prefix: URLs that start with it (at a path boundary).
//
// A scan target is in scope when its host is (a URL's host, a host:port's
// host, a hostname, an address; a CIDR target when an entry contains the
// whole prefix), or, for a URL, when a url_prefix entry covers it. A
// url_prefix entry covers URLs only: it does not let the host itself be
// port-scanned; nor does it cover a URL whose path has "." or ".."
// segments. Names compare lower case, without a trailing dot, in their
// ASCII (xn--) form; a host a resolver reads as an address in any spelling
// (hostAddr: 127.1, 2130706433, 0x7f000001) compares as that address, and
// IPv4-mapped IPv6 addresses and prefixes as IPv4. What plugin inputs name
// is found by InputTargets.
package scanscope
