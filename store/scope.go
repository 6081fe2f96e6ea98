package store

import (
	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
)

// Scope is the tenant a control-plane call acts for: one organization, or
// every organization (an unscoped admin, the platform operator). Every store
// method that reads or writes an organization's data takes it as a required
// argument and filters on it in SQL, with inScope (see "Isolation" in
// doc.go). Worker-facing verbs are isolated by the worker's identity and
// lease instead (see "Fencing").
//
// The zero Scope is neither: it binds an organization id no organization
// has, so a call that forgot its scope sees and changes nothing.
type Scope struct {
	organization uuid.UUID
	every        bool
}

// EveryOrganization is the scope of an unscoped admin: nothing is filtered.
func EveryOrganization() Scope { return Scope{every: true} }

// OrganizationScope limits a caller to one organization's data.
func OrganizationScope(org uuid.UUID) Scope { return Scope{organization: org} }

// ScopeOf is the scope of a caller that belongs to org, or to every
// organization when org is nil (an unscoped API token).
func ScopeOf(org *uuid.UUID) Scope {
	if org == nil {
		return EveryOrganization()
	}
	return OrganizationScope(*org)
}

// Allows reports whether the scope covers an organization.
func (sc Scope) Allows(org uuid.UUID) bool {
	return sc.every || (sc.organization != uuid.Nil && sc.organization == org)
}

// Organization is the one organization the scope is limited to; nil for
// every organization. Audit records and answers name it.
func (sc Scope) Organization() *uuid.UUID {
	if sc.every {
		return nil
	}
	org := sc.organization
	return &org
}

// IsEveryOrganization reports whether nothing is filtered.
func (sc Scope) IsEveryOrganization() bool { return sc.every }

// arg is the value bound for a scope parameter of inScope: NULL for every
// organization, else the organization's id (uuid.Nil for the zero Scope).
func (sc Scope) arg() *uuid.UUID { return sc.Organization() }

// inScope is organization isolation as SQL, the one form every scoped
// statement uses: the row's organization column belongs to the scope bound
// as param (a $n placeholder given sc.arg()).
func inScope(column, param string) string {
	return `(` + param + `::uuid IS NULL OR ` + column + ` = ` + param + `)`
}

// where is inScope for statements built with squirrel.
func (sc Scope) where(column string) sq.Sqlizer {
	return sq.Expr(inScope(column, "?"), sc.arg(), sc.arg())
}
