package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestScopeIsolatesEveryRead: the same rows read through three scopes —
// every organization sees them, the owning organization sees them, and
// another organization or the zero Scope (a forgotten scope) sees nothing
// and may create nothing.
func TestScopeIsolatesEveryRead(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	other := createOrg(t, s, "org-b")
	task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	_, tokenID, err := s.CreateAPIToken(ctx, store.OrganizationScope(b.org.ID),
		store.CreateAPITokenParams{Name: "reader", Permissions: []string{"reader"}})
	require.NoError(t, err)

	visible := []store.Scope{store.EveryOrganization(), store.OrganizationScope(b.org.ID)}
	hidden := map[string]store.Scope{"another organization": store.OrganizationScope(other.ID), "the zero Scope": {}}

	for _, sc := range visible {
		_, _, err := s.GetTask(ctx, sc, task.ID, onlineWindow)
		require.NoError(t, err)
		tasks, _, err := s.ListTasks(ctx, sc, store.ListTasksParams{Limit: 10})
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		_, err = s.GetOrganization(ctx, sc, b.org.ID)
		require.NoError(t, err)
		_, err = s.GetWorker(ctx, sc, b.worker.ID, onlineWindow)
		require.NoError(t, err)
		_, err = s.GetAPIToken(ctx, sc, tokenID)
		require.NoError(t, err)
		st, err := s.Stats(ctx, sc, store.StatsParams{OnlineWindow: onlineWindow, LeaseWindow: time.Minute, FailureWindow: time.Minute})
		require.NoError(t, err)
		require.Equal(t, []store.QueueDepth{{OrganizationID: b.org.ID, State: task.State, Count: 1}}, st.Queue)
		require.EqualValues(t, 1, st.WorkersTotal)
	}
	for name, sc := range hidden {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.GetTask(ctx, sc, task.ID, onlineWindow)
			require.ErrorIs(t, err, store.ErrNotFound)
			tasks, _, err := s.ListTasks(ctx, sc, store.ListTasksParams{Limit: 10})
			require.NoError(t, err)
			require.Empty(t, tasks)
			_, err = s.GetOrganization(ctx, sc, b.org.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			orgs, _, err := s.ListOrganizations(ctx, sc, nil, 10)
			require.NoError(t, err)
			for _, o := range orgs {
				require.NotEqual(t, b.org.ID, o.ID)
			}
			_, err = s.GetWorker(ctx, sc, b.worker.ID, onlineWindow)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.GetAPIToken(ctx, sc, tokenID)
			require.ErrorIs(t, err, store.ErrNotFound)
			tokens, err := s.ListAPITokens(ctx, sc)
			require.NoError(t, err)
			for _, tok := range tokens {
				require.NotEqual(t, tokenID, tok.ID)
			}
			_, err = s.CancelTask(ctx, sc, task.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.CreateTask(ctx, sc, store.CreateTaskParams{OrganizationID: b.org.ID, TaskType: "scanner_plugin",
				Payload: []byte(`{"plugin":"echo"}`)})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, _, err = s.CreateAPIToken(ctx, sc, store.CreateAPITokenParams{Name: "x", Permissions: []string{"reader"},
				OrganizationID: &b.org.ID})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.UpdateWorker(ctx, sc, b.worker.ID, store.UpdateWorkerParams{}, onlineWindow)
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = s.CreateOrganization(ctx, sc, uniqueName("x"), store.ScopePolicyAllowList)
			require.ErrorIs(t, err, store.ErrForbidden)
			st, err := s.Stats(ctx, sc, store.StatsParams{OnlineWindow: onlineWindow, LeaseWindow: time.Minute, FailureWindow: time.Minute})
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
