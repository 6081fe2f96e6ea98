package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// uploaded is an artifact given to a fake Uploader.
type uploaded struct {
	name, contentType string
	body              []byte
}

// fakeUploader keeps what it is given and answers err when set.
type fakeUploader struct {
	files []uploaded
	err   error
}

func (u *fakeUploader) upload(_ context.Context, name, contentType string, r io.Reader) (*apiclient.File, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	u.files = append(u.files, uploaded{name, contentType, body})
	if u.err != nil {
		return nil, u.err
	}
	return &apiclient.File{Id: uuid.New(), Name: name, ContentType: contentType, SizeBytes: int64(len(body))}, nil
}

func (u *fakeUploader) report(t *testing.T) Report {
	t.Helper()
	require.Len(t, u.files, 1)
	f := u.files[0]
	assert.Equal(t, "report.json", f.name)
	assert.Equal(t, "application/json", f.contentType)
	var r Report
	require.NoError(t, json.Unmarshal(f.body, &r), string(f.body))
	return r
}

func TestScannerJobLogsAndUploadsItsReport(t *testing.T) {
	open := openPort(t)
	rec := &recorder{}
	up := &fakeUploader{}
	c := newCall(t, fmt.Sprintf(`{"addresses": ["127.0.0.1:%d"], "timeout_ms": 1000}`, open), nil, nil, rec)
	c.Plugin, c.Upload = "tcp-connect", up.upload
	c.Task = &workerclient.LeasedTask{ID: uuid.New(), AttemptID: uuid.New(), Type: "scanner_plugin"}
	require.NoError(t, runScanner(t.Context(), tcpConnectPlugin, c))

	r := up.report(t)
	assert.Equal(t, "tcp-connect", r.Plugin)
	assert.Equal(t, c.Task.ID, r.TaskID)
	assert.Equal(t, c.Task.AttemptID, r.AttemptID)
	assert.Equal(t, 1, r.Records)
	assert.Equal(t, map[string]int{"asset": 1}, r.ByKind)
	assert.Equal(t, map[string]map[string]int{"asset": {"port": 1}}, r.ByType)
	assert.Empty(t, r.Severities)
	assert.Equal(t, "tcp-connect: connecting to 1 addresses (timeout 1s)\n"+
		"tcp-connect: 1 of 1 addresses accept connections\n"+
		"tcp-connect done: 1 records emitted\n", rec.out.String())
}

func TestReportCountsWhatWasDeliveredByKindAndType(t *testing.T) {
	rec := &recorder{}
	up := &fakeUploader{}
	c := newCall(t, "", nil, nil, rec)
	c.Plugin, c.Upload = "http-probe", up.upload
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
		rec.mu.Lock()
		rec.err = errors.New("refused")
		rec.mu.Unlock()
		_ = c.Emit(ctx, assetRecord("ip", "10.0.0.1", nil)) // not delivered: not counted
		return nil
	}
	require.NoError(t, runScanner(t.Context(), run, c))
	r := up.report(t)
	assert.Equal(t, 6, r.Records)
	assert.Equal(t, map[string]int{"asset": 3, "threat": 2, "data": 1}, r.ByKind)
	assert.Equal(t, map[string]map[string]int{"asset": {"ip": 2, "url": 1}, "threat": {"url": 2}}, r.ByType)
	assert.Equal(t, map[string]int{"high": 1, "medium": 1}, r.Severities)
}

func TestReportUploadFailures(t *testing.T) {
	nothing := func(context.Context, *Call) error { return nil }

	// A report that cannot be stored does not fail the job…
	rec := &recorder{}
	c := newCall(t, "", nil, nil, rec)
	c.Plugin, c.Upload = "dns-resolve", (&fakeUploader{err: errors.New("artifacts disabled")}).upload
	require.NoError(t, runScanner(t.Context(), nothing, c))
	assert.Contains(t, rec.out.String(), "report.json could not be uploaded: artifacts disabled")

	// …but a lost lease or a cancellation ends it.
	c.Upload = (&fakeUploader{err: fmt.Errorf("open upload: %w", workerclient.ErrLeaseLost)}).upload
	assert.ErrorIs(t, runScanner(t.Context(), nothing, c), workerclient.ErrLeaseLost)
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(workerclient.ErrCancelRequested)
	c.Upload = (&fakeUploader{err: context.Canceled}).upload
	assert.ErrorIs(t, runScanner(ctx, nothing, c), workerclient.ErrCancelRequested)

	// A failed job uploads nothing.
	up := &fakeUploader{}
	c.Upload = up.upload
	boom := workerclient.Retryable("target-unreachable", "refused")
	assert.ErrorIs(t, runScanner(t.Context(), func(context.Context, *Call) error { return boom }, c), boom)
	assert.Empty(t, up.files)
}

func TestOnlyScannersUploadReports(t *testing.T) {
	for _, name := range pluginNames() {
		want := name == "dns-resolve" || name == "tcp-connect" || name == "http-probe"
		assert.Equal(t, want, scanners[name], name)
	}
	// Outside a runtime the upload is refused, which does not fail the job.
	assert.NoError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"tcp-connect"}`))
}
