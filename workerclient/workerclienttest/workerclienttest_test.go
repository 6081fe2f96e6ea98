package workerclienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
	"github.com/worker-gateway/gateway/workerclient/workerclienttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func asset(value string) apiclient.ResultRecord {
	return apiclient.ResultRecord{Kind: apiclient.ResultRecordKindAsset, Asset: &apiclient.AssetRef{Type: "ip", Value: value}}
}

func TestNewTaskBuildsWhatAHandlerReceives(t *testing.T) {
	t.Parallel()
	org, scan := uuid.New(), uuid.New()
	task, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{
		Payload: map[string]any{"plugin": "echo"}, OrganizationID: org, ScanID: &scan, AttemptNumber: 2,
	})
	assert.Equal(t, "scanner_plugin", task.Type)
	assert.JSONEq(t, `{"plugin": "echo"}`, string(task.Payload))
	assert.Equal(t, org, task.OrganizationID)
	assert.Equal(t, &scan, task.ScanID)
	assert.NotEqual(t, uuid.Nil, task.ID)
	assert.NotEqual(t, uuid.Nil, task.AttemptID)
	assert.Equal(t, 2, task.AttemptNumber)
	assert.Equal(t, 3, task.MaxAttempts)
	require.NoError(t, rec.Context().Err())

	for _, p := range []any{`{"a": 1}`, []byte(`{"a": 1}`), json.RawMessage(`{"a": 1}`), struct {
		A int `json:"a"`
	}{1}} {
		task, _ := workerclienttest.NewTask(t, workerclienttest.TaskOptions{Type: "ai", Payload: p})
		assert.JSONEq(t, `{"a": 1}`, string(task.Payload), "%T", p)
		assert.Equal(t, "ai", task.Type)
	}
	task, _ = workerclienttest.NewTask(t, workerclienttest.TaskOptions{})
	assert.JSONEq(t, `{}`, string(task.Payload))
}

func TestRecorderKeepsWhatTheHandlerEmitted(t *testing.T) {
	t.Parallel()
	task, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{})
	err := rec.Run(func(ctx context.Context, task *workerclient.LeasedTask) error {
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() { assert.NoError(t, task.Emit(ctx, asset(fmt.Sprintf("192.0.2.%d", i)))) })
		}
		wg.Wait()
		fmt.Fprintln(task.Log(), "probed 3 addresses")
		f, err := task.UploadArtifact(ctx, "report.json", "", strings.NewReader(`{"n": 3}`))
		require.NoError(t, err)
		assert.Equal(t, "application/octet-stream", f.ContentType, "the runtime's default")
		assert.Equal(t, int64(8), f.SizeBytes)
		assert.Equal(t, task.AttemptID, *f.AttemptId)
		return task.Flush(ctx)
	})
	require.NoError(t, err)
	assert.Len(t, rec.Records(), 3)
	assert.Equal(t, "probed 3 addresses\n", rec.Log())
	a, ok := rec.Artifact("report.json")
	require.True(t, ok)
	assert.JSONEq(t, `{"n": 3}`, string(a.Data))
	assert.Len(t, rec.Artifacts(), 1)
	assert.Equal(t, workerclient.Outcome{Outcome: apiclient.AttemptOutcomeSucceeded}, rec.Outcome())
	assert.Same(t, task.Log(), task.Log(), "one log writer, as a Worker's")
}

func TestEmitChecksRecordsAgainstTheContract(t *testing.T) {
	t.Parallel()
	task, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{})
	err := task.Emit(rec.Context(), asset("192.0.2.1"), apiclient.ResultRecord{Kind: apiclient.ResultRecordKindThreat,
		Asset: &apiclient.AssetRef{Type: "ip", Value: "192.0.2.1"}})
	require.ErrorContains(t, err, "result record 1: a threat record needs a title")
	assert.Empty(t, rec.Records(), "nothing of a refused call is kept")
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		handler workerclient.Handler
		cancel  error
		want    workerclient.Outcome
	}{
		{"error", func(context.Context, *workerclient.LeasedTask) error { return boom },
			nil, workerclient.Outcome{Outcome: "failed", Code: workerclient.CodeHandlerError, Message: "boom", Retryable: true}},
		{"permanent", func(context.Context, *workerclient.LeasedTask) error {
			return workerclient.Permanent("bad-input", "no")
		},
			nil, workerclient.Outcome{Outcome: "failed", Code: "bad-input", Message: "no"}},
		{"panic", func(context.Context, *workerclient.LeasedTask) error { panic("oops") },
			nil, workerclient.Outcome{Outcome: "failed", Code: workerclient.CodeHandlerPanic, Message: "handler panic: oops", Retryable: true}},
		{"cancel requested", func(ctx context.Context, _ *workerclient.LeasedTask) error { <-ctx.Done(); return ctx.Err() },
			workerclient.ErrCancelRequested, workerclient.Outcome{Outcome: "cancelled"}},
		{"lease lost", func(ctx context.Context, _ *workerclient.LeasedTask) error { <-ctx.Done(); return ctx.Err() },
			workerclient.ErrLeaseLost, workerclient.Outcome{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{})
			if tc.cancel != nil {
				rec.Cancel(tc.cancel)
			}
			err := rec.Run(tc.handler)
			assert.Equal(t, err, rec.Err())
			assert.Equal(t, tc.want, rec.Outcome())
		})
	}
}

func TestHandlerSeesCancellationWhileRunning(t *testing.T) {
	t.Parallel()
	_, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- rec.Run(func(ctx context.Context, _ *workerclient.LeasedTask) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-started
	rec.Cancel(workerclient.ErrCancelRequested)
	assert.ErrorIs(t, <-done, workerclient.ErrCancelRequested)
	assert.Equal(t, apiclient.AttemptOutcomeCancelled, rec.Outcome().Outcome)
}

func TestFailEmitAndUpload(t *testing.T) {
	t.Parallel()
	refused := &workerclient.APIError{Op: "submit results", Status: 422, Code: "invalid-request"}
	task, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{})
	err := rec.Run(func(ctx context.Context, task *workerclient.LeasedTask) error {
		require.NoError(t, task.Emit(ctx, asset("192.0.2.1")))
		rec.FailEmit(refused)
		assert.ErrorIs(t, task.Emit(ctx, asset("192.0.2.2")), refused)
		return nil // ignoring the refusal
	})
	var te *workerclient.TaskError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, workerclient.CodeResultsUndelivered, rec.Outcome().Code)
	assert.False(t, rec.Outcome().Retryable, "a refused batch would be refused again")
	assert.Len(t, rec.Records(), 1)

	rec.FailUpload(errors.New("artifacts disabled"))
	_, err = task.UploadArtifact(rec.Context(), "a.txt", "text/plain", strings.NewReader("x"))
	assert.EqualError(t, err, "artifacts disabled")
	assert.Empty(t, rec.Artifacts())
}
