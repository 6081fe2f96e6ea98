package targetscope

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// Scope policies: whether an organization's scans are held to its scope
// entries (targets.go). A policy is a property of the organization, shown
// with it and set by a platform operator (the facade's SetScopePolicy,
// beside the organization it returns).
const (
	// PolicyAllowList holds every target to the scope entries; with none,
	// nothing may be scanned. The API's default for a new organization.
	PolicyAllowList = "allow_list"
	// PolicyUnrestricted lets the organization scan any target.
	PolicyUnrestricted = "unrestricted"
)

// CheckPolicy refuses a policy that is neither.
func CheckPolicy(policy string) error {
	if policy != PolicyAllowList && policy != PolicyUnrestricted {
		return problem.Wrap(core.ErrInvalid, problem.Text("scope_policy must be allow_list or unrestricted"))
	}
	return nil
}

// PolicySQL is the organization row o's policy as the API shows it (see
// EnforcedSQL).
func PolicySQL(o string) string {
	return `CASE WHEN ` + EnforcedSQL(o) + ` THEN '` + PolicyAllowList + `' ELSE '` + PolicyUnrestricted + `' END`
}

// LockForNarrowing takes the organization's scope lock exclusively
// (lockClass), first in a transaction that narrows the scope: the deciders
// that read the old scope commit before it goes on, and those after it
// read the new one.
func LockForNarrowing(ctx context.Context, tx pgx.Tx, org uuid.UUID) error {
	if _, err := tx.Exec(ctx, `SELECT `+lockSQL("pg_advisory_xact_lock", "$1::uuid"), org); err != nil {
		return fmt.Errorf("lock scan scope: %w", err)
	}
	return nil
}
