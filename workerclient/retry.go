// This file holds the one retry helper every call to the gateway goes
// through: what is worth repeating, jittered exponential backoff, the
// gateway's Retry-After, and cancellation. The loop is
// github.com/cenkalti/backoff/v5's Retry; what is ours is the policy.

package workerclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

const (
	// Calls back off exponentially with full jitter, from backoffBase up
	// to backoffCap.
	backoffBase = 100 * time.Millisecond
	backoffCap  = 5 * time.Second
)

// retryPolicy says how retry waits between attempts and when it gives up.
// Policies are values: callers copy a base policy and set onRetry.
type retryPolicy struct {
	base, cap time.Duration
	// equalJitter draws each delay from [d/2, d] rather than [0, d]: for
	// retries that must not come back too soon (certificate renewal).
	equalJitter bool
	// permanent reports the errors no repeat can mend; nil means those
	// isTransient rejects. Errors wrapping a *permanentError are always
	// permanent.
	permanent func(error) bool
	// delay, when it returns true, sets the wait after err instead of the
	// gateway's Retry-After or the backoff.
	delay func(error) (time.Duration, bool)
	// onRetry is told about every failure that will be retried, before the
	// wait (to log it).
	onRetry func(err error, delay time.Duration)
}

// callRetry is the policy of calls to the gateway; renewRetry that of
// certificate renewals, slower since a certificate is renewed with a third
// of its lifetime left.
var (
	callRetry  = retryPolicy{base: backoffBase, cap: backoffCap}
	renewRetry = retryPolicy{base: renewBackoffBase, cap: renewBackoffCap, equalJitter: true}
)

// withLog returns p telling onRetry about each retry.
func (p retryPolicy) withLog(onRetry func(err error, delay time.Duration)) retryPolicy {
	p.onRetry = onRetry
	return p
}

// retry calls op until it returns nil or a permanent error (returned as
// is), or ctx ends: then it returns an *interruptedError with ctx's cause
// and op's last error. Between attempts it waits the policy's delay or the
// gateway's Retry-After when the error carries one (the backoff then starts
// over), else the next step of the policy's backoff. op is given ctx and
// should bound each call itself.
func retry(ctx context.Context, p retryPolicy, op func(context.Context) error) error {
	var last error
	attempt := func() (struct{}, error) {
		err := op(ctx)
		if err == nil {
			return struct{}{}, nil
		}
		last = err
		switch {
		case ctx.Err() != nil: // not retried, not classified
			return struct{}{}, backoff.Permanent(&interruptedError{cause: context.Cause(ctx), last: err})
		case isPermanent(err, p.permanent):
			return struct{}{}, backoff.Permanent(err)
		}
		if d, ok := p.waitFor(err); ok {
			return struct{}{}, &waitError{err: err, after: &backoff.RetryAfterError{Duration: d}}
		}
		return struct{}{}, err
	}
	notify := func(err error, d time.Duration) {
		if w, ok := errors.AsType[*waitError](err); ok {
			err = w.err
		}
		if p.onRetry != nil {
			p.onRetry(err, d)
		}
	}
	_, err := backoff.Retry(ctx, attempt, backoff.WithBackOff(p.backoff()), backoff.WithNotify(notify),
		backoff.WithMaxElapsedTime(0)) // until ctx ends
	if err != nil && ctx.Err() != nil && !isInterrupted(err) { // ended during a wait
		return &interruptedError{cause: context.Cause(ctx), last: last}
	}
	return err
}

// waitFor is the wait after err that is not the backoff's: the policy's
// delay, else the gateway's Retry-After.
func (p retryPolicy) waitFor(err error) (time.Duration, bool) {
	if p.delay != nil {
		if d, ok := p.delay(err); ok {
			return d, true
		}
	}
	return retryAfterOf(err)
}

// retryAfterOf is the gateway's Retry-After when err carries one.
func retryAfterOf(err error) (time.Duration, bool) {
	var e *APIError
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return 0, false
}

// waitError is a retryable err with the wait the backoff package is to
// take instead of its own step.
type waitError struct {
	err   error
	after *backoff.RetryAfterError
}

func (e *waitError) Error() string   { return e.err.Error() }
func (e *waitError) Unwrap() []error { return []error{e.err, e.after} }

func isPermanent(err error, permanent func(error) bool) bool {
	if errors.As(err, new(*permanentError)) {
		return true
	}
	if permanent != nil {
		return permanent(err)
	}
	return !isTransient(err)
}

// permanentError is a failure that repeating the call cannot mend, whatever
// its kind: retry returns it at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// interruptedError is retry's answer when its context ended first.
type interruptedError struct{ cause, last error }

func (e *interruptedError) Error() string {
	return fmt.Sprintf("%v (last error: %v)", e.cause, e.last)
}

func (e *interruptedError) Unwrap() []error { return []error{e.cause, e.last} }

// isInterrupted reports whether retry gave up because its context ended.
func isInterrupted(err error) bool {
	return errors.As(err, new(*interruptedError))
}

// backoff is the policy's exponential backoff: the n-th delay is uniform
// in [0, c] (full jitter) or [c/2, c] (equal jitter), c = min(cap, base·2ⁿ).
// backoff.ExponentialBackOff draws from interval·[1-f, 1+f] and doubles
// the interval up to its maximum, so full jitter is the interval c/2 with
// f = 1, and equal jitter the interval 3c/4 with f = 1/3.
func (p retryPolicy) backoff() *backoff.ExponentialBackOff {
	scale, factor := 0.5, 1.0
	if p.equalJitter {
		scale, factor = 0.75, 1.0/3
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     time.Duration(float64(p.base) * scale),
		MaxInterval:         time.Duration(float64(p.cap) * scale),
		RandomizationFactor: factor,
		Multiplier:          2,
	}
	b.Reset()
	return b
}

// retryDelays are the policy's waits for a loop that schedules its own
// retries (the heartbeat), by the rule retry follows.
type retryDelays struct{ bo *backoff.ExponentialBackOff }

func (p retryPolicy) delays() *retryDelays { return &retryDelays{bo: p.backoff()} }

// next is the wait after err: the gateway's Retry-After when err carries
// one (the backoff then starts over, as in retry), else the next backoff
// step.
func (d *retryDelays) next(err error) time.Duration {
	if after, ok := retryAfterOf(err); ok {
		d.bo.Reset()
		return after
	}
	return d.bo.NextBackOff()
}

// reset starts the backoff over after a success.
func (d *retryDelays) reset() { d.bo.Reset() }

// sleep waits d or until ctx is done, reporting whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
