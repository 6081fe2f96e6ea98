package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Scan scope, asset history, threat exclusions and redrives of scan jobs,
// end to end through a real gateway and the reference worker.

func addScope(t *testing.T, c *apiclient.ClientWithResponses, org uuid.UUID, kind, value string) *http.Response {
	t.Helper()
	res, err := c.AddScopeTargetWithResponse(context.Background(), org, apiclient.CreateScopeTargetRequest{Kind: apiclient.ScopeTargetKind(kind), Value: value})
	require.NoError(t, err)
	return res.HTTPResponse
}

func TestScanScopeRefusesOutOfScopeTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	other := g.NewOrganization(t, "other")

	// An organization's admin cannot widen its own scope: the platform
	// operator approves targets.
	orgAdmin := scopedClient(t, g, org, "admin")
	require.Equal(t, http.StatusForbidden, addScope(t, orgAdmin, org, "cidr", "0.0.0.0/0").StatusCode)
	require.Equal(t, http.StatusCreated, addScope(t, g.Control, org, "cidr", "127.0.0.0/8").StatusCode)
	require.Equal(t, http.StatusOK, addScope(t, g.Control, org, "cidr", "127.0.0.1/8").StatusCode, "the same entry, canonically")
	require.Equal(t, http.StatusBadRequest, addScope(t, g.Control, org, "cidr", "not a prefix").StatusCode)
	require.Equal(t, http.StatusCreated, addScope(t, g.Control, org, "domain", "*.example.com").StatusCode)

	res, err := g.Control.CreateScanWithResponse(ctx, nil, apiclient.CreateScanRequest{OrganizationId: org,
		Targets: []string{"127.0.0.1", "10.0.0.1", "www.example.com", "https://evil.test/"}, Plugins: []apiclient.ScanPlugin{{Name: "echo"}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, res.StatusCode(), string(res.Body))
	require.Equal(t, "application/problem+json", res.HTTPResponse.Header.Get("Content-Type"))
	var p struct {
		Code    string   `json:"code"`
		Targets []string `json:"out_of_scope_targets"`
	}
	require.NoError(t, json.Unmarshal(res.Body, &p))
	require.Equal(t, "target-out-of-scope", p.Code)
	require.Equal(t, []string{"10.0.0.1", "https://evil.test/"}, p.Targets)
	createScan(t, g, org, []string{"127.0.0.1", "a.example.com"}, `[{"name": "echo"}]`)
	createScan(t, g, other, []string{"10.0.0.1"}, `[{"name": "echo"}]`) // no scope configured: not enforced

	list, err := scopedClient(t, g, org, "reader").ListScopeTargetsWithResponse(ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode())
	require.True(t, list.JSON200.Enforced)
	require.Len(t, list.JSON200.Items, 2)
	hidden, err := scopedClient(t, g, other, "admin").ListScopeTargetsWithResponse(ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, hidden.StatusCode(), "another organization's scope is not found")

	removed, err := g.Control.RemoveScopeTargetWithResponse(ctx, org, list.JSON200.Items[0].Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, removed.StatusCode())
	events, err := g.Control.ListAuditEventsWithResponse(ctx, &apiclient.ListAuditEventsParams{TargetId: ptr(list.JSON200.Items[0].Id.String())})
	require.NoError(t, err)
	var actions []string
	for _, e := range events.JSON200.Items {
		actions = append(actions, e.Action)
	}
	require.ElementsMatch(t, []string{"scope.add", "scope.remove"}, actions)
}

// TestScanChangesAfterTwoScans scans a loopback server twice with the
// reference worker, a port opening between the scans: the second scan's
// changes show it. An exclusion made between the scans hides the
// self-signed certificate finding, and flags its second detection.
func TestScanChangesAfterTwoScans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	target := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<title>target</title>")
	}))
	t.Cleanup(target.Close)
	_, openPort, err := net.SplitHostPort(target.Listener.Addr().String())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, latePort, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, ln.Close())

	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	other := g.NewOrganization(t, "other")
	require.Equal(t, http.StatusCreated, addScope(t, g.Control, org, "cidr", "127.0.0.0/8").StatusCode)
	w := g.NewWorker(t, "scanner", 2, org)
	w.Process(t, g.URL, "-slots", "2")

	plugins := fmt.Sprintf(`[{"name": "tcp-connect", "input": {"ports": [%s, %s], "timeout_ms": 2000}}, {"name": "http-probe"}]`, openPort, latePort)
	first := waitScan(t, g, createScan(t, g, org, []string{"127.0.0.1"}, plugins).Id)
	require.Equal(t, apiclient.ScanState("completed"), first.State)
	var output struct {
		Records     map[string]int `json:"records"`
		ArtifactIDs []uuid.UUID    `json:"artifact_ids"`
	}
	require.NotNil(t, first.Jobs[0].Output)
	require.NoError(t, json.Unmarshal(*first.Jobs[0].Output, &output))
	require.Equal(t, 1, output.Records["asset"], "tcp-connect found one open port")
	require.Len(t, output.ArtifactIDs, 1, "its report")
	noChanges, err := g.Control.ListScanChangesWithResponse(ctx, first.Id, nil)
	require.NoError(t, err)
	require.Empty(t, noChanges.JSON200.Items, "the first scan is the baseline")

	exclusion, err := g.Control.CreateThreatExclusionWithResponse(ctx, org, apiclient.CreateThreatExclusionRequest{
		ExternalId: ptr("tls-certificate-self-signed"), AssetPattern: ptr("https://127.0.0.1:*"), Reason: "test server"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, exclusion.StatusCode(), string(exclusion.Body))

	late, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", latePort))
	require.NoError(t, err)
	lateSrv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<title>late</title>")
	})}
	go func() { _ = lateSrv.Serve(late) }()
	t.Cleanup(func() { _ = lateSrv.Close() })

	second := waitScan(t, g, createScan(t, g, org, []string{"127.0.0.1"}, plugins).Id)
	require.Equal(t, apiclient.ScanState("completed"), second.State)
	changes, err := g.Control.ListScanChangesWithResponse(ctx, second.Id, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, changes.StatusCode(), string(changes.Body))
	got := map[string]bool{}
	for _, c := range changes.JSON200.Items {
		got[string(c.Kind)+" "+c.Asset.Type+":"+c.Asset.Value] = true
		require.Equal(t, first.Id, *c.PreviousScanId)
	}
	latePortAsset := net.JoinHostPort("127.0.0.1", latePort)
	require.True(t, got["port_opened port:"+latePortAsset], "changes: %v", got)
	require.True(t, got["asset_appeared url:https://"+latePortAsset+"/"] || got["asset_appeared url:http://"+latePortAsset+"/"], "changes: %v", got)
	require.Len(t, got, 2, "nothing else changed: %v", got)

	kind := apiclient.ChangeKinds{apiclient.PortOpened}
	timeline, err := scopedClient(t, g, org, "reader").ListExposureChangesWithResponse(ctx, org, &apiclient.ListExposureChangesParams{Kind: &kind})
	require.NoError(t, err)
	require.Len(t, timeline.JSON200.Items, 1)
	require.Equal(t, latePortAsset, timeline.JSON200.Items[0].Asset.Value)
	stranger := scopedClient(t, g, other, "admin")
	hidden, err := stranger.ListScanChangesWithResponse(ctx, second.Id, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, hidden.StatusCode())
	hiddenTimeline, err := stranger.ListExposureChangesWithResponse(ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, hiddenTimeline.StatusCode())

	// The exclusion hides the finding by default; it is still there, and
	// flagged, on request.
	visible, err := g.Control.ListThreatsWithResponse(ctx, org, nil)
	require.NoError(t, err)
	for _, th := range visible.JSON200.Items {
		require.NotEqual(t, "tls-certificate-self-signed", *th.ExternalId, "excluded threats are hidden")
	}
	all, err := g.Control.ListThreatsWithResponse(ctx, org, &apiclient.ListThreatsParams{IncludeExcluded: ptr(true)})
	require.NoError(t, err)
	var excluded *apiclient.Threat
	for i, th := range all.JSON200.Items {
		if *th.ExternalId == "tls-certificate-self-signed" {
			excluded = &all.JSON200.Items[i]
		}
	}
	require.NotNil(t, excluded)
	require.True(t, *excluded.Excluded)
	require.Equal(t, exclusion.JSON201.Id, *excluded.ExclusionId)
	require.Equal(t, 2, excluded.Detections, "both scans' detections are recorded")
	require.NotNil(t, excluded.Vulnerability)
	require.Equal(t, []string{"CWE-295"}, *excluded.Vulnerability.CweIds)
	var flagged int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM threat_detections WHERE threat_id = $1 AND excluded`, excluded.Id).Scan(&flagged))
	require.Equal(t, 1, flagged, "the detection after the exclusion is flagged")

	edges, err := scopedClient(t, g, org, "reader").ListAssetEdgesWithResponse(ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, edges.StatusCode(), string(edges.Body))
	hasPort := map[string]int{}
	for _, e := range edges.JSON200.Items {
		if e.Relation == apiclient.HasPort {
			hasPort[e.From.Value+" "+e.To.Value]++
		}
	}
	require.Equal(t, map[string]int{"127.0.0.1 " + net.JoinHostPort("127.0.0.1", openPort): 1, "127.0.0.1 " + latePortAsset: 1}, hasPort,
		"127.0.0.1 has both ports, each edge once")
	hiddenEdges, err := stranger.ListAssetEdgesWithResponse(ctx, org, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, hiddenEdges.StatusCode())
}

// TestRedriveReopensFinishedScan redrives a failed job: while a later job
// of its scan runs it is refused (one job at a time); once the scan has
// finished the redrive reopens it, and it completes again.
func TestRedriveReopensFinishedScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "scanner", 2, org)
	w.Process(t, g.URL, "-slots", "2")

	// The second job needs a capability no worker has: it stays queued, in
	// flight, for as long as the test needs.
	scan := createScan(t, g, org, []string{"127.0.0.1"}, `[{"name": "fail"}, {"name": "echo", "required_capabilities": {"unobtainium": true}}]`)
	var running *apiclient.Scan
	harness.WaitFor(t, 60*time.Second, "the first job to fail", func() bool {
		res, err := g.Control.GetScanWithResponse(ctx, scan.Id)
		require.NoError(t, err)
		running = res.JSON200
		return running.Jobs[1].Task != nil
	})
	require.Equal(t, apiclient.ScanState("failed"), running.Jobs[0].State)
	failedTask := running.Jobs[0].Task.Id
	busy, err := g.Control.RetryTaskWithResponse(ctx, failedTask)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, busy.StatusCode())
	require.Contains(t, string(busy.Body), `"code":"scan-busy"`)

	// Cancelling the queued job ends the scan (completed: not every job
	// failed); then the failed job is redriven.
	cancel, err := g.Control.CancelTaskWithResponse(ctx, running.Jobs[1].Task.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
	done := waitScan(t, g, scan.Id)
	require.Equal(t, apiclient.ScanState("completed"), done.State)

	redriven, err := g.Control.RetryTaskWithResponse(ctx, failedTask)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, redriven.StatusCode(), string(redriven.Body))
	// The job may run and fail again at once, so the reopened scan is seen
	// by its completing a second time (the store's tests see it running).
	var again *apiclient.Scan
	harness.WaitFor(t, 60*time.Second, "the reopened scan to complete again", func() bool {
		res, err := g.Control.GetScanWithResponse(ctx, scan.Id)
		require.NoError(t, err)
		again = res.JSON200
		return again.CompletedAt != nil && again.CompletedAt.After(*done.CompletedAt)
	})
	require.Contains(t, []apiclient.ScanState{"completed", "failed"}, again.State)
	require.Equal(t, apiclient.ScanState("failed"), again.Jobs[0].State, "the fail plugin failed again")
	task := g.Task(t, failedTask)
	require.Len(t, task.Attempts, 2, "one attempt before the redrive, one after")
}
