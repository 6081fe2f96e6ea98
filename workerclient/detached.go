// This file is the seam for running a Handler without a gateway: a
// LeasedTask whose emitters go to a TaskSink, and the outcome a Worker would
// report. Package workerclienttest builds on it.

package workerclient

import (
	"context"
	"errors"
	"io"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TaskSink receives what a detached LeasedTask (NewDetachedTask) emits, in
// place of the gateway. Package workerclienttest's Recorder is one.
type TaskSink interface {
	// Emit is given the records of one LeasedTask.Emit call, already
	// checked against the contract as a Worker checks them.
	Emit(ctx context.Context, records []apiclient.ResultRecord) error
	// Flush is LeasedTask.Flush, and is called once more by RunHandler
	// after the handler returns nil, as a Worker sends what is left.
	Flush(ctx context.Context) error
	// Log is LeasedTask.Log: the same writer on every call.
	Log() io.Writer
	// UploadArtifact is LeasedTask.UploadArtifact; contentType is already
	// defaulted.
	UploadArtifact(ctx context.Context, name, contentType string, r io.Reader) (*apiclient.File, error)
}

// NewDetachedTask returns a LeasedTask with the exported fields of task
// whose Emit, Flush, Log and UploadArtifact go to sink instead of a gateway:
// for running a Handler in tests (see package workerclienttest).
func NewDetachedTask(task LeasedTask, sink TaskSink) *LeasedTask {
	task.lease, task.sink = nil, sink
	return &task
}

// Outcome is how a Worker reports a Handler's result to the gateway.
type Outcome struct {
	// Outcome is succeeded, failed or cancelled; empty when nothing is
	// reported (the lease was lost).
	Outcome apiclient.AttemptOutcome
	// Code, Message and Retryable are the failure's (and a drain's), else
	// empty.
	Code      string
	Message   string
	Retryable bool
}

// RunHandler runs h on task as a Worker runs it: not at all when ctx is
// already done, with a panic recovered into an error, and, when h returns
// nil, with a last Flush of the task's results, whose failure fails the
// attempt with CodeResultsUndelivered. It returns the handler's error (or
// that failure) and the outcome a Worker would report, given why ctx was
// cancelled, if it was (context.Cause: ErrCancelRequested, ErrLeaseLost,
// ErrAttemptDeadline, ErrDrainTimeout).
func RunHandler(ctx context.Context, h Handler, task *LeasedTask) (Outcome, error) {
	var herr error
	if ctx.Err() != nil {
		herr = context.Cause(ctx)
	} else {
		herr = callHandler(ctx, h, task)
	}
	if herr == nil {
		if ferr := task.Flush(ctx); ferr != nil && !errors.Is(ferr, errNotLeased) {
			herr = undeliveredError(ferr)
		}
	}
	req, ok := completionFor(herr, context.Cause(ctx))
	if !ok {
		return Outcome{}, herr
	}
	o := Outcome{Outcome: req.Outcome}
	if e := req.Error; e != nil {
		o.Code = e.Code
		if e.Message != nil {
			o.Message = *e.Message
		}
		if e.Retryable != nil {
			o.Retryable = *e.Retryable
		}
	}
	return o, herr
}
