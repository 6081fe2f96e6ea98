package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
	"github.com/worker-gateway/gateway/workerclient/workerclienttest"
)

// runTask runs the worker's Handler on a task built by workerclienttest.
func runTask(t *testing.T, ctx context.Context, taskType, payload string) error {
	t.Helper()
	task, _ := workerclienttest.NewTask(t, workerclienttest.TaskOptions{Type: taskType, Payload: payload})
	return handle(slog.New(slog.DiscardHandler))(ctx, task)
}

func taskError(t *testing.T, err error) *workerclient.TaskError {
	t.Helper()
	var te *workerclient.TaskError
	require.ErrorAs(t, err, &te)
	return te
}

func TestPluginNamesAreTheCapability(t *testing.T) {
	assert.Equal(t, []string{"dns-resolve", "echo", "fail", "http-probe", "sleep", "tcp-connect"}, pluginNames())
}

func TestCallCarriesTheScanPayload(t *testing.T) {
	task := &workerclient.LeasedTask{Type: "scanner_plugin", Payload: json.RawMessage(`{
		"plugin": "tcp-connect", "input": {"ports": [22]},
		"targets": ["localhost"],
		"assets": [{"type": "ip", "value": "127.0.0.1", "details": {"hostname": "localhost"}}],
		"added_by_a_newer_gateway": true}`)}
	run, c, err := callFor(task, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, run)
	assert.JSONEq(t, `{"ports": [22]}`, string(c.Input))
	assert.Equal(t, []string{"localhost"}, c.Targets)
	require.Len(t, c.Assets, 1)
	assert.Equal(t, "ip", c.Assets[0].Type)
	assert.Equal(t, "127.0.0.1", c.Assets[0].Value)
	assert.JSONEq(t, `{"hostname": "localhost"}`, string(c.Assets[0].Details))
	// Emit is the task's: outside a Runtime it refuses.
	require.NotNil(t, c.Emit)
	assert.Error(t, c.Emit(t.Context(), apiclient.ResultRecord{Kind: apiclient.ResultRecordKindData}))
}

func TestEcho(t *testing.T) {
	assert.NoError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"echo","input":{"message":"hi"}}`))
	assert.NoError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"echo"}`))
}

func TestSleep(t *testing.T) {
	start := time.Now()
	require.NoError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"sleep","input":{"seconds":0.05}}`))
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err := runTask(t, ctx, "scanner_plugin", `{"plugin":"sleep","input":{"seconds":60}}`)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "sleep honours its context")

	te := taskError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"sleep","input":{"seconds":-1}}`))
	assert.Equal(t, "bad-input", te.Code)
	te = taskError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"sleep","input":{"seconds":"long"}}`))
	assert.Equal(t, "bad-input", te.Code)
	assert.False(t, te.Retryable)
}

func TestFail(t *testing.T) {
	te := taskError(t, runTask(t, t.Context(), "scanner_plugin",
		`{"plugin":"fail","input":{"code":"target-unreachable","message":"refused","retryable":true}}`))
	assert.Equal(t, workerclient.TaskError{Code: "target-unreachable", Message: "refused", Retryable: true}, *te)
	te = taskError(t, runTask(t, t.Context(), "scanner_plugin", `{"plugin":"fail"}`))
	assert.Equal(t, "plugin-failed", te.Code)
	assert.False(t, te.Retryable)
}

func TestDispatchFailures(t *testing.T) {
	for _, tc := range []struct{ taskType, payload, code string }{
		{"scanner_plugin", `{"plugin":"nmap"}`, "unknown-plugin"},
		{"scanner_plugin", `[1,2]`, "bad-payload"},
		{"ai", `{"plugin":"echo"}`, "unsupported-task-type"},
	} {
		err := runTask(t, t.Context(), tc.taskType, tc.payload)
		te := taskError(t, err)
		assert.Equal(t, tc.code, te.Code, tc.payload)
		assert.False(t, te.Retryable, "%s is permanent", tc.code)
		assert.False(t, errors.Is(err, context.Canceled))
	}
}
