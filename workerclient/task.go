// This file runs one leased task: start, the handler (panics recovered),
// the results it left, then the completion.

package workerclient

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func (r *runner) runTask(ls *lease) {
	defer r.release(ls)
	r.start(ls)
	var herr error
	if ls.ctx.Err() != nil {
		herr = context.Cause(ls.ctx) // cancelled, lost or out of time before it began
	} else {
		herr = callHandler(ls.ctx, r.w.cfg.Handler, ls.task)
	}
	// What a successful handler left buffered is sent before completing —
	// its last batch inside the completion itself; the completion claims
	// only batches the gateway acknowledged (or carries).
	var (
		lastSeq int
		final   *resultBatch
		ferr    error
	)
	if herr == nil {
		lastSeq, final, ferr = ls.results.finishInline(ls.ctx)
	} else {
		lastSeq, ferr = ls.results.finish(ls.ctx, false)
	}
	if ferr != nil && herr == nil {
		herr = undeliveredError(ferr)
		ls.log.Warn("results could not be delivered", "error", ferr)
	}
	// The end of the log goes out before the completion, whatever the
	// outcome, unless the lease is lost.
	r.finishLogs(ls)
	cause := context.Cause(ls.ctx)
	if r.isLost(ls) {
		cause = ErrLeaseLost
	}
	var perr *panicError
	if errors.As(herr, &perr) {
		ls.log.Error("handler panicked", "panic", perr.value, "stack", string(perr.stack))
	}
	req, ok := completionFor(herr, cause)
	if !ok {
		ls.log.Warn("lease lost; not completing the attempt", "handler_error", errString(herr))
		return
	}
	if final != nil {
		var b apiclient.ResultBatch
		if err := json.Unmarshal(final.body, &b); err == nil {
			req.FinalResults, lastSeq = &b, final.seq
		} else {
			ls.log.Error("final result batch unreadable; not sent", "error", err)
		}
	}
	if lastSeq > 0 {
		req.LastSequenceNumber = &lastSeq
	}
	r.complete(ls, req)
}

// release forgets a finished lease and frees its slot.
func (r *runner) release(ls *lease) {
	r.mu.Lock()
	delete(r.leases, ls.id)
	r.mu.Unlock()
	ls.stop()
	notify(r.slotFree)
}

func (r *runner) isLost(ls *lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ls.lost
}

// markLost records that the lease is no longer held and cancels its handler.
func (r *runner) markLost(ls *lease) {
	r.mu.Lock()
	ls.lost = true
	r.mu.Unlock()
	ls.cancel(ErrLeaseLost)
}

// start marks the attempt running. A cancellation or a lost lease it learns
// about cancels ls.ctx; when the gateway cannot be reached the handler runs
// anyway, since the next heartbeat starts the attempt too.
func (r *runner) start(ls *lease) {
	ctx, cancel := context.WithTimeout(ls.ctx, startRetryWindow)
	defer cancel()
	policy := callRetry.withLog(func(err error, delay time.Duration) {
		ls.log.Warn("start failed; retrying", "error", err, "retry_in", delay.String())
	})
	err := retry(ctx, policy, func(ctx context.Context) error {
		sent := time.Now()
		st, err := r.startOnce(ctx, ls)
		if err == nil {
			r.applyStatus(ls, st, sent, false)
		}
		return err
	})
	switch {
	case err == nil, ls.ctx.Err() != nil:
	case isInterrupted(err):
		ls.log.Warn("could not start the attempt; running it anyway")
	case isRevoked(err):
		r.revoked(err)
	default:
		ls.log.Warn("start refused; abandoning the attempt", "error", err)
		r.markLost(ls)
	}
}

func (r *runner) startOnce(ctx context.Context, ls *lease) (*apiclient.LeaseStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := r.w.client.StartAttemptWithResponse(ctx, ls.id, &apiclient.StartAttemptParams{LeaseToken: ls.token})
	if err != nil {
		return nil, fmt.Errorf("start attempt: %w", err)
	}
	if err := checkResponse("start attempt", resp.HTTPResponse, resp.Body); err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("start attempt: unexpected answer %s", resp.Status())
	}
	return resp.JSON200, nil
}

