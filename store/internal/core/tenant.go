package core

import (
	"context"
	"fmt"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
)

// Tenant is whose data a control-plane call acts on: one organization, or
// every organization (an unscoped admin, the platform operator). In this
// code "tenant" is organization isolation only; "scope" is a scan's
// allow-list (store/targetscope.go) and an API token's "scopes" are its
// permissions. Every store method that reads or writes an organization's
// data takes it as a required argument and filters on it in SQL, with
// InTenant (see "Isolation" in store/doc.go). Worker-facing verbs are
// isolated by the worker's identity and lease instead (see "Fencing").
//
// The zero Tenant is neither: it binds an organization id no organization
// has, so a call that forgot its tenant sees and changes nothing.
type Tenant struct {
	organization uuid.UUID
	every        bool
}

// EveryOrganization is the tenant of an unscoped admin: nothing is filtered.
func EveryOrganization() Tenant { return Tenant{every: true} }

// OneOrganization limits a caller to one organization's data.
func OneOrganization(org uuid.UUID) Tenant { return Tenant{organization: org} }

// TenantOf is the tenant of a caller that belongs to org, or to every
// organization when org is nil (an unscoped API token).
func TenantOf(org *uuid.UUID) Tenant {
	if org == nil {
		return EveryOrganization()
	}
	return OneOrganization(*org)
}

// Allows reports whether the tenant covers an organization.
func (tenant Tenant) Allows(org uuid.UUID) bool {
	return tenant.every || (tenant.organization != uuid.Nil && tenant.organization == org)
}

// Organization is the one organization the tenant is limited to; nil for
// every organization. Audit records and answers name it.
func (tenant Tenant) Organization() *uuid.UUID {
	if tenant.every {
		return nil
	}
	org := tenant.organization
	return &org
}

// IsEveryOrganization reports whether nothing is filtered.
func (tenant Tenant) IsEveryOrganization() bool { return tenant.every }

// Arg is the value bound for a tenant parameter of InTenant: NULL for every
// organization, else the organization's id (uuid.Nil for the zero Tenant).
func (tenant Tenant) Arg() *uuid.UUID { return tenant.Organization() }

// InTenant is organization isolation as SQL, the one form every scoped
// statement uses: the row's organization column belongs to the tenant bound
// as param (a $n placeholder given tenant.Arg()).
func InTenant(column, param string) string {
	return `(` + param + `::uuid IS NULL OR ` + column + ` = ` + param + `)`
}

// WorkerVisibleTo is the worker visibility rule as SQL, for a worker id
// expression and a scope expression (an organization id, or NULL for an
// unscoped caller). An organization sees the workers it owns, those
// assigned to it, and those their owner granted it — nothing else, so an
// organization can never learn of, nor assign, another's worker. Workers
// are shared infrastructure, so this is isolation's second predicate,
// beside InTenant (see "Isolation" in store/doc.go).
func WorkerVisibleTo(worker, scope string) string {
	return `(` + scope + `::uuid IS NULL
		OR EXISTS (SELECT 1 FROM workers vw WHERE vw.id = ` + worker + ` AND vw.owner_organization_id = ` + scope + `)
		OR EXISTS (SELECT 1 FROM organization_workers vow
			WHERE vow.worker_id = ` + worker + ` AND vow.organization_id = ` + scope + ` AND vow.revoked_at IS NULL)
		OR EXISTS (SELECT 1 FROM worker_grants vg WHERE vg.worker_id = ` + worker + ` AND vg.organization_id = ` + scope + `))`
}

// Where is InTenant for statements built with squirrel.
func (tenant Tenant) Where(column string) sq.Sqlizer {
	return sq.Expr(InTenant(column, "?"), tenant.Arg(), tenant.Arg())
}

// MissingOrganization is the answer for an organization a caller names
// that does not exist: only an unscoped caller, who may see every
// organization, is told so; a scoped caller gets the plain ErrNotFound.
func MissingOrganization(tenant Tenant, org uuid.UUID) error {
	if !tenant.IsEveryOrganization() {
		return ErrNotFound
	}
	return problem.Wrap(ErrNotFound, problem.Text("organization "+org.String()+" does not exist"))
}

// CheckListedOrganization answers a listing filtered by an organization
// that came back empty: an unscoped caller learns the organization does not
// exist (404, not an empty list). A scoped caller keeps its empty list, which
// says nothing about another organization.
func CheckListedOrganization(ctx context.Context, ex Executor, tenant Tenant, org *uuid.UUID, empty bool) error {
	if !empty || org == nil || !tenant.IsEveryOrganization() {
		return nil
	}
	var exists bool
	if err := ex.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM organizations WHERE id = $1)`, *org).Scan(&exists); err != nil {
		return fmt.Errorf("check organization: %w", err)
	}
	if !exists {
		return MissingOrganization(tenant, *org)
	}
	return nil
}
