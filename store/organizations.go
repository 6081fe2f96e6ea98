package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
)

// Organization is a tenant.
type Organization struct {
	ID        uuid.UUID
	Name      string
	CreatedAt time.Time
}

// CreateOrganization inserts an organization; only an unscoped caller may.
func (s *Store) CreateOrganization(ctx context.Context, scope Scope, name string) (Organization, error) {
	if !scope.IsEveryOrganization() {
		return Organization{}, fmt.Errorf("%w: only an unscoped admin creates organizations", ErrForbidden)
	}
	var o Organization
	err := s.inTx(ctx, "create organization", func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO organizations (name) VALUES ($1) RETURNING id, name, created_at`, name).
			Scan(&o.ID, &o.Name, &o.CreatedAt)
		if err != nil {
			return fmt.Errorf("create organization: %w", err)
		}
		auditTarget(ctx, o.ID, &o.ID)
		return nil
	})
	if err != nil {
		return Organization{}, err
	}
	return o, nil
}

// GetOrganization returns an organization the scope may see.
func (s *Store) GetOrganization(ctx context.Context, scope Scope, id uuid.UUID) (Organization, error) {
	var o Organization
	err := s.pool.QueryRow(ctx, `SELECT id, name, created_at FROM organizations
		WHERE id = $1 AND `+inScope("id", "$2"), id, scope.arg()).Scan(&o.ID, &o.Name, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Organization{}, ErrNotFound
	}
	if err != nil {
		return Organization{}, fmt.Errorf("get organization: %w", err)
	}
	return o, nil
}

// ListOrganizations pages organizations, newest first.
func (s *Store) ListOrganizations(ctx context.Context, scope Scope, after *Cursor, limit int) ([]Organization, *Cursor, error) {
	q := psql.Select("id, name, created_at").From("organizations").OrderBy("created_at DESC", "id DESC").Limit(uint64(limit + 1))
	q = q.Where(scope.where("id"))
	if after != nil {
		q = q.Where("(created_at, id) < (?, ?)", after.Time, after.ID)
	}
	sqlText, args, err := q.ToSql()
	if err != nil {
		return nil, nil, err
	}
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list organizations: %w", err)
	}
	orgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Organization, error) {
		var o Organization
		return o, r.Scan(&o.ID, &o.Name, &o.CreatedAt)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list organizations: %w", err)
	}
	orgs, next := page(orgs, limit, func(o Organization) Cursor { return Cursor{Time: o.CreatedAt, ID: o.ID} })
	return orgs, next, nil
}

// errOrganizationMissing is a task insert's missing organization, before
// CreateTask words it for its caller's scope.
var errOrganizationMissing = fmt.Errorf("%w: organization", ErrNotFound)

// missingOrganization is the error for naming an organization that does not
// exist. Only an unscoped caller is told which: for a scoped one it is the
// plain ErrNotFound of anything outside its scope (see "Isolation").
func missingOrganization(scope Scope, org uuid.UUID) error {
	if !scope.IsEveryOrganization() {
		return ErrNotFound
	}
	return problem.Wrap(ErrNotFound, problem.Text("organization "+org.String()+" does not exist"))
}

// checkListedOrganization answers a listing filtered by an organization
// that came back empty: an unscoped caller learns the organization does not
// exist (404, not an empty list). A scoped caller keeps its empty list, which
// says nothing about another organization.
func checkListedOrganization(ctx context.Context, ex executor, scope Scope, org *uuid.UUID, empty bool) error {
	if !empty || org == nil || !scope.IsEveryOrganization() {
		return nil
	}
	var exists bool
	if err := ex.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM organizations WHERE id = $1)`, *org).Scan(&exists); err != nil {
		return fmt.Errorf("check organization: %w", err)
	}
	if !exists {
		return missingOrganization(scope, *org)
	}
	return nil
}
