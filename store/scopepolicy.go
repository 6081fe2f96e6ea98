package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// Scope policies are the scan-scope domain's (store/internal/targetscope,
// policy.go). SetScopePolicy stays here, beside the organization it
// returns.
const (
	// ScopePolicyAllowList holds every target to the scope entries; with
	// none, nothing may be scanned. The API's default for a new
	// organization.
	ScopePolicyAllowList = targetscope.PolicyAllowList
	// ScopePolicyUnrestricted lets the organization scan any target.
	ScopePolicyUnrestricted = targetscope.PolicyUnrestricted
)

// SetScopePolicy sets an organization's scope policy; only an unscoped
// caller (a platform operator) may, as only it edits scope entries. Moving
// to allow_list narrows the scope: the organization's live work outside it
// ends in the same transaction (recheckLiveWork).
func (s *Store) SetScopePolicy(ctx context.Context, tenant Tenant, org uuid.UUID, policy string) (Organization, error) {
	if !tenant.IsEveryOrganization() {
		if tenant.Allows(org) {
			return Organization{}, fmt.Errorf("%w: only a platform operator sets a scope policy", ErrForbidden)
		}
		return Organization{}, ErrNotFound
	}
	if err := targetscope.CheckPolicy(policy); err != nil {
		return Organization{}, err
	}
	var o Organization
	err := s.inTx(ctx, "set scope policy", func(tx pgx.Tx) error {
		if err := targetscope.LockForNarrowing(ctx, tx, org); err != nil {
			return err
		}
		var err error
		o, err = scanOrganization(tx.QueryRow(ctx, `UPDATE organizations o SET scope_policy = $2, scope_enforced = ($2 = '`+
			ScopePolicyAllowList+`') WHERE o.id = $1 RETURNING `+organizationColumns, org, policy))
		if errors.Is(err, pgx.ErrNoRows) {
			return core.MissingOrganization(tenant, org)
		}
		if err != nil {
			return fmt.Errorf("set scope policy: %w", err)
		}
		if policy == ScopePolicyAllowList {
			return recheckLiveWork(ctx, tx, org)
		}
		return nil
	})
	if err != nil {
		return Organization{}, err
	}
	return o, nil
}
