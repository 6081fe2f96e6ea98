package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// scopePolicyMigration is the migration that makes the scope policy an
// explicit property of each organization.
const scopePolicyMigration = 25

// TestScopePolicyMigrationKeepsWhatEachOrganizationHad: an organization
// that enforced its scope (scope_enforced, or any entry) is allow_list
// after the upgrade; one that never had an entry is unrestricted, so
// nothing it ran before is refused.
func TestScopePolicyMigrationKeepsWhatEachOrganizationHad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, pool := beforeMigration(t, scopePolicyMigration)

	enforcedEmpty, withEntry, never := createOldOrg(t, pool, "enforced"), createOldOrg(t, pool, "entry"), createOldOrg(t, pool, "never")
	exec(t, pool, `UPDATE organizations SET scope_enforced = true WHERE id = $1`, enforcedEmpty.ID)
	exec(t, pool, `INSERT INTO scope_targets (organization_id, kind, value) VALUES ($1, 'domain', 'a.example')`, withEntry.ID)

	require.NoError(t, migrations.UpTo(ctx, url, scopePolicyMigration))
	s := store.New(pool)
	for org, want := range map[*store.Organization]string{
		&enforcedEmpty: store.ScopePolicyAllowList, &withEntry: store.ScopePolicyAllowList, &never: store.ScopePolicyUnrestricted,
	} {
		got, err := s.GetOrganization(ctx, store.EveryOrganization(), org.ID)
		require.NoError(t, err)
		require.Equal(t, want, got.ScopePolicy, org.Name)
	}
}
