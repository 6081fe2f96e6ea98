package scanscope

import (
	"net"
	"net/url"
	"strings"
)

// NormalizeAssetValue is the canonical form assets deduplicate by:
// hostnames lowercased without a trailing dot, IP addresses in their
// canonical text form, URLs with lowercased scheme and host, host:port pairs
// with a normalised host; anything else trimmed. url_prefix entries are
// kept, and URLs compared with them, in this form.
func NormalizeAssetValue(assetType, value string) string {
	value = strings.TrimSpace(value)
	switch assetType {
	case "hostname", "domain":
		return strings.TrimSuffix(strings.ToLower(value), ".")
	case "ip":
		if ip := net.ParseIP(value); ip != nil {
			return ip.String()
		}
	case "port":
		if host, port, err := net.SplitHostPort(value); err == nil {
			if ip := net.ParseIP(host); ip != nil {
				host = ip.String()
			} else {
				host = strings.TrimSuffix(strings.ToLower(host), ".")
			}
			return net.JoinHostPort(host, port)
		}
	case "url":
		if u, err := url.Parse(value); err == nil && u.Host != "" {
			u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
			if u.Path == "" {
				u.Path = "/"
			}
			return u.String()
		}
	}
	return value
}
