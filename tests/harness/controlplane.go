package harness

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Control-plane calls the black-box tests share.

// ReadLog reads a task's log from offset through the control plane.
func ReadLog(t testing.TB, g *Gateway, task uuid.UUID, offset int, follow bool) *apiclient.LogText {
	t.Helper()
	params := &apiclient.GetTaskLogsParams{Offset: &offset, Follow: &follow}
	res, err := g.Control.GetTaskLogsWithResponse(context.Background(), task, params)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200
}

// CreateScan creates a scan of targets with plugins given as JSON.
func CreateScan(t testing.TB, g *Gateway, org uuid.UUID, targets []string, plugins string) *apiclient.Scan {
	t.Helper()
	var ps []apiclient.ScanPlugin
	require.NoError(t, json.Unmarshal([]byte(plugins), &ps))
	res, err := g.Control.CreateScanWithResponse(context.Background(), nil, apiclient.CreateScanRequest{
		OrganizationId: org, Targets: targets, Plugins: ps})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201
}

// WaitScan waits for a scan to end and returns it.
func WaitScan(t testing.TB, g *Gateway, id uuid.UUID) *apiclient.Scan {
	t.Helper()
	var got *apiclient.Scan
	WaitFor(t, 90*time.Second, "the scan to finish", func() bool {
		res, err := g.Control.GetScanWithResponse(context.Background(), id)
		require.NoError(t, err)
		got = res.JSON200
		return got.State == "completed" || got.State == "failed" || got.State == "cancelled"
	})
	return got
}

// EverySecondTask is a schedule of a task per second whose runs may overlap
// (no worker runs them, so they stay pending).
func EverySecondTask(org uuid.UUID, name string) apiclient.CreateScheduleRequest {
	allow := apiclient.ScheduleOverlapAllow
	return apiclient.CreateScheduleRequest{OrganizationId: org, Name: name,
		Timing: apiclient.ScheduleTiming{IntervalSeconds: Ptr(1), Overlap: &allow},
		Definition: apiclient.ScheduleDefinition{Kind: apiclient.ScheduleDefinitionKindTask, Task: &apiclient.ScheduledTask{
			TaskType: apiclient.TaskTypeScannerPlugin, Payload: Ptr(apiclient.JSONObject(`{"plugin": "echo"}`))}}}
}

// CreateSchedule creates a schedule through the control plane.
func CreateSchedule(t testing.TB, g *Gateway, req apiclient.CreateScheduleRequest) apiclient.Schedule {
	t.Helper()
	res, err := g.Control.CreateScheduleWithResponse(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return *res.JSON201
}

// Unassign ends an assignment; active says what happens to running work ("" is the default).
func Unassign(t testing.TB, g *Gateway, org, worker uuid.UUID, active string) *apiclient.Assignment {
	t.Helper()
	params := &apiclient.UnassignWorkerParams{}
	if active != "" {
		params.Active = Ptr(apiclient.UnassignWorkerParamsActive(active))
	}
	res, err := g.Control.UnassignWorkerWithResponse(context.Background(), org, worker, params)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200
}

// ProducerTokenParams are a producer token's parameters scoped to org.
func ProducerTokenParams(org uuid.UUID) store.CreateAPITokenParams {
	return store.CreateAPITokenParams{Name: "scoped", Permissions: []string{"producer"}, OrganizationID: &org}
}

// ScopedClient is a control-plane client with one permission, scoped to org.
func ScopedClient(t testing.TB, g *Gateway, org uuid.UUID, permission string) *apiclient.ClientWithResponses {
	t.Helper()
	token, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(),
		store.CreateAPITokenParams{Name: permission, Permissions: []string{permission}, OrganizationID: &org})
	require.NoError(t, err)
	return g.ControlClient(t, token)
}
