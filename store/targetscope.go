package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/scanscope"
)

// An organization's scan scope is the list of targets it is approved to
// scan (not to be confused with Tenant, the organization a caller acts for). It is
// enforced when the organization's scope policy is allow_list
// (scopepolicy.go): the API's default for a new organization, and what
// adding an entry sets; with no entry, nothing may be scanned. An
// unrestricted organization scans freely.
//
// One decision, targetScope.refuse, says whether an organization may direct
// a worker at some targets; every path by which a task becomes leasable
// reaches it (see "Scan scope" in doc.go). What the entries mean, how
// targets match them and what a payload names are internal/scanscope's,
// tested there without a database; this file reads, locks and changes the
// scope.

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
// whether it includes subdomains ("*.example.com" does); a refusal is
// ErrInvalid.
func ParseScopeTarget(kind, value string, includeSubdomains bool) (string, bool, error) {
	value, sub, err := scanscope.ParseEntry(kind, value, includeSubdomains)
	if err != nil {
		return "", false, invalidBecause(err)
	}
	return value, sub, nil
}

// targetScope is an organization's scan scope as a decider read it
// (loadTargetScope), with the one decision refuse.
type targetScope struct{ scanscope.AllowList }

// newTargetScope builds the scope from its entries, as scopeEntriesSQL
// encodes them ("kind|t|value", t for subdomains).
func newTargetScope(enforced bool, encoded []string) targetScope {
	entries := make([]scanscope.Entry, len(encoded))
	for i, e := range encoded {
		kind, rest, _ := strings.Cut(e, "|")
		sub, value, _ := strings.Cut(rest, "|")
		entries[i] = scanscope.Entry{Kind: kind, Value: value, IncludeSubdomains: sub == "t"}
	}
	return targetScope{scanscope.New(enforced, entries)}
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

// refuse is the one decision "may this organization direct a worker at
// these targets": nil when it may, else an *OutOfScopeError naming those it
// may not. Every path by which a task becomes leasable reaches it — a task
// created, a scan created (its first job, and through them its later
// ones), a schedule's fire, a redrive of a task or a scan's job, and a
// narrowing of the scope for the work already live (recheckLiveWork). The
// targets come from scanscope.TaskTargets and scanscope.ScanTargets.
func (ts targetScope) refuse(targets []string) error {
	if out := ts.OutOfScope(targets); len(out) > 0 {
		return &OutOfScopeError{Targets: out}
	}
	return nil
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
func (s *Store) AddScopeTarget(ctx context.Context, tenant Tenant, org uuid.UUID, p ScopeTargetParams) (ScopeTarget, bool, error) {
	if !tenant.Allows(org) {
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
			return missingOrganization(tenant, org)
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
func (s *Store) ListScopeTargets(ctx context.Context, tenant Tenant, org uuid.UUID, after *Cursor, limit int) ([]ScopeTarget, bool, *Cursor, error) {
	var enforced bool
	err := s.pool.QueryRow(ctx, `SELECT `+scopeEnforcedSQL("o")+` FROM organizations o WHERE o.id = $1 AND `+inTenant("o.id", "$2"),
		org, tenant.Arg()).Scan(&enforced)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil, missingOrganization(tenant, org)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	q := psql.Select(scopeTargetColumns).From("scope_targets").
		Where(tenant.Where("organization_id")).Where(sq.Eq{"organization_id": org})
	targets, next, err := listPage(ctx, s.pool, q,
		newestFirst("created_at", "id", func(t ScopeTarget) Cursor { return Cursor{Time: t.CreatedAt, ID: t.ID} }),
		after, limit, scanScopeTarget)
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	return targets, enforced, next, nil
}

// RemoveScopeTarget removes an entry; the policy stays allow_list. That
// narrows the scope: the organization's live work outside what remains
// ends in the same transaction (recheckLiveWork).
func (s *Store) RemoveScopeTarget(ctx context.Context, tenant Tenant, org, id uuid.UUID) (ScopeTarget, error) {
	if !tenant.Allows(org) {
		return ScopeTarget{}, ErrNotFound
	}
	var t ScopeTarget
	err := s.inTx(ctx, "remove scope target", func(tx pgx.Tx) error {
		if err := lockScopeForNarrowing(ctx, tx, org); err != nil {
			return err
		}
		var err error
		t, err = scanScopeTarget(tx.QueryRow(ctx, `DELETE FROM scope_targets
			WHERE id = $1 AND organization_id = $2 AND `+inTenant("organization_id", "$3")+`
			RETURNING `+scopeTargetColumns, id, org, tenant.Arg()))
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

// auditScopeTarget names a scope entry, as stored, in its change's audit
// record.
func auditScopeTarget(ctx context.Context, t ScopeTarget) {
	auditTarget(ctx, t.ID, &t.OrganizationID)
	auditDetail(ctx, "kind", t.Kind)
	auditDetail(ctx, "value", t.Value)
	auditDetail(ctx, "include_subdomains", t.IncludeSubdomains)
}
