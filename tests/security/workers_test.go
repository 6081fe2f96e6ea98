package security

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestSharedWorkerShowsEachOrganizationOnlyItsOwn: a worker owned by B and
// shared with A (B grants, A's admin assigns) serves both, and each
// organization's callers see only their own assignment and active attempts
// of it; only the owner and unscoped callers see the owner.
func TestSharedWorkerShowsEachOrganizationOnlyItsOwn(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	a, b := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	adminA := g.ControlClient(t, scopedToken(t, g, a, "admin"))
	readerA := g.ControlClient(t, scopedToken(t, g, a, "reader"))
	adminB := g.ControlClient(t, scopedToken(t, g, b, "admin"))
	readerB := g.ControlClient(t, scopedToken(t, g, b, "reader"))

	// B's admin creates the worker: B owns it and it serves B.
	worker := g.NewWorker(t, "shared", 4)
	created, err := adminB.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: "b-owned", WorkerType: "scanner"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	require.Equal(t, &b, created.JSON201.OwnerOrganizationId)
	require.Equal(t, []uuid.UUID{b}, created.JSON201.OrganizationIds)
	// The shared worker of this test is the harness's (it has a
	// certificate); B owns it as an unscoped admin would record it.
	_, err = g.Pool.Exec(ctx, `UPDATE workers SET owner_organization_id = $2 WHERE id = $1`, worker.ID, b)
	require.NoError(t, err)
	g.Assign(t, b, worker.ID)

	// Without a grant, A cannot see or assign it.
	assign, err := adminA.AssignWorkerWithResponse(ctx, a, worker.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, assign.StatusCode(), string(assign.Body))
	// With B's grant, A's admin assigns it.
	grant, err := adminB.GrantWorkerWithResponse(ctx, worker.ID, a)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, grant.StatusCode(), string(grant.Body))
	assign, err = adminA.AssignWorkerWithResponse(ctx, a, worker.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, assign.StatusCode(), string(assign.Body))
	// A cannot manage B's worker, only use it.
	rename := "mine now"
	update, err := adminA.UpdateWorkerWithResponse(ctx, worker.ID, nil, apiclient.UpdateWorkerRequest{Name: &rename})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, update.StatusCode(), string(update.Body))

	// One active attempt in each organization.
	taskA := g.CreateTask(t, a, harness.TaskSpec{})
	taskB := g.CreateTask(t, b, harness.TaskSpec{})
	caller := workerCaller{g: g, http: worker.HTTP}
	var leases struct {
		Leases []struct {
			AttemptID uuid.UUID `json:"attempt_id"`
		} `json:"leases"`
	}
	for len(leases.Leases) < 2 {
		var more struct {
			Leases []struct {
				AttemptID uuid.UUID `json:"attempt_id"`
			} `json:"leases"`
		}
		caller.mustJSON(t, "POST", "/v1/leases", "", map[string]any{"max_tasks": 2, "wait_seconds": 5}, http.StatusOK, &more)
		leases.Leases = append(leases.Leases, more.Leases...)
	}
	attemptB := g.Task(t, taskB).Attempts[0].Id

	seenBy := func(c *apiclient.ClientWithResponses, org uuid.UUID) []apiclient.Worker {
		t.Helper()
		one, err := c.GetWorkerWithResponse(ctx, worker.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, one.StatusCode(), string(one.Body))
		list, err := c.ListWorkersWithResponse(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
		orgList, err := c.ListOrganizationWorkersWithResponse(ctx, org)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, orgList.StatusCode(), string(orgList.Body))
		views := []apiclient.Worker{*one.JSON200}
		for _, w := range list.JSON200.Items {
			if w.Id == worker.ID {
				views = append(views, w)
			}
		}
		for _, w := range orgList.JSON200.Items {
			if w.Worker.Id == worker.ID {
				views = append(views, w.Worker)
			}
		}
		require.Len(t, views, 3)
		for _, raw := range [][]byte{one.Body, list.Body, orgList.Body} {
			if org == a {
				require.NotContains(t, string(raw), b.String(), "A's view names B")
				require.NotContains(t, string(raw), attemptB.String(), "A's view shows B's attempt")
				require.NotContains(t, string(raw), taskB.String(), "A's view shows B's task")
			}
		}
		return views
	}
	for _, w := range seenBy(readerA, a) {
		require.Equal(t, []uuid.UUID{a}, w.OrganizationIds)
		require.Equal(t, 1, w.ActiveAttempts)
		require.Nil(t, w.OwnerOrganizationId, "only the owner sees the owner")
	}
	for _, w := range seenBy(readerB, b) {
		require.Equal(t, []uuid.UUID{b}, w.OrganizationIds)
		require.Equal(t, 1, w.ActiveAttempts)
		require.Equal(t, &b, w.OwnerOrganizationId)
	}
	all, err := g.Control.GetWorkerWithResponse(ctx, worker.ID)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{a, b}, all.JSON200.OrganizationIds)
	require.Equal(t, 2, all.JSON200.ActiveAttempts)

	// B withdraws the grant: A's assignment goes with it, A's attempt is
	// cancelled, and A no longer sees the worker.
	withdraw, err := adminB.RevokeWorkerGrantWithResponse(ctx, worker.ID, a, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, withdraw.StatusCode(), string(withdraw.Body))
	gone, err := readerA.GetWorkerWithResponse(ctx, worker.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, gone.StatusCode())
	g.WaitTaskState(t, taskA, "pending")
	assign, err = adminA.AssignWorkerWithResponse(ctx, a, worker.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, assign.StatusCode(), string(assign.Body))
}

// TestUnscopedRemovalIsFinalForOrganizationAdmins: after an unscoped admin
// removes an assignment (a security removal), the organization's admin
// cannot restore it — 404 when it can no longer see the worker, 403 when a
// grant still shows it — while an unscoped admin can.
func TestUnscopedRemovalIsFinalForOrganizationAdmins(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	a, b := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	adminA := g.ControlClient(t, scopedToken(t, g, a, "admin"))

	platform := g.NewWorker(t, "platform", 1, a)
	res, err := g.Control.UnassignWorkerWithResponse(ctx, a, platform.ID, &apiclient.UnassignWorkerParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	again, err := adminA.AssignWorkerWithResponse(ctx, a, platform.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, again.StatusCode(), string(again.Body))

	// A worker owned by B and granted to A: A sees it, yet may not undo the
	// unscoped admin's removal.
	owned := g.NewWorker(t, "owned-by-b", 1)
	_, err = g.Pool.Exec(ctx, `UPDATE workers SET owner_organization_id = $2 WHERE id = $1`, owned.ID, b)
	require.NoError(t, err)
	grant, err := g.Control.GrantWorkerWithResponse(ctx, owned.ID, a)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, grant.StatusCode(), string(grant.Body))
	first, err := adminA.AssignWorkerWithResponse(ctx, a, owned.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
	res, err = g.Control.UnassignWorkerWithResponse(ctx, a, owned.ID, &apiclient.UnassignWorkerParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	again, err = adminA.AssignWorkerWithResponse(ctx, a, owned.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, again.StatusCode(), string(again.Body))
	restored, err := g.Control.AssignWorkerWithResponse(ctx, a, owned.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, restored.StatusCode(), string(restored.Body))

	// An organization admin's own removal it may undo.
	res, err = adminA.UnassignWorkerWithResponse(ctx, a, owned.ID, &apiclient.UnassignWorkerParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	again, err = adminA.AssignWorkerWithResponse(ctx, a, owned.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
}
