package targetscope

import (
	"context"
	"errors"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// HoldLiveWork holds an organization's live work to its scope, just
// narrowed in tx under the scope lock (LockForNarrowing): the facade's,
// which owns tasks and scans.
type HoldLiveWork func(ctx context.Context, tx pgx.Tx, org uuid.UUID) error

// Scopes runs the scan-scope domain's verbs against PostgreSQL.
type Scopes struct {
	pool         *pgxpool.Pool
	holdLiveWork HoldLiveWork
}

// New returns the scan scopes of a pool; a narrowing ends the live work
// outside the new scope through hold. The pool's lifetime is the caller's.
func New(pool *pgxpool.Pool, hold HoldLiveWork) *Scopes {
	return &Scopes{pool: pool, holdLiveWork: hold}
}

func (s *Scopes) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}

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
		return "", false, core.InvalidBecause(err)
	}
	return value, sub, nil
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
// ends in the same transaction (HoldLiveWork). Adding an entry that exists
// returns it (created false).
func (s *Scopes) AddScopeTarget(ctx context.Context, tenant core.Tenant, org uuid.UUID, p ScopeTargetParams) (ScopeTarget, bool, error) {
	if !tenant.Allows(org) {
		return ScopeTarget{}, false, core.ErrNotFound
	}
	value, sub, err := ParseScopeTarget(p.Kind, p.Value, p.IncludeSubdomains)
	if err != nil {
		return ScopeTarget{}, false, err
	}
	var t ScopeTarget
	created := true
	err = s.inTx(ctx, "add scope target", func(tx pgx.Tx) error {
		if err := LockForNarrowing(ctx, tx, org); err != nil {
			return err
		}
		var wasEnforced bool
		err := tx.QueryRow(ctx, `UPDATE organizations n SET scope_enforced = true, scope_policy = '`+PolicyAllowList+`'
			FROM organizations o WHERE n.id = $1 AND o.id = n.id RETURNING `+EnforcedSQL("o"), org).Scan(&wasEnforced)
		if errors.Is(err, pgx.ErrNoRows) {
			return core.MissingOrganization(tenant, org)
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
			return s.holdLiveWork(ctx, tx, org)
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
func (s *Scopes) ListScopeTargets(ctx context.Context, tenant core.Tenant, org uuid.UUID, after *core.Cursor, limit int) ([]ScopeTarget, bool, *core.Cursor, error) {
	var enforced bool
	err := s.pool.QueryRow(ctx, `SELECT `+EnforcedSQL("o")+` FROM organizations o WHERE o.id = $1 AND `+core.InTenant("o.id", "$2"),
		org, tenant.Arg()).Scan(&enforced)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil, core.MissingOrganization(tenant, org)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	q := core.Psql.Select(scopeTargetColumns).From("scope_targets").
		Where(tenant.Where("organization_id")).Where(sq.Eq{"organization_id": org})
	targets, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("created_at", "id", func(t ScopeTarget) core.Cursor { return core.Cursor{Time: t.CreatedAt, ID: t.ID} }),
		after, limit, scanScopeTarget)
	if err != nil {
		return nil, false, nil, fmt.Errorf("list scope targets: %w", err)
	}
	return targets, enforced, next, nil
}

// RemoveScopeTarget removes an entry; the policy stays allow_list. That
// narrows the scope: the organization's live work outside what remains
// ends in the same transaction (HoldLiveWork).
func (s *Scopes) RemoveScopeTarget(ctx context.Context, tenant core.Tenant, org, id uuid.UUID) (ScopeTarget, error) {
	if !tenant.Allows(org) {
		return ScopeTarget{}, core.ErrNotFound
	}
	var t ScopeTarget
	err := s.inTx(ctx, "remove scope target", func(tx pgx.Tx) error {
		if err := LockForNarrowing(ctx, tx, org); err != nil {
			return err
		}
		var err error
		t, err = scanScopeTarget(tx.QueryRow(ctx, `DELETE FROM scope_targets
			WHERE id = $1 AND organization_id = $2 AND `+core.InTenant("organization_id", "$3")+`
			RETURNING `+scopeTargetColumns, id, org, tenant.Arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("remove scope target: %w", err)
		}
		auditScopeTarget(ctx, t)
		return s.holdLiveWork(ctx, tx, org)
	})
	if err != nil {
		return ScopeTarget{}, err
	}
	return t, nil
}

// auditScopeTarget names a scope entry, as stored, in its change's audit
// record.
func auditScopeTarget(ctx context.Context, t ScopeTarget) {
	core.AuditTarget(ctx, t.ID, &t.OrganizationID)
	core.AuditDetail(ctx, "kind", t.Kind)
	core.AuditDetail(ctx, "value", t.Value)
	core.AuditDetail(ctx, "include_subdomains", t.IncludeSubdomains)
}
