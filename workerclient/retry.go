// This file holds the one retry helper every call to the gateway goes
// through: what is worth repeating, jittered exponential backoff, the
// gateway's Retry-After, and cancellation.

package workerclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
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
	// backoff (which does not advance then).
	delay func(error) (time.Duration, bool)
	// onRetry is told about every failure that will be retried, before the
	// wait (to log it).
	onRetry func(err error, delay time.Duration)
	// sleep waits d or until ctx is done, reporting whether d passed; nil
	// is the real clock. Tests inject their own.
	sleep func(ctx context.Context, d time.Duration) bool
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
// and op's last error. Between attempts it waits the gateway's Retry-After
// when the error carries one, else the next step of the policy's backoff.
// op is given ctx and should bound each call itself.
func retry(ctx context.Context, p retryPolicy, op func(context.Context) error) error {
	bo := p.backoff()
	sleepFn := p.sleep
	if sleepFn == nil {
		sleepFn = sleep
	}
	for {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return &interruptedError{cause: context.Cause(ctx), last: err}
		}
		if isPermanent(err, p.permanent) {
			return err
		}
		d, ok := time.Duration(0), false
		if p.delay != nil {
			d, ok = p.delay(err)
		}
		if !ok {
			d = bo.delay(err)
		}
		if p.onRetry != nil {
			p.onRetry(err, d)
		}
		if !sleepFn(ctx, d) {
			return &interruptedError{cause: context.Cause(ctx), last: err}
		}
	}
}

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

// backoff is exponential backoff with jitter: the n-th delay is uniform in
// [0, c] (full jitter) or [c/2, c] (equal jitter), c = min(cap, base·2ⁿ).
type backoff struct {
	base, cap   time.Duration
	equalJitter bool
	attempt     int
}

func (p retryPolicy) backoff() backoff {
	return backoff{base: p.base, cap: p.cap, equalJitter: p.equalJitter}
}

func (b *backoff) next() time.Duration {
	c := b.ceiling()
	b.attempt++
	if b.equalJitter {
		return c/2 + jitter(c/2)
	}
	return jitter(c)
}

func (b *backoff) reset() { b.attempt = 0 }

func (b *backoff) ceiling() time.Duration {
	if b.attempt >= 30 { // 2^30·base is far past any cap; avoid overflow
		return b.cap
	}
	return min(b.base<<b.attempt, b.cap)
}

// delay is the gateway's Retry-After when err carries one, else the next
// backoff step.
func (b *backoff) delay(err error) time.Duration {
	var e *APIError
	if errors.As(err, &e) && e.RetryAfter > 0 {
		b.attempt++ // keep growing in case the next answer has none
		return e.RetryAfter
	}
	return b.next()
}

func jitter(ceiling time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

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
