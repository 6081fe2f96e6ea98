package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/net/idna"

	"github.com/worker-gateway/gateway/problem"
)

// An organization's scan scope is the list of targets it is approved to
// scan (not to be confused with Scope, the tenant a caller acts for). It is
// enforced from the organization's first entry on, and stays enforced when
// every entry is removed: then nothing may be scanned. An organization that
// never had an entry scans freely, as before scopes existed.
//
// Entry kinds:
//   - domain: a DNS name, and with IncludeSubdomains every name under it
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
// ASCII (xn--) form; IPv4-mapped IPv6 addresses and prefixes as IPv4. What
// plugin inputs name is found by inputTargets.

// Scope target kinds.
const (
	ScopeDomain    = "domain"
	ScopeIP        = "ip"
	ScopeCIDR      = "cidr"
	ScopeURLPrefix = "url_prefix"
)

// OutOfScopeError lists the targets of a scan that lie outside scope.
type OutOfScopeError struct{ Targets []string }

func (e *OutOfScopeError) Error() string {
	return fmt.Sprintf("%v: %s", ErrOutOfScope, strings.Join(e.Targets, ", "))
}

// Is makes errors.Is(err, ErrOutOfScope) hold.
func (e *OutOfScopeError) Is(target error) bool { return target == ErrOutOfScope }

// ScopeTarget is one entry of an organization's scan scope.
type ScopeTarget struct {
	ID                uuid.UUID
	OrganizationID    uuid.UUID
	Kind              string
	Value             string
	IncludeSubdomains bool
	Note              string
	CreatedAt         time.Time
}

// ScopeTargetParams is a new scope entry.
type ScopeTargetParams struct {
	Kind              string
	Value             string
	IncludeSubdomains bool
	Note              string
	// TokenID is the API token that adds it (audit).
	TokenID *uuid.UUID
}

