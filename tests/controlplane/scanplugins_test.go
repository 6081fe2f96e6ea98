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

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestThreePluginScanWithTheReferenceWorker runs a real scan of loopback
// targets with the reference worker binary: dns-resolve finds localhost's
// addresses, tcp-connect finds a local TLS server's port among them, and
// http-probe fetches it and reports its self-signed certificate.
func TestThreePluginScanWithTheReferenceWorker(t *testing.T) {
	t.Parallel()
	target := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Server", "demo-target")
		fmt.Fprint(w, "<html><head><title>Demo target</title></head><body>hi</body></html>")
	}))
	t.Cleanup(target.Close)
	_, port, err := net.SplitHostPort(target.Listener.Addr().String())
	require.NoError(t, err)

	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "scanner", 2, org)
	w.Process(t, g.URL, "-slots", "2")

	scan := createScan(t, g, org, []string{"localhost"}, fmt.Sprintf(`[
		{"name": "dns-resolve"},
		{"name": "tcp-connect", "input": {"ports": [%s], "timeout_ms": 2000}},
		{"name": "http-probe"}]`, port))
	var got *apiclient.Scan
	harness.WaitFor(t, 90*time.Second, "the scan to finish", func() bool {
		res, err := g.Control.GetScanWithResponse(context.Background(), scan.Id)
		require.NoError(t, err)
		got = res.JSON200
		return got.State == "completed" || got.State == "failed"
	})
	require.Equal(t, apiclient.ScanState("completed"), got.State)
	for i, j := range got.Jobs {
		require.Equal(t, apiclient.ScanState("completed"), j.State, "job %d (%s): %v", i, j.PluginName, j.Error)
		if i > 0 {
			require.False(t, j.StartedAt.Before(*got.Jobs[i-1].CompletedAt), "job %d started only after job %d ended", i, i-1)
		}
	}
	// Job 2 (tcp-connect) was given the addresses job 1 found.
	var payload jobPayload
	require.NoError(t, json.Unmarshal(got.Jobs[1].Task.Payload, &payload))
	found := map[string]bool{}
	for _, a := range payload.Assets {
		found[a.Type+":"+a.Value] = true
	}
	require.True(t, found["ip:127.0.0.1"], "job 2's payload carries job 1's assets: %v", payload.Assets)

	assets, err := g.Control.ListAssetsWithResponse(context.Background(), org, &apiclient.ListAssetsParams{})
	require.NoError(t, err)
	types := map[string]int{}
	for _, a := range assets.JSON200.Items {
		types[a.Type]++
	}
	require.Positive(t, types["hostname"])
	require.Positive(t, types["ip"])
	require.Positive(t, types["port"])
	require.Positive(t, types["url"])
	threats, err := g.Control.ListThreatsWithResponse(context.Background(), org, &apiclient.ListThreatsParams{})
	require.NoError(t, err)
	var selfSigned bool
	for _, th := range threats.JSON200.Items {
		selfSigned = selfSigned || (th.ExternalId != nil && *th.ExternalId == "tls-certificate-self-signed")
	}
	require.True(t, selfSigned, "http-probe reports the self-signed certificate: %+v", threats.JSON200.Items)

	// Each job wrote its log and uploaded a report artifact.
	for _, j := range got.Jobs {
		files, err := g.Control.ListTaskArtifactsWithResponse(context.Background(), j.Task.Id)
		require.NoError(t, err)
		require.Len(t, files.JSON200.Items, 1, j.PluginName)
		f := files.JSON200.Items[0]
		require.Equal(t, "report.json", f.Name)
		res, err := g.Control.GetFileContent(context.Background(), f.Id)
		require.NoError(t, err)
		var report struct {
			Plugin    string         `json:"plugin"`
			ScanJobID string         `json:"scan_job_id"`
			Records   int            `json:"records"`
			ByKind    map[string]int `json:"by_kind"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&report))
		res.Body.Close()
		require.Equal(t, j.PluginName, report.Plugin)
		require.Equal(t, j.Id.String(), report.ScanJobID)
		sum := 0
		for _, n := range report.ByKind {
			sum += n
		}
		require.Equal(t, report.Records, sum)
		text := readLog(t, g, j.Task.Id, 0, false)
		require.Contains(t, text.Data, j.PluginName+" done: ")
	}
}
