package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// Organization is a tenant.
type Organization struct {
	ID        uuid.UUID
	Name      string
	CreatedAt time.Time
	// ScopePolicy is ScopePolicyAllowList or ScopePolicyUnrestricted.
	ScopePolicy string
}

// organizationColumns are the columns scanOrganization reads from an
// organizations row o.
var organizationColumns = `o.id, o.name, o.created_at, ` + targetscope.PolicySQL("o")

func scanOrganization(r pgx.Row) (Organization, error) {
	var o Organization
	err := r.Scan(&o.ID, &o.Name, &o.CreatedAt, &o.ScopePolicy)
	return o, err
}

// CreateOrganization inserts an organization with a scope policy (the
// caller names it: the API's default is allow_list); only an unscoped
// caller may.
func (s *Store) CreateOrganization(ctx context.Context, tenant Tenant, name, scopePolicy string) (Organization, error) {
	if !tenant.IsEveryOrganization() {
		return Organization{}, fmt.Errorf("%w: only an unscoped admin creates organizations", ErrForbidden)
	}
	if err := targetscope.CheckPolicy(scopePolicy); err != nil {
		return Organization{}, err
	}
	var o Organization
	err := s.inTx(ctx, "create organization", func(tx pgx.Tx) error {
		var err error
		o, err = scanOrganization(tx.QueryRow(ctx, `INSERT INTO organizations AS o (name, scope_policy, scope_enforced)
			VALUES ($1, $2, $2 = '`+ScopePolicyAllowList+`') RETURNING `+organizationColumns, name, scopePolicy))
		if err != nil {
			return fmt.Errorf("create organization: %w", err)
		}
		core.AuditTarget(ctx, o.ID, &o.ID)
		return nil
	})
	if err != nil {
		return Organization{}, err
	}
	return o, nil
}

// GetOrganization returns an organization the scope may see.
func (s *Store) GetOrganization(ctx context.Context, tenant Tenant, id uuid.UUID) (Organization, error) {
	o, err := scanOrganization(s.pool.QueryRow(ctx, `SELECT `+organizationColumns+` FROM organizations o
		WHERE o.id = $1 AND `+core.InTenant("o.id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Organization{}, ErrNotFound
	}
	if err != nil {
		return Organization{}, fmt.Errorf("get organization: %w", err)
	}
	return o, nil
}

// ListOrganizations pages organizations, newest first.
func (s *Store) ListOrganizations(ctx context.Context, tenant Tenant, after *Cursor, limit int) ([]Organization, *Cursor, error) {
	q := core.Psql.Select(organizationColumns).From("organizations o").Where(tenant.Where("o.id"))
	orgs, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("o.created_at", "o.id", func(o Organization) Cursor { return Cursor{Time: o.CreatedAt, ID: o.ID} }),
		after, limit, scanOrganization)
	if err != nil {
		return nil, nil, fmt.Errorf("list organizations: %w", err)
	}
	return orgs, next, nil
}
