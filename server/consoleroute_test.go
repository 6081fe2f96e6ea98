package server

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
)

// TestConsoleChecks: the console's queries and bodies are checked by the
// contract, as the API's request validator checks them, and queries are
// bound into the generated params as the generated wrapper binds them.
func TestConsoleChecks(t *testing.T) {
	t.Parallel()
	s := &Server{}
	bindQuery, checkBody, err := s.consoleChecks()
	require.NoError(t, err)

	org := uuid.New()
	var tasks api.ListTasksParams
	require.NoError(t, bindQuery("/v1/tasks", url.Values{"state": {"pending"}, "organization_id": {org.String()}, "limit": {"50"}}, &tasks))
	require.Equal(t, api.TaskStatePending, *tasks.State)
	require.Equal(t, org, *tasks.OrganizationId)
	require.Equal(t, 50, *tasks.Limit)
	require.Nil(t, tasks.TaskType)

	var changes api.ListExposureChangesParams
	require.NoError(t, bindQuery("/v1/organizations/"+org.String()+"/exposure-changes",
		url.Values{"kind": {"port_opened", "asset_appeared"}}, &changes))
	require.Equal(t, []api.ChangeKind{api.PortOpened, api.AssetAppeared}, *changes.Kind)

	for name, q := range map[string]url.Values{
		"an unknown state":    {"state": {"bogus"}},
		"a malformed id":      {"scan_id": {"x"}},
		"a page too large":    {"limit": {"100000"}},
		"a page of nothing":   {"limit": {"0"}},
		"a limit not integer": {"limit": {"many"}},
	} {
		err := bindQuery("/v1/tasks", q, &api.ListTasksParams{})
		var p *Problem
		require.True(t, errors.As(err, &p), "%s: %v", name, err)
		require.Equal(t, http.StatusBadRequest, p.Status, name)
		require.Equal(t, problem.BadRequest, p.Code, name)
	}

	require.NoError(t, checkBody(http.MethodPost, "/v1/workers/"+org.String()+"/revoke", api.RevokeRequest{Reason: "key leaked"}))
	err = checkBody(http.MethodPost, "/v1/workers/"+org.String()+"/revoke", api.RevokeRequest{})
	var p *Problem
	require.True(t, errors.As(err, &p), "%v", err)
	require.Equal(t, problem.BadRequest, p.Code)
	require.Contains(t, string(p.Detail), "reason")

	// A path that is no API route is the console's own bug, not a 400.
	err = bindQuery("/v1/no-such-route", nil, &api.ListTasksParams{})
	require.Error(t, err)
	require.False(t, errors.As(err, &p))
}
