package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestHistoryVerbsAreOrganizationScoped: every store verb of issue 18 —
// scope entries, changes, exposure changes, exclusions, edges, threats,
// the redrive of a scan's job — answers ErrNotFound for another
// organization and for the zero Tenant (a forgotten scope), changes
// nothing, and works for the owner.
func TestHistoryVerbsAreOrganizationScoped(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	own := store.OneOrganization(b.org.ID)
	other := createOrg(t, s, "org-b")
	entry, _, err := s.AddScopeTarget(ctx, store.EveryOrganization(), b.org.ID, store.ScopeTargetParams{Kind: store.ScopeCIDR, Value: "127.0.0.0/8"})
	require.NoError(t, err)
	scan := createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "tcp-connect")
	failed := runJob(t, s, b, store.AttemptFailed)
	require.Equal(t, "failed", scanState(t, s, scan.ID))
	severity := "info"
	exclusion, err := s.CreateThreatExclusion(ctx, own, b.org.ID, store.ThreatExclusionParams{Severity: &severity, Reason: "noise"})
	require.NoError(t, err)

	hidden := map[string]store.Tenant{"another organization": store.OneOrganization(other.ID), "the zero Tenant": {}}
	for name, tenant := range hidden {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.AddScopeTarget(ctx, tenant, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeIP, Value: "10.0.0.1"})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, _, err = s.ListScopeTargets(ctx, tenant, b.org.ID, nil, 10)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.RemoveScopeTarget(ctx, tenant, b.org.ID, entry.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.ListScanChanges(ctx, tenant, scan.ID, store.ChangeFilter{Limit: 10})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.ListExposureChanges(ctx, tenant, b.org.ID, store.ChangeFilter{Limit: 10})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.CreateThreatExclusion(ctx, tenant, b.org.ID, store.ThreatExclusionParams{Severity: &severity, Reason: "x"})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.ListThreatExclusions(ctx, tenant, b.org.ID, nil, 10)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.DeleteThreatExclusion(ctx, tenant, b.org.ID, exclusion.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.ListAssetEdges(ctx, tenant, b.org.ID, nil, nil, 10)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.ListThreats(ctx, tenant, b.org.ID, true, nil, 10)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.RetryTask(ctx, tenant, failed.Task.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			require.Equal(t, "failed", scanState(t, s, scan.ID), "a refused redrive reopens nothing")
		})
	}

	entries, enforced, _, err := s.ListScopeTargets(ctx, own, b.org.ID, nil, 10)
	require.NoError(t, err)
	require.True(t, enforced)
	require.Len(t, entries, 1, "nothing was added or removed")
	exclusions, _, err := s.ListThreatExclusions(ctx, own, b.org.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, exclusions, 1)
	_, err = s.RetryTask(ctx, own, failed.Task.ID)
	require.NoError(t, err)
	require.Equal(t, "running", scanState(t, s, scan.ID), "the owner's redrive reopens the scan")
}
