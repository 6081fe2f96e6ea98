package store

import (
	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Tenant is whose data a control-plane call acts on: one organization, or
// every organization (core/tenant.go, with the one SQL predicate of
// organization isolation, core.InTenant; see "Isolation" in doc.go).
type Tenant = core.Tenant

// EveryOrganization is the tenant of an unscoped admin: nothing is filtered.
func EveryOrganization() Tenant { return core.EveryOrganization() }

// OneOrganization limits a caller to one organization's data.
func OneOrganization(org uuid.UUID) Tenant { return core.OneOrganization(org) }

// TenantOf is the tenant of a caller that belongs to org, or to every
// organization when org is nil (an unscoped API token).
func TenantOf(org *uuid.UUID) Tenant { return core.TenantOf(org) }
