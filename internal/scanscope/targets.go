package scanscope

import (
	"bytes"
	"encoding/json"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// TaskTargets is what a task directs a worker at: for a scanner_plugin task
// everything its payload names (InputTargets: its targets, its input, the
// assets it carries); other task types scan nothing.
func TaskTargets(taskType string, payload json.RawMessage) []string {
	if taskType != "scanner_plugin" {
		return nil
	}
	return InputTargets(payload)
}

// ScanTargets is what a scan directs its workers at: its targets, the
// values of its asset targets, what its plugins' inputs name, and the
// assets its jobs found so far (AssetListTargets: each later job is handed
// them).
func ScanTargets(targets, assetTargetValues []string, inputs []json.RawMessage, found []any) []string {
	out := slices.Concat(targets, assetTargetValues)
	for _, in := range inputs {
		out = append(out, InputTargets(in)...)
	}
	return append(out, AssetListTargets(found)...)
}

// targetKeys are the keys of a plugin input whose every string names
// something to scan, a bare name too: the reference plugins' urls
// (http-probe) and addresses (tcp-connect), and the usual targets, hosts,
// host and target. A key matches as the worker's JSON decoder matches a
// field: Go's encoding/json ignores case under Unicode simple folding, so
// "ADDRESSES" and "addreſſes" (U+017F) are read as addresses, and are
// targets here too (isKey).
var targetKeys = []string{"urls", "addresses", "targets", "hosts", "host", "target"}

// isKey says whether a JSON key is read as one of names by a decoder that
// folds case as encoding/json does (strings.EqualFold: Unicode simple
// folding, the comparison encoding/json's field matching is defined by).
func isKey(key string, names ...string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(key, n) })
}

// networkAssetTypes are the asset types whose value is where a worker
// connects: an ip, hostname or domain is a host, a port or service
// host:port, a url a URL, a cidr a prefix.
var networkAssetTypes = []string{"ip", "hostname", "domain", "host", "port", "service", "url", "cidr"}

// InputTargets lists what a plugin input (or a scanner_plugin task's whole
// payload) names as targets, at any depth: every string under targetKeys,
// the value of every asset under an "assets" key (the assets a scanner
// payload carries, which the worker's plugins connect to), and under any
// other key every string — and every key — that reads as a network
// location (networkLocation). Which keys a plugin reads is the worker's
// business, so the gateway cannot rely on names alone: a target under
// "domain", "endpoint" or "upstream" is held to the scope as one under
// "targets". Keys are compared as the worker decodes them (isKey). Nothing
// when the input is not JSON.
func InputTargets(input json.RawMessage) []string {
	if len(bytes.TrimSpace(input)) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(input, &v) != nil {
		return nil
	}
	var out []string
	var walk func(v any, named bool)
	walk = func(v any, named bool) {
		switch v := v.(type) {
		case string:
			if named {
				out = append(out, v)
			} else if t, ok := networkLocation(v); ok {
				out = append(out, t)
			}
		case []any:
			for _, e := range v {
				walk(e, named)
			}
		case map[string]any:
			keys := slices.Sorted(maps.Keys(v))
			for _, k := range keys {
				// A key can name a target too ({"ports_by_host": {"a.example": [443]}}).
				if t, ok := networkLocation(k); ok {
					out = append(out, t)
				}
				if isKey(k, "assets") {
					out = append(out, AssetListTargets(v[k])...)
				}
				walk(v[k], named || isKey(k, targetKeys...))
			}
		}
	}
	walk(v, false)
	return out
}

// AssetListTargets lists the values of the assets in a list of them
// ({"type": "ip", "value": "10.0.0.1"}, …) that a worker would connect to:
// an asset of a network type (networkAssetTypes) whatever its value says —
// a single-label name, a number — and of another type when its value reads
// as a network location. An ip asset whose value is not an address is a name
// to the scope, and must be approved as one.
func AssetListTargets(list any) []string {
	items, _ := list.([]any)
	var out []string
	for _, item := range items {
		asset, ok := item.(map[string]any)
		if !ok {
			continue
		}
		var types, values []string
		for k, v := range asset {
			s, ok := v.(string)
			switch {
			case !ok:
			case isKey(k, "type"):
				types = append(types, strings.ToLower(s))
			case isKey(k, "value"):
				values = append(values, s)
			}
		}
		network := slices.ContainsFunc(types, func(t string) bool { return slices.Contains(networkAssetTypes, t) })
		for _, value := range values {
			if network {
				out = append(out, value)
			} else if t, ok := networkLocation(value); ok {
				out = append(out, t)
			}
		}
	}
	return out
}

// networkLocation says whether a string of a plugin input, under a key not
// known to name targets, reads as something a scanner could reach, and
// returns what to check: a URL (scheme://host), an IP address or prefix,
// an IPv4 address in a numeric form no number is written in (0x7f000001,
// 0177.0.0.1, 127.0.0.1 — see hostAddr), host:port for any host name (a
// single label too: "intranet:22"), a loopback name ("localhost",
// "ip6-localhost"), a DNS name of two labels or more whose last label
// starts with a letter (a TLD never is all digits: "1.2" or "5.0" is a
// version), or one of these followed by a path ("example.com/admin": its
// host). A single-label word ("fast", "common") is not one — put it under
// a target key to have it checked — and neither is a plain number
// ("2130706433", "1.2": isAmbiguousNumber) or a string with spaces. A file
// name such as "words.txt" reads as a DNS name and is held to the scope;
// "./words.txt" or "lists/words.txt" is not.
func networkLocation(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, " \t\n\r") {
		return "", false
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		return s, err != nil || u.Host != ""
	}
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return s, true
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return s, true
	}
	host, _, _ := strings.Cut(s, "/")
	if h, port, err := net.SplitHostPort(host); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return "", false
		}
		if _, ok := networkLocation(h); !ok && !isHostLabel(h) {
			return "", false
		}
		return host, true
	}
	if _, ok := hostAddr(host); ok && !isAmbiguousNumber(host) {
		return host, true
	}
	name, ok := dnsName(host)
	if !ok {
		return "", false
	}
	if slices.Contains(loopbackNames, name) {
		return host, true
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 || name[i+1] < 'a' || name[i+1] > 'z' {
		return "", false
	}
	return host, true
}

// isHostLabel says whether s is a single DNS label starting with a letter:
// before ":port" it is a host ("intranet:22"), not a time ("12:30").
func isHostLabel(s string) bool {
	name, ok := dnsName(s)
	return ok && !strings.Contains(name, ".") && name[0] >= 'a' && name[0] <= 'z'
}
