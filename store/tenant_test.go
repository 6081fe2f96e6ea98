package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestScopeIsolatesEveryRead: the same rows read through three scopes —
// every organization sees them, the owning organization sees them, and
// another organization or the zero Tenant (a forgotten scope) sees nothing
// and may create nothing.
func TestScopeIsolatesEveryRead(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	other := createOrg(t, s, "org-b")
	task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	_, tokenID, err := s.CreateAPIToken(ctx, store.OneOrganization(b.org.ID),
		store.CreateAPITokenParams{Name: "reader", Permissions: []string{"reader"}})
	require.NoError(t, err)

	visible := []store.Tenant{store.EveryOrganization(), store.OneOrganization(b.org.ID)}
	hidden := map[string]store.Tenant{"another organization": store.OneOrganization(other.ID), "the zero Tenant": {}}

	for _, tenant := range visible {
		_, _, err := s.GetTask(ctx, tenant, task.ID, onlineWindow)
		require.NoError(t, err)
		tasks, _, err := s.ListTasks(ctx, tenant, store.ListTasksParams{Limit: 10})
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		_, err = s.GetOrganization(ctx, tenant, b.org.ID)
		require.NoError(t, err)
		_, err = s.GetWorker(ctx, tenant, b.worker.ID, onlineWindow)
		require.NoError(t, err)
		_, err = s.GetAPIToken(ctx, tenant, tokenID)
		require.NoError(t, err)
		st, err := s.Stats(ctx, tenant, store.StatsParams{OnlineWindow: onlineWindow, LeaseWindow: time.Minute, FailureWindow: time.Minute})
		require.NoError(t, err)
		require.Equal(t, []store.QueueDepth{{OrganizationID: b.org.ID, State: task.State, Count: 1}}, st.Queue)
		require.EqualValues(t, 1, st.WorkersTotal)
	}
	for name, tenant := range hidden {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.GetTask(ctx, tenant, task.ID, onlineWindow)
			require.ErrorIs(t, err, store.ErrNotFound)
			tasks, _, err := s.ListTasks(ctx, tenant, store.ListTasksParams{Limit: 10})
			require.NoError(t, err)
			require.Empty(t, tasks)
			_, err = s.GetOrganization(ctx, tenant, b.org.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			orgs, _, err := s.ListOrganizations(ctx, tenant, nil, 10)
			require.NoError(t, err)
			for _, o := range orgs {
				require.NotEqual(t, b.org.ID, o.ID)
			}
			_, err = s.GetWorker(ctx, tenant, b.worker.ID, onlineWindow)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.GetAPIToken(ctx, tenant, tokenID)
			require.ErrorIs(t, err, store.ErrNotFound)
			tokens, err := s.ListAPITokens(ctx, tenant)
			require.NoError(t, err)
			for _, tok := range tokens {
				require.NotEqual(t, tokenID, tok.ID)
			}
			_, err = s.CancelTask(ctx, tenant, task.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.CreateTask(ctx, tenant, store.CreateTaskParams{OrganizationID: b.org.ID, TaskType: "scanner_plugin",
				Payload: []byte(`{"plugin":"echo"}`)})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.CreateAPIToken(ctx, tenant, store.CreateAPITokenParams{Name: "x", Permissions: []string{"reader"},
				OrganizationID: &b.org.ID})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.UpdateWorker(ctx, tenant, b.worker.ID, store.UpdateWorkerParams{}, onlineWindow)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.CreateOrganization(ctx, tenant, uniqueName("x"), store.ScopePolicyAllowList)
			require.ErrorIs(t, err, store.ErrForbidden)
			st, err := s.Stats(ctx, tenant, store.StatsParams{OnlineWindow: onlineWindow, LeaseWindow: time.Minute, FailureWindow: time.Minute})
			require.NoError(t, err)
			require.Empty(t, st.Queue)
			require.Zero(t, st.WorkersTotal)
		})
	}
	// The task was never touched by the hidden scopes.
	got, _, err := s.GetTask(ctx, store.EveryOrganization(), task.ID, onlineWindow)
	require.NoError(t, err)
	require.Equal(t, task.State, got.State)
}
