// Package targetscope is the store's scan-scope domain: an organization's
// scan scope (the targets it is approved to scan; not to be confused with
// core.Tenant, the organization a caller acts for), its scope policy, the
// lock that orders reads of a scope against its narrowing, and the one
// decision Scope.Refuse (see "Scan scope" in store/doc.go). It stands on
// store/internal/core and imports neither the fencing predicates nor the
// lease engine (depguard); the facade (package store) embeds a Scopes so
// that callers keep calling store.Store.
//
// A narrowing ends the organization's live work outside the new scope in
// its own transaction; tasks and scans are the facade's, so the facade
// gives New the function that does it (HoldLiveWork) and dependencies go
// one way.
package targetscope

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// The scope is enforced when the organization's scope policy is
// allow_list (policy.go): the API's default for a new organization, and
// what adding an entry sets; with no entry, nothing may be scanned. An
// unrestricted organization scans freely.
//
// One decision, Scope.Refuse, says whether an organization may direct a
// worker at some targets; every path by which a task becomes leasable
// reaches it. What the entries mean, how targets match them and what a
// payload names are internal/scanscope's, tested there without a database;
// this package reads, locks and changes the scope.

// Scope target kinds (scanscope's entry kinds).
const (
	ScopeDomain    = scanscope.Domain
	ScopeIP        = scanscope.IP
	ScopeCIDR      = scanscope.CIDR
	ScopeURLPrefix = scanscope.URLPrefix
)

// OutOfScopeError lists the targets of a scan that lie outside scope.
type OutOfScopeError struct{ Targets []string }

func (e *OutOfScopeError) Error() string {
	return fmt.Sprintf("%v: %s", core.ErrOutOfScope, strings.Join(e.Targets, ", "))
}

// Is makes errors.Is(err, ErrOutOfScope) hold.
func (e *OutOfScopeError) Is(target error) bool { return target == core.ErrOutOfScope }

// Scope is an organization's scan scope as a decider read it (Load), with
// the one decision Refuse.
type Scope struct{ scanscope.AllowList }

// NewScope builds the scope from its entries, as EntriesSQL encodes them
// ("kind|t|value", t for subdomains).
func NewScope(enforced bool, encoded []string) Scope {
	entries := make([]scanscope.Entry, len(encoded))
	for i, e := range encoded {
		kind, rest, _ := strings.Cut(e, "|")
		sub, value, _ := strings.Cut(rest, "|")
		entries[i] = scanscope.Entry{Kind: kind, Value: value, IncludeSubdomains: sub == "t"}
	}
	return Scope{scanscope.New(enforced, entries)}
}

// EntriesSQL selects an organization's scope as (enforced, entries) for
// NewScope. org is an SQL expression. The statement that reads it must
// come after the one that took ReadLockSQL, so that its snapshot sees a
// narrowing that the lock waited for.
func EntriesSQL(org string) string {
	return `(SELECT ` + EnforcedSQL("o") + ` FROM organizations o WHERE o.id = ` + org + `),
		ARRAY(SELECT st.kind || '|' || CASE WHEN st.include_subdomains THEN 't' ELSE 'f' END || '|' || st.value
			FROM scope_targets st WHERE st.organization_id = ` + org + `)`
}

// EnforcedSQL is whether the organization row o holds its scans to an
// allow-list: its policy says so, or scope_enforced does — the flag of
// releases before scope policies, which this one keeps equal to the policy
// whenever it writes either (see migration 000025).
func EnforcedSQL(o string) string {
	return `(` + o + `.scope_policy = '` + PolicyAllowList + `' OR ` + o + `.scope_enforced)`
}

// lockClass is the advisory lock class, keyed by organization, that
// orders reads of a scan scope against its narrowing: every path that
// decides by the scope takes it shared (ReadLockSQL) before it reads, and
// a change that narrows the scope takes it exclusively
// (LockForNarrowing) before it changes and re-checks the live work. So no
// task or asset decided by the old scope commits after the re-check.
const lockClass = 1801

// ReadLockSQL takes the organization's scope lock shared; org is an SQL
// expression. It is a value of type void (scan it into nil).
func ReadLockSQL(org string) string { return lockSQL("pg_advisory_xact_lock_shared", org) }

// lockSQL calls the advisory lock function fn on the organization's scope
// lock.
func lockSQL(fn, org string) string {
	return fn + `(` + strconv.Itoa(lockClass) + `, hashtext((` + org + `)::text))`
}

// Load takes the organization's scope lock shared and reads its scan
// scope, in two statements (see EntriesSQL).
func Load(ctx context.Context, ex core.Executor, org uuid.UUID) (Scope, error) {
	if _, err := ex.Exec(ctx, `SELECT `+ReadLockSQL("$1::uuid"), org); err != nil {
		return Scope{}, fmt.Errorf("lock scan scope: %w", err)
	}
	var enforced *bool
	var entries []string
	if err := ex.QueryRow(ctx, `SELECT `+EntriesSQL("$1"), org).Scan(&enforced, &entries); err != nil {
		return Scope{}, fmt.Errorf("read scan scope: %w", err)
	}
	return NewScope(enforced != nil && *enforced, entries), nil
}

// Refuse is the one decision "may this organization direct a worker at
// these targets": nil when it may, else an *OutOfScopeError naming those
// it may not. Every path by which a task becomes leasable reaches it — a
// task created, a scan created (its first job, and through them its later
// ones), a schedule's fire, a redrive of a task or a scan's job, and a
// narrowing of the scope for the work already live (the facade's
// HoldLiveWork). The targets come from scanscope.TaskTargets and
// scanscope.ScanTargets.
func (ts Scope) Refuse(targets []string) error {
	if out := ts.OutOfScope(targets); len(out) > 0 {
		return &OutOfScopeError{Targets: out}
	}
	return nil
}