// complete reports the attempt's outcome, retrying transport errors, 429 and
// 5xx for up to completeRetryWindow. Completion is idempotent, so a repeat
// of a call whose answer was lost is answered 200 again.
func (r *runner) complete(ls *lease, req apiclient.CompleteRequest) {
	ctx, cancel := context.WithTimeout(r.base, completeRetryWindow)
	defer cancel()
	policy := callRetry.withLog(func(err error, delay time.Duration) {
		ls.log.Warn("completion failed; retrying", "error", err, "retry_in", delay.String())
	})
	var res *apiclient.CompleteResponse
	err := retry(ctx, policy, func(ctx context.Context) (err error) {
		res, err = r.completeOnce(ctx, ls, req)
		return err
	})
	var apiErr *APIError
	switch {
	case err == nil:
		args := []any{"outcome", req.Outcome, "attempt_status", res.AttemptStatus, "task_state", res.TaskState}
		if req.Error != nil {
			args = append(args, "error_code", req.Error.Code)
		}
		if req.LastSequenceNumber != nil {
			args = append(args, "last_sequence_number", *req.LastSequenceNumber)
		}
		ls.log.Info("attempt completed", args...)
	case isInterrupted(err):
		ls.log.Error("giving up completing the attempt; its lease will expire", "outcome", req.Outcome, "error", err)
	case isRevoked(err):
		r.revoked(err)
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
		ls.log.Warn("completion refused", "outcome", req.Outcome, "error", err)
	default:
		ls.log.Error("completion refused", "outcome", req.Outcome, "error", err)
	}
}

func (r *runner) completeOnce(ctx context.Context, ls *lease, req apiclient.CompleteRequest) (*apiclient.CompleteResponse, error) {
	return r.completions.complete(ctx, apiclient.CompletionItem{
		AttemptId: ls.id, LeaseToken: ls.token, Outcome: req.Outcome, Error: req.Error,
		LastSequenceNumber: req.LastSequenceNumber, FinalResults: req.FinalResults,
	})
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panic: %v", e.value) }

func callHandler(ctx context.Context, h Handler, task *LeasedTask) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return h(ctx, task)
}

// completionFor maps a handler's result and the cause of its context's
// cancellation (nil when not cancelled) to the completion to send; false
// means send none.
func completionFor(herr, cause error) (apiclient.CompleteRequest, bool) {
	switch {
	case errors.Is(cause, ErrLeaseLost):
		return apiclient.CompleteRequest{}, false
	case errors.Is(cause, ErrCancelRequested):
		return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeCancelled}, true
	case errors.Is(cause, ErrDrainTimeout):
		return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeCancelled, Error: &apiclient.AttemptError{
			Code: CodeWorkerShutdown, Message: new("the worker shut down before the task finished"), Retryable: new(true),
		}}, true
	case herr == nil:
		return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeSucceeded}, true
	}
	ae := apiclient.AttemptError{Code: CodeHandlerError, Message: new(herr.Error()), Retryable: new(true)}
	var te *TaskError
	var pe *panicError
	switch {
	case errors.As(herr, &te):
		ae.Code, ae.Message, ae.Retryable = cmp.Or(te.Code, CodeHandlerError), new(te.Message), new(te.Retryable)
	case errors.As(herr, &pe):
		ae.Code = CodeHandlerPanic
	case errors.Is(cause, ErrAttemptDeadline):
		ae.Code = CodeDeadline
	}
	ae.Code = truncate(ae.Code, maxErrorCode)
	if *ae.Message == "" {
		ae.Message = nil
	} else {
		ae.Message = new(truncate(*ae.Message, maxErrorMessage))
	}
	return apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeFailed, Error: &ae}, true
}

// attemptBudget is how long the handler may run: the nearer of the attempt
// and execution deadlines, less a margin to report the failure in time.
func attemptBudget(s *apiclient.TaskSnapshot) (time.Duration, bool) {
	var budget time.Duration
	ok := false
	for _, d := range [...]*float64{s.AttemptDeadlineInSeconds, s.ExecutionDeadlineInSeconds} {
		if d == nil {
			continue
		}
		if v := seconds(*d); !ok || v < budget {
			budget, ok = v, true
		}
	}
	if !ok {
		return 0, false
	}
	budget -= min(deadlineMargin, budget/10)
	return max(budget, 0), true
}
