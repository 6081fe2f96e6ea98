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
// enforced when the organization's scope policy is allow_list
// (scopepolicy.go): the API's default for a new organization, and what
// adding an entry sets; with no entry, nothing may be scanned. An
// unrestricted organization scans freely.
//
// One decision, targetScope.refuse, says whether an organization may direct
// a worker at some targets; every path by which a task becomes leasable
// reaches it (see "Scan scope" in doc.go).
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
// ASCII (xn--) form; a host a resolver reads as an address in any spelling
// (hostAddr: 127.1, 2130706433, 0x7f000001) compares as that address, and
// IPv4-mapped IPv6 addresses and prefixes as IPv4. What plugin inputs name
// is found by inputTargets.

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
		if _, isAddr := hostAddr(name); isAddr {
			return bad("an IP address in numeric form; use kind ip")
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
// for newTargetScope. org is an SQL expression. The statement that reads it
// must come after the one that took scopeReadLockSQL, so that its snapshot
// sees a narrowing that the lock waited for.
func scopeEntriesSQL(org string) string {
	return `(SELECT ` + scopeEnforcedSQL("o") + ` FROM organizations o WHERE o.id = ` + org + `),
		ARRAY(SELECT st.kind || '|' || CASE WHEN st.include_subdomains THEN 't' ELSE 'f' END || '|' || st.value
			FROM scope_targets st WHERE st.organization_id = ` + org + `)`
}

// scopeEnforcedSQL is whether the organization row o holds its scans to an
// allow-list: its policy says so, or scope_enforced does — the flag of
// releases before scope policies, which this one keeps equal to the policy
// whenever it writes either (see migration 000025).
func scopeEnforcedSQL(o string) string {
	return `(` + o + `.scope_policy = '` + ScopePolicyAllowList + `' OR ` + o + `.scope_enforced)`
}

// scopeLockClass is the advisory lock class, keyed by organization, that
// orders reads of a scan scope against its narrowing: every path that
// decides by the scope takes it shared (scopeReadLockSQL) before it reads,
// and a change that narrows the scope takes it exclusively
// (lockScopeForNarrowing) before it changes and re-checks the live work.
// So no task or asset decided by the old scope commits after the re-check.
const scopeLockClass = 1801

// scopeReadLockSQL takes the organization's scope lock shared; org is an SQL
// expression. It is a value of type void (scan it into nil).
func scopeReadLockSQL(org string) string { return scopeLockSQL("pg_advisory_xact_lock_shared", org) }

// scopeLockSQL calls the advisory lock function fn on the organization's
// scope lock.
func scopeLockSQL(fn, org string) string {
	return fn + `(` + strconv.Itoa(scopeLockClass) + `, hashtext((` + org + `)::text))`
}

// loadTargetScope takes the organization's scope lock shared and reads its
// scan scope, in two statements (see scopeEntriesSQL).
func loadTargetScope(ctx context.Context, ex executor, org uuid.UUID) (targetScope, error) {
	if _, err := ex.Exec(ctx, `SELECT `+scopeReadLockSQL("$1::uuid"), org); err != nil {
		return targetScope{}, fmt.Errorf("lock scan scope: %w", err)
	}
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

// allowsHost: a hostname or an address in scope. A host that a resolver
// reads as an address in any spelling (hostAddr: 127.1, 2130706433,
// 0x7f000001, 0177.0.0.1) is that address; any other, a single label too
// ("vm", "intranet"), is a name that a domain entry must name.
func (ts targetScope) allowsHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, ok := hostAddr(host); ok {
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

// outOfScope lists the targets outside scope, each once; nil when all are
// in.
func (ts targetScope) outOfScope(targets []string) []string {
	var out []string
	for _, t := range targets {
		if !ts.allowsTarget(t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// refuse is the one decision "may this organization direct a worker at
// these targets": nil when it may, else an *OutOfScopeError naming those it
// may not. Every path by which a task becomes leasable reaches it — a task
// created (taskTargets), a scan created (scanTargets: its first job, and
// through them its later ones), a schedule's fire, a redrive of a task or a
// scan's job, and a narrowing of the scope for the work already live
// (recheckLiveWork). The targets come from taskTargets and scanTargets.
func (ts targetScope) refuse(targets []string) error {
	if out := ts.outOfScope(targets); len(out) > 0 {
		return &OutOfScopeError{Targets: out}
	}
	return nil
}

// taskTargets is what a task directs a worker at: for a scanner_plugin task
// everything its payload names (inputTargets: its targets, its input, the
// assets it carries); other task types scan nothing.
func taskTargets(taskType string, payload json.RawMessage) []string {
	if taskType != "scanner_plugin" {
		return nil
	}
	return inputTargets(payload)
}

var scopeTargetColumns = `id, organization_id, kind, value, include_subdomains, note, created_at`

func scanScopeTarget(r pgx.Row) (ScopeTarget, error) {
	var t ScopeTarget
	err := r.Scan(&t.ID, &t.OrganizationID, &t.Kind, &t.Value, &t.IncludeSubdomains, &t.Note, &t.CreatedAt)
	return t, err
}

// AddScopeTarget adds an entry to an organization's scan scope, and moves
// the organization to the allow_list policy. For an organization that was
// unrestricted that narrows its scope: its live work outside the new entry
// ends in the same transaction (recheckLiveWork). Adding an entry that
// exists returns it (created false).
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
		if err := lockScopeForNarrowing(ctx, tx, org); err != nil {
			return err
		}
		var wasEnforced bool
		err := tx.QueryRow(ctx, `UPDATE organizations n SET scope_enforced = true, scope_policy = '`+ScopePolicyAllowList+`'
			FROM organizations o WHERE n.id = $1 AND o.id = n.id RETURNING `+scopeEnforcedSQL("o"), org).Scan(&wasEnforced)
		if errors.Is(err, pgx.ErrNoRows) {
			return missingOrganization(scope, org)
		}
		if err != nil {
			return fmt.Errorf("enforce scope: %w", err)
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
		if !wasEnforced {
			return recheckLiveWork(ctx, tx, org)
		}
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
	err := s.pool.QueryRow(ctx, `SELECT `+scopeEnforcedSQL("o")+` FROM organizations o WHERE o.id = $1 AND `+inScope("o.id", "$2"),
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

// RemoveScopeTarget removes an entry; the policy stays allow_list. That
// narrows the scope: the organization's live work outside what remains
// ends in the same transaction (recheckLiveWork).
func (s *Store) RemoveScopeTarget(ctx context.Context, scope Scope, org, id uuid.UUID) (ScopeTarget, error) {
	if !scope.Allows(org) {
		return ScopeTarget{}, ErrNotFound
	}
	var t ScopeTarget
	err := s.inTx(ctx, "remove scope target", func(tx pgx.Tx) error {
		if err := lockScopeForNarrowing(ctx, tx, org); err != nil {
			return err
		}
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
		return recheckLiveWork(ctx, tx, org)
	})
	if err != nil {
		return ScopeTarget{}, err
	}
	return t, nil
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

// inputTargets lists what a plugin input (or a scanner_plugin task's whole
// payload) names as targets, at any depth: every string under targetKeys,
// the value of every asset under an "assets" key (the assets a scanner
// payload carries, which the worker's plugins connect to), and under any
// other key every string — and every key — that reads as a network
// location (networkLocation). Which keys a plugin reads is the worker's
// business, so the gateway cannot rely on names alone: a target under
// "domain", "endpoint" or "upstream" is held to the scope as one under
// "targets". Keys are compared as the worker decodes them (isKey). Nothing
// when the input is not JSON.
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
				if isKey(k, "assets") {
					out = append(out, assetListTargets(v[k])...)
				}
				walk(v[k], named || isKey(k, targetKeys...))
			}
		}
	}
	walk(v, false)
	return out
}

// assetListTargets lists the values of the assets in a list of them
// ({"type": "ip", "value": "10.0.0.1"}, …) that a worker would connect to:
// an asset of a network type (networkAssetTypes) whatever its value says —
// a single-label name, a number — and of another type when its value reads
// as a network location. An ip asset whose value is not an address is a name
// to the scope, and must be approved as one.
func assetListTargets(list any) []string {
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

// auditScopeTarget names a scope entry, as stored, in its change's audit
// record.
func auditScopeTarget(ctx context.Context, t ScopeTarget) {
	auditTarget(ctx, t.ID, &t.OrganizationID)
	auditDetail(ctx, "kind", t.Kind)
	auditDetail(ctx, "value", t.Value)
	auditDetail(ctx, "include_subdomains", t.IncludeSubdomains)
}
