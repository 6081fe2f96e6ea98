package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
	"github.com/worker-gateway/gateway/workerclient/workerclienttest"
)

// report is the report.json the job uploaded.
func report(t *testing.T, rec *workerclienttest.Recorder) Report {
	t.Helper()
	require.Len(t, rec.Artifacts(), 1)
	f, ok := rec.Artifact("report.json")
	require.True(t, ok)
	assert.Equal(t, "application/json", f.ContentType)
	var r Report
	require.NoError(t, json.Unmarshal(f.Data, &r), string(f.Data))
	return r
}

func TestScannerJobLogsAndUploadsItsReport(t *testing.T) {
	open := openPort(t)
	c, rec := newCall(t, fmt.Sprintf(`{"addresses": ["127.0.0.1:%d"], "timeout_ms": 1000}`, open), nil, nil)
	c.Plugin = "tcp-connect"
	require.NoError(t, runScanner(t.Context(), tcpConnectPlugin, c))

	r := report(t, rec)
	assert.Equal(t, "tcp-connect", r.Plugin)
	assert.Equal(t, c.Task.ID, r.TaskID)
	assert.Equal(t, c.Task.AttemptID, r.AttemptID)
	assert.Equal(t, 2, r.Records)
	assert.Equal(t, map[string]int{"asset": 1, "edge": 1}, r.ByKind)
	assert.Equal(t, map[string]map[string]int{"asset": {"port": 1}, "edge": {"ip": 1}}, r.ByType)
	assert.Empty(t, r.Severities)
	assert.Equal(t, "tcp-connect: connecting to 1 addresses (timeout 1s)\n"+
		"tcp-connect: 1 of 1 addresses accept connections\n"+
		"tcp-connect done: 2 records emitted\n", rec.Log())
}

func TestReportCountsWhatWasDeliveredByKindAndType(t *testing.T) {
	c, rec := newCall(t, "", nil, nil)
	c.Plugin = "http-probe"
	url := apiclient.AssetRef{Type: "url", Value: "https://127.0.0.1/"}
	data := apiclient.JSONObject(`{"n": 1}`)
	run := func(ctx context.Context, c *Call) error {
		if err := c.Emit(ctx, assetRecord("ip", "127.0.0.1", nil), assetRecord("ip", "::1", nil),
			assetRecord("url", url.Value, nil),
			threatRecord(url, "tls-certificate-expired", "expired", apiclient.High, nil),
			threatRecord(url, "tls-certificate-self-signed", "self-signed", apiclient.Medium, nil),
			apiclient.ResultRecord{Kind: apiclient.ResultRecordKindData, Data: &data}); err != nil {
			return err
		}
		rec.FailEmit(errors.New("refused"))
		_ = c.Emit(ctx, assetRecord("ip", "10.0.0.1", nil)) // not delivered: not counted
		return nil
	}
	require.NoError(t, runScanner(t.Context(), run, c))
	r := report(t, rec)
	assert.Equal(t, 6, r.Records)
	assert.Equal(t, map[string]int{"asset": 3, "threat": 2, "data": 1}, r.ByKind)
	assert.Equal(t, map[string]map[string]int{"asset": {"ip": 2, "url": 1}, "threat": {"url": 2}}, r.ByType)
	assert.Equal(t, map[string]int{"high": 1, "medium": 1}, r.Severities)
}

func TestReportUploadFailures(t *testing.T) {
	nothing := func(context.Context, *Call) error { return nil }

	// A report that cannot be stored does not fail the job…
	c, rec := newCall(t, "", nil, nil)
	c.Plugin = "dns-resolve"
	rec.FailUpload(errors.New("artifacts disabled"))
	require.NoError(t, runScanner(t.Context(), nothing, c))
	assert.Contains(t, rec.Log(), "report.json could not be uploaded: artifacts disabled")

	// …but a lost lease or a cancellation ends it.
	rec.FailUpload(fmt.Errorf("open upload: %w", workerclient.ErrLeaseLost))
	assert.ErrorIs(t, runScanner(t.Context(), nothing, c), workerclient.ErrLeaseLost)
	rec.FailUpload(nil)
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(workerclient.ErrCancelRequested)
	assert.ErrorIs(t, runScanner(ctx, nothing, c), workerclient.ErrCancelRequested)
	assert.Empty(t, rec.Artifacts())

	// A failed job uploads nothing.
	c, rec = newCall(t, "", nil, nil)
	c.Plugin = "dns-resolve"
	boom := workerclient.Retryable("target-unreachable", "refused")
	assert.ErrorIs(t, runScanner(t.Context(), func(context.Context, *Call) error { return boom }, c), boom)
	assert.Empty(t, rec.Artifacts())
}

func TestOnlyScannersUploadReports(t *testing.T) {
	for _, name := range pluginNames() {
		want := name == "dns-resolve" || name == "tcp-connect" || name == "http-probe"
		assert.Equal(t, want, scanners[name], name)
	}
	// Through the worker's Handler, as a Worker runs it.
	_, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{Payload: `{"plugin":"tcp-connect"}`})
	require.NoError(t, rec.Run(handle(slog.New(slog.DiscardHandler))))
	assert.Equal(t, "tcp-connect", report(t, rec).Plugin)
	assert.Equal(t, apiclient.AttemptOutcomeSucceeded, rec.Outcome().Outcome)
	_, rec = workerclienttest.NewTask(t, workerclienttest.TaskOptions{Payload: `{"plugin":"echo"}`})
	require.NoError(t, rec.Run(handle(slog.New(slog.DiscardHandler))))
	assert.Empty(t, rec.Artifacts())
}