// ParseScopeTarget checks an entry and returns its canonical value and
// whether it includes subdomains ("*.example.com" does).
func ParseScopeTarget(kind, value string, includeSubdomains bool) (string, bool, error) {
	value = strings.TrimSpace(value)
	bad := func(why string) (string, bool, error) {
		return "", false, problem.Wrap(ErrInvalid, problem.Text(fmt.Sprintf("scope %s %q: %s", kind, value, why)))
	}
	switch kind {
	case ScopeDomain:
		if rest, ok := strings.CutPrefix(value, "*."); ok {
			value, includeSubdomains = rest, true
		}
		name, ok := dnsName(value)
		if !ok {
			return bad("not a DNS name")
		}
		return name, includeSubdomains, nil
	case ScopeIP:
		addr, err := netip.ParseAddr(value)
		if err != nil || addr.Zone() != "" {
			return bad("not an IP address")
		}
		return addr.Unmap().String(), false, nil
	case ScopeCIDR:
		p, err := netip.ParsePrefix(value)
		if err != nil || p.Addr().Zone() != "" {
			return bad("not a CIDR prefix")
		}
		return unmapPrefix(p).String(), false, nil
	case ScopeURLPrefix:
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

// targetScope decides what is in an organization's scan scope.
type targetScope struct {
	enforced    bool
	domains     []domainRule
	prefixes    []netip.Prefix
	urlPrefixes []string
}

type domainRule struct {
	name       string
	subdomains bool
}

// newTargetScope builds the scope from its entries, as scopeEntriesSQL
// encodes them ("kind|t|value", t for subdomains).
func newTargetScope(enforced bool, entries []string) targetScope {
	ts := targetScope{enforced: enforced}
	for _, e := range entries {
		kind, rest, _ := strings.Cut(e, "|")
		sub, value, _ := strings.Cut(rest, "|")
		switch kind {
		case ScopeDomain:
			ts.domains = append(ts.domains, domainRule{name: value, subdomains: sub == "t"})
		case ScopeIP:
			if a, err := netip.ParseAddr(value); err == nil {
				ts.prefixes = append(ts.prefixes, netip.PrefixFrom(a, a.BitLen()))
			}
		case ScopeCIDR:
			if p, err := netip.ParsePrefix(value); err == nil {
				ts.prefixes = append(ts.prefixes, p)
			}
		case ScopeURLPrefix:
			ts.urlPrefixes = append(ts.urlPrefixes, value)
		}
	}
	return ts
}

// scopeEntriesSQL selects an organization's scope as (enforced, entries)
// for newTargetScope; entries only when enforced. org is an SQL expression.
func scopeEntriesSQL(org string) string {
	return `(SELECT o.scope_enforced FROM organizations o WHERE o.id = ` + org + `),
		CASE WHEN (SELECT o.scope_enforced FROM organizations o WHERE o.id = ` + org + `) THEN
			ARRAY(SELECT st.kind || '|' || CASE WHEN st.include_subdomains THEN 't' ELSE 'f' END || '|' || st.value
				FROM scope_targets st WHERE st.organization_id = ` + org + `) END`
}

func loadTargetScope(ctx context.Context, ex executor, org uuid.UUID) (targetScope, error) {
	var enforced *bool
	var entries []string
	if err := ex.QueryRow(ctx, `SELECT `+scopeEntriesSQL("$1"), org).Scan(&enforced, &entries); err != nil {
		return targetScope{}, fmt.Errorf("read scan scope: %w", err)
	}
	return newTargetScope(enforced != nil && *enforced, entries), nil
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

func (ts targetScope) allowsAddr(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return slices.ContainsFunc(ts.prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}

// allowsHost: a hostname or an address in scope.
func (ts targetScope) allowsHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return ts.allowsAddr(a)
	}
	name, ok := dnsName(host)
	if !ok {
		return false
	}
	return slices.ContainsFunc(ts.domains, func(d domainRule) bool {
		return name == d.name || d.subdomains && strings.HasSuffix(name, "."+d.name)
	})
}

// allowsURL: a url_prefix covers the URL, or its host is in scope.
func (ts targetScope) allowsURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	norm := NormalizeAssetValue("url", raw)
	// "/app/../admin" starts with "/app/" but is /admin on the server.
	prefixes := ts.urlPrefixes
	if slices.ContainsFunc(strings.Split(u.Path, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		prefixes = nil
	}
	for _, p := range prefixes {
		if norm == p || strings.HasPrefix(norm, p) && (strings.HasSuffix(p, "/") || strings.ContainsRune("/?#", rune(norm[len(p)]))) {
			return true
		}
	}
	return ts.allowsHost(u.Hostname())
}

// allowsTarget: a scan target (hostname, address, CIDR, host:port, URL) in
// scope. Everything is when the scope is not enforced.
func (ts targetScope) allowsTarget(t string) bool {
	if !ts.enforced {
		return true
	}
	t = strings.TrimSpace(t)
	if strings.Contains(t, "://") {
		return ts.allowsURL(t)
	}
	if p, err := netip.ParsePrefix(t); err == nil {
		p = unmapPrefix(p)
		return slices.ContainsFunc(ts.prefixes, func(e netip.Prefix) bool {
			return e.Bits() <= p.Bits() && e.Contains(p.Addr())
		})
	}
	if host, _, err := net.SplitHostPort(t); err == nil {
		return ts.allowsHost(host)
	}
	return ts.allowsHost(t)
}

// allowsAsset: an asset a worker reports in scope. An asset of another
// type is held to the scope when its value reads as a network location (a
// "service" evil.example:443, a "cidr"); one without (a certificate's
// fingerprint, a technology, an e-mail address) is in scope: it is found on
// something in scope.
func (ts targetScope) allowsAsset(typ, value string) bool {
	if !ts.enforced {
		return true
	}
	switch typ {
	case "hostname", "domain", "ip":
		return ts.allowsHost(value)
	case "port":
		host, _, err := net.SplitHostPort(value)
		return err == nil && ts.allowsHost(host)
	case "url":
		return ts.allowsURL(value)
	}
	if t, ok := networkLocation(value); ok {
		return ts.allowsTarget(t)
	}
	return true
}

// outOfScope lists the targets outside scope; nil when all are in.
func (ts targetScope) outOfScope(targets []string) []string {
	var out []string
	for _, t := range targets {
		if !ts.allowsTarget(t) {
			out = append(out, t)
		}
	}
	return out
}

var scopeTargetColumns = `id, organization_id, kind, value, include_subdomains, note, created_at`

func scanScopeTarget(r pgx.Row) (ScopeTarget, error) {
	var t ScopeTarget
	err := r.Scan(&t.ID, &t.OrganizationID, &t.Kind, &t.Value, &t.IncludeSubdomains, &t.Note, &t.CreatedAt)
	return t, err
}

// AddScopeTarget adds an entry to an organization's scan scope, and starts
// enforcing it. Adding an entry that exists returns it (created false).
func (s *Store) AddScopeTarget(ctx context.Context, scope Scope, org uuid.UUID, p ScopeTargetParams) (ScopeTarget, bool, error) {
	if !scope.Allows(org) {
		return ScopeTarget{}, false, ErrNotFound
	}
	value, sub, err := ParseScopeTarget(p.Kind, p.Value, p.IncludeSubdomains)
	if err != nil {
		return ScopeTarget{}, false, err
	}
	var t ScopeTarget
	created := true
	err = s.inTx(ctx, "add scope target", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE organizations SET scope_enforced = true WHERE id = $1`, org)
		if err != nil {
			return fmt.Errorf("enforce scope: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return missingOrganization(scope, org)
		}
		t, err = scanScopeTarget(tx.QueryRow(ctx, `
			INSERT INTO scope_targets (organization_id, kind, value, include_subdomains, note, created_by_token_id)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (organization_id, kind, value, include_subdomains) DO NOTHING
			RETURNING `+scopeTargetColumns, org, p.Kind, value, sub, p.Note, p.TokenID))
		if errors.Is(err, pgx.ErrNoRows) {
			created = false
			t, err = scanScopeTarget(tx.QueryRow(ctx, `SELECT `+scopeTargetColumns+` FROM scope_targets
				WHERE organization_id = $1 AND kind = $2 AND value = $3 AND include_subdomains = $4`, org, p.Kind, value, sub))
		}
		if err != nil {
			return fmt.Errorf("add scope target: %w", err)
		}
		auditScopeTarget(ctx, t)
		return nil
	})
	if err != nil {
		return ScopeTarget{}, false, err
	}
	return t, created, nil
}

// ListScopeTargets pages an organization's scope entries, newest first, and
// says whether its scope is enforced.
func (s *Store) ListScopeTargets(ctx context.Context, scope Scope, org uuid.UUID, after *Cursor, limit int) ([]ScopeTarget, bool, *Cursor, error) {
	var enforced bool
	err := s.pool.QueryRow(ctx, `SELECT scope_enforced FROM organizations o WHERE o.id = $1 AND `+inScope("o.id", "$2"),
		org, scope.arg()).Scan(&enforced)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil, missingOrganization(scope, org)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	afterTime, afterID := after.position()
	rows, err := s.pool.Query(ctx, `SELECT `+scopeTargetColumns+` FROM scope_targets
		WHERE organization_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3::uuid))
		ORDER BY created_at DESC, id DESC LIMIT $4`, org, afterTime, afterID, limit+1)
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	targets, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScopeTarget, error) { return scanScopeTarget(r) })
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	targets, next := page(targets, limit, func(t ScopeTarget) Cursor { return Cursor{Time: t.CreatedAt, ID: t.ID} })
	return targets, enforced, next, nil
}

// RemoveScopeTarget removes an entry; the scope stays enforced.
func (s *Store) RemoveScopeTarget(ctx context.Context, scope Scope, org, id uuid.UUID) (ScopeTarget, error) {
	var t ScopeTarget
	err := s.inTx(ctx, "remove scope target", func(tx pgx.Tx) error {
		var err error
		t, err = scanScopeTarget(tx.QueryRow(ctx, `DELETE FROM scope_targets
			WHERE id = $1 AND organization_id = $2 AND `+inScope("organization_id", "$3")+`
			RETURNING `+scopeTargetColumns, id, org, scope.arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("remove scope target: %w", err)
		}
		auditScopeTarget(ctx, t)
		return nil
	})
	if err != nil {
		return ScopeTarget{}, err
	}
	return t, nil
}

// targetKeys are the keys of a plugin input whose every string names
// something to scan, a bare name too: the reference plugins' urls
// (http-probe) and addresses (tcp-connect), and the usual targets, hosts,
// host and target.
var targetKeys = []string{"urls", "addresses", "targets", "hosts", "host", "target"}

// inputTargets lists what a plugin input (or a scanner_plugin task's whole
// payload) names as targets, at any depth: every string under targetKeys,
// and under any other key every string — and every key — that reads as a
// network location (networkLocation). Which keys a plugin reads is the worker's business, so
// the gateway cannot rely on names alone: a target under "domain",
// "endpoint" or "upstream" is held to the scope as one under "targets".
// Nothing when the input is not JSON.
func inputTargets(input json.RawMessage) []string {
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
				walk(v[k], named || slices.Contains(targetKeys, strings.ToLower(k)))
			}
		}
	}
	walk(v, false)
	return out
}

// networkLocation says whether a string of a plugin input, under a key not
// known to name targets, reads as something a scanner could reach, and
// returns what to check: a URL (scheme://host), an IP address or prefix,
// host:port, "localhost", a DNS name of two labels or more whose last label
// starts with a letter (a TLD never is all digits: "1.2" or "5.0" is a
// version), or one of these followed by a path ("example.com/admin": its
// host). A single-label word ("fast", "common") is not one — put it under
// a target key to have it checked — and neither is a string with spaces. A
// file name such as "words.txt" reads as a DNS name and is held to the
// scope; "./words.txt" or "lists/words.txt" is not.
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
		if _, ok := networkLocation(h); !ok {
			return "", false
		}
		return host, true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host, true
	}
	name, ok := dnsName(host)
	if !ok {
		return "", false
	}
	if name == "localhost" {
		return host, true
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 || name[i+1] < 'a' || name[i+1] > 'z' {
		return "", false
	}
	return host, true
}

// auditScopeTarget names a scope entry, as stored, in its change's audit
// record.
func auditScopeTarget(ctx context.Context, t ScopeTarget) {
	auditTarget(ctx, t.ID, &t.OrganizationID)
	auditDetail(ctx, "kind", t.Kind)
	auditDetail(ctx, "value", t.Value)
	auditDetail(ctx, "include_subdomains", t.IncludeSubdomains)
}
