// Package workerclienttest lets worker authors unit-test their Handlers
// without a gateway: NewTask builds the *workerclient.LeasedTask a Handler
// receives, and its Recorder keeps what the handler emitted (results, log,
// artifacts) and the outcome a Worker would report.
//
//	task, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{
//		Type:    "scanner_plugin",
//		Payload: map[string]any{"plugin": "dns-resolve", "targets": []string{"localhost"}},
//	})
//	err := rec.Run(myHandler)
//	assert.Equal(t, apiclient.AttemptOutcomeSucceeded, rec.Outcome().Outcome)
//	assert.Len(t, rec.Records(), 2)
//
// Records are checked against the contract as a Worker checks them, so an
// invalid record fails Emit here as it would in production. Nothing is
// retried or batched: what Emit accepts is recorded at once.
package workerclienttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TaskOptions describe the task to build. Zero values take defaults.
type TaskOptions struct {
	// Type is the task type (default scanner_plugin).
	Type string
	// Payload is the task's payload: json.RawMessage, []byte or string are
	// taken as JSON text (which must be valid), anything else is encoded as
	// JSON. nil is {}.
	Payload any
	// ID, AttemptID and OrganizationID are random when zero.
	ID, AttemptID, OrganizationID uuid.UUID
	ScanID, ScanJobID             *uuid.UUID
	// AttemptNumber (default 1) and MaxAttempts (default 3).
	AttemptNumber, MaxAttempts int
}

// NewTask returns a leased task built from opts, as a Handler receives it,
// and the Recorder its Emit, Flush, Log and UploadArtifact report to. The
// Recorder's Context is the handler's context: it ends with the test.
func NewTask(t testing.TB, opts TaskOptions) (*workerclient.LeasedTask, *Recorder) {
	t.Helper()
	payload, err := payloadJSON(opts.Payload)
	if err != nil {
		t.Fatalf("workerclienttest: payload: %v", err)
	}
	task := workerclient.LeasedTask{
		ID:             orNew(opts.ID),
		AttemptID:      orNew(opts.AttemptID),
		Type:           opts.Type,
		OrganizationID: orNew(opts.OrganizationID),
		ScanID:         opts.ScanID,
		ScanJobID:      opts.ScanJobID,
		Payload:        payload,
		AttemptNumber:  max(opts.AttemptNumber, 1),
		MaxAttempts:    opts.MaxAttempts,
	}
	if task.Type == "" {
		task.Type = string(apiclient.TaskTypeScannerPlugin)
	}
	if task.MaxAttempts == 0 {
		task.MaxAttempts = 3
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(context.Canceled) })
	rec := &Recorder{ctx: ctx, cancel: cancel}
	rec.task = workerclient.NewDetachedTask(task, (*sink)(rec))
	return rec.task, rec
}

func orNew(id uuid.UUID) uuid.UUID {
	if id == uuid.Nil {
		return uuid.Must(uuid.NewV7())
	}
	return id
}

func payloadJSON(p any) (json.RawMessage, error) {
	var raw []byte
	switch v := p.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		return json.Marshal(v)
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("not valid JSON: %q", raw)
	}
	return json.RawMessage(slices.Clone(raw)), nil
}

// Artifact is an artifact a handler uploaded.
type Artifact struct {
	Name        string
	ContentType string
	Data        []byte
}

// Recorder keeps what a task's handler emitted. It is safe for concurrent
// use by the handler's goroutines.
type Recorder struct {
	task   *workerclient.LeasedTask
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	records   []apiclient.ResultRecord
	log       bytes.Buffer
	artifacts []Artifact
	emitErr   error
	uploadErr error
	ran       bool
	outcome   workerclient.Outcome
	err       error
}

// Context is the handler's context: Run passes it to the handler. It ends
// when the test does, or with Cancel.
func (r *Recorder) Context() context.Context { return r.ctx }

// Cancel cancels the handler's context with cause, as a Worker does:
// workerclient.ErrCancelRequested when the gateway asks to cancel the task,
// ErrLeaseLost, ErrAttemptDeadline or ErrDrainTimeout. The outcome Run
// reports depends on it.
func (r *Recorder) Cancel(cause error) { r.cancel(cause) }

// FailEmit makes every later Emit and Flush fail with err (nil: succeed
// again), as when the gateway refuses a batch.
func (r *Recorder) FailEmit(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitErr = err
}

// FailUpload makes every later UploadArtifact fail with err (nil: succeed
// again).
func (r *Recorder) FailUpload(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uploadErr = err
}

// Run runs h on the task with the recorder's context, as a Worker would
// (see workerclient.RunHandler), records its error and outcome, and returns
// the error.
func (r *Recorder) Run(h workerclient.Handler) error {
	o, err := workerclient.RunHandler(r.ctx, h, r.task)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran, r.outcome, r.err = true, o, err
	return err
}

// Err is the error of the last Run: the handler's, or why its results could
// not be delivered.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Outcome is what a Worker would have reported for the last Run. It is the
// zero Outcome before Run, and when nothing would be reported (lease lost).
func (r *Recorder) Outcome() workerclient.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome
}

// Records returns the records Emit accepted, in order.
func (r *Recorder) Records() []apiclient.ResultRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.records)
}

// Log returns what the handler wrote to the attempt's log.
func (r *Recorder) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// Artifacts returns the artifacts uploaded, in order.
func (r *Recorder) Artifacts() []Artifact {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.artifacts)
}

// Artifact returns the last artifact uploaded under name.
func (r *Recorder) Artifact(name string) (Artifact, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.artifacts) - 1; i >= 0; i-- {
		if r.artifacts[i].Name == name {
			return r.artifacts[i], true
		}
	}
	return Artifact{}, false
}

// sink is the Recorder as the task's workerclient.TaskSink, kept apart so
// that the Recorder's own methods are only for assertions.
type sink Recorder

var _ workerclient.TaskSink = (*sink)(nil)

func (s *sink) Emit(ctx context.Context, records []apiclient.ResultRecord) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.emitErr != nil {
		return s.emitErr
	}
	s.records = append(s.records, records...)
	return nil
}

func (s *sink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emitErr
}

func (s *sink) Log() io.Writer { return (*logWriter)(s) }

// UploadArtifact keeps the artifact in memory.
func (s *sink) UploadArtifact(ctx context.Context, name, contentType string, rd io.Reader) (*apiclient.File, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	err := s.uploadErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("workerclienttest: reading the artifact: %w", err)
	}
	sum := sha256.Sum256(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.artifacts = append(s.artifacts, Artifact{Name: name, ContentType: contentType, Data: data})
	task := s.task
	return &apiclient.File{
		Id: uuid.Must(uuid.NewV7()), Name: name, ContentType: contentType, SizeBytes: int64(len(data)),
		Sha256: hex.EncodeToString(sum[:]), CreatedAt: time.Now().UTC(),
		OrganizationId: task.OrganizationID, TaskId: &task.ID, AttemptId: &task.AttemptID,
	}, nil
}

// logWriter is the Recorder as the attempt's log.
type logWriter sink

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(p)
}
