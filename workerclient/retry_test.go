package workerclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
)

// fastPolicy is callRetry scaled down to milliseconds, so that tests wait
// for real (the backoff package's own timer) without waiting long.
func fastPolicy() retryPolicy {
	p := callRetry
	p.base, p.cap = time.Millisecond, 8*time.Millisecond
	return p
}

// waits records the waits retry announces to onRetry.
type waits struct{ d []time.Duration }

func (w *waits) record(_ error, d time.Duration) { w.d = append(w.d, d) }

// failing returns an op that fails with errs in turn, then succeeds.
func failing(calls *int, errs ...error) func(context.Context) error {
	return func(context.Context) error {
		*calls++
		if *calls <= len(errs) {
			return errs[*calls-1]
		}
		return nil
	}
}

func TestRetryRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	var logged []error
	var waited []time.Duration
	p := fastPolicy().withLog(func(err error, d time.Duration) { logged, waited = append(logged, err), append(waited, d) })
	calls := 0
	transient := []error{errors.New("connection reset"), &APIError{Status: 503}, &APIError{Status: 429},
		&APIError{Status: 409, Code: problem.IdempotencyInFlight}}
	require.NoError(t, retry(t.Context(), p, failing(&calls, transient...)))
	assert.Equal(t, 5, calls)
	assert.Equal(t, transient, logged, "every retried failure is told to onRetry")
	require.Len(t, waited, 4)
	for i, d := range waited {
		assert.LessOrEqual(t, d, min(p.base<<i, p.cap), "wait %d", i)
	}
}

func TestRetryStopsOnPermanentErrors(t *testing.T) {
	t.Parallel()
	for _, perm := range []error{
		&APIError{Status: http.StatusBadRequest},
		&APIError{Status: http.StatusForbidden, Code: problem.WorkerRevoked},
		fmt.Errorf("wrapped: %w", &APIError{Status: http.StatusConflict, Code: problem.LeaseLost}),
		&permanentError{errors.New("a transport error the caller knows is hopeless")},
	} {
		w := &waits{}
		calls := 0
		err := retry(t.Context(), fastPolicy().withLog(w.record), failing(&calls, errors.New("timeout"), perm))
		assert.Same(t, perm, err, "the permanent error is returned as is")
		assert.Equal(t, 2, calls)
		assert.Len(t, w.d, 1)
		assert.False(t, isInterrupted(err))
	}
}

func TestRetryPolicyChoosesWhatIsPermanent(t *testing.T) {
	t.Parallel()
	p := fastPolicy()
	p.permanent = func(err error) bool { return isRevoked(err) }
	calls := 0
	// A 400 is retried under this policy; a revocation is not.
	revoked := &APIError{Status: 403, Code: problem.WorkerRevoked}
	err := retry(t.Context(), p, failing(&calls, &APIError{Status: 400}, revoked))
	assert.Same(t, revoked, err)
	assert.Equal(t, 2, calls)
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	w := &waits{}
	p := fastPolicy().withLog(w.record)
	p.base, p.cap = time.Microsecond, time.Microsecond
	calls := 0
	err := retry(t.Context(), p, failing(&calls,
		&APIError{Status: 429, RetryAfter: 7 * time.Millisecond},
		fmt.Errorf("wrapped: %w", &APIError{Status: 503, RetryAfter: 20 * time.Millisecond}),
		errors.New("connection reset")))
	require.NoError(t, err)
	require.Len(t, w.d, 3)
	assert.Equal(t, []time.Duration{7 * time.Millisecond, 20 * time.Millisecond}, w.d[:2],
		"Retry-After is waited exactly, beyond the backoff's cap")
	assert.LessOrEqual(t, w.d[2], p.cap, "then the backoff goes on")
}

func TestRetryPolicyDelayOverridesBackoff(t *testing.T) {
	t.Parallel()
	w := &waits{}
	p := fastPolicy().withLog(w.record)
	p.permanent = func(error) bool { return false }
	p.delay = func(err error) (time.Duration, bool) { return 30 * time.Millisecond, isPollRefused(err) }
	calls := 0
	require.NoError(t, retry(t.Context(), p, failing(&calls, errors.New("reset"), errors.New("reset"),
		&APIError{Status: 401, RetryAfter: time.Hour}, errors.New("reset"))))
	require.Len(t, w.d, 4)
	assert.Equal(t, 30*time.Millisecond, w.d[2], "the policy's delay, before the gateway's Retry-After")
	assert.LessOrEqual(t, w.d[3], p.base, "the backoff starts over after it")
}

func TestRetryEndsWithItsContext(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutting down")

	// Cancelled during a wait.
	ctx, cancel := context.WithCancelCause(t.Context())
	// A wait far longer than the test: only the cancellation ends it.
	p := retryPolicy{base: time.Hour, cap: time.Hour, onRetry: func(error, time.Duration) { cancel(cause) }}
	p.delay = func(error) (time.Duration, bool) { return time.Hour, true }
	last := errors.New("connection refused")
	calls := 0
	err := retry(ctx, p, func(context.Context) error { calls++; return last })
	require.True(t, isInterrupted(err))
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, last)
	assert.Equal(t, "shutting down (last error: connection refused)", err.Error())
	assert.Equal(t, 1, calls)

	// Cancelled during a call: not retried, not classified, no wait.
	ctx, cancel2 := context.WithCancel(t.Context())
	w := &waits{}
	err = retry(ctx, fastPolicy().withLog(w.record), func(context.Context) error {
		cancel2()
		return &APIError{Status: 400}
	})
	require.True(t, isInterrupted(err))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, w.d)
}

func TestRetryEqualJitterPolicy(t *testing.T) {
	t.Parallel()
	w := &waits{}
	p := renewRetry.withLog(w.record)
	p.base, p.cap = time.Millisecond, 8*time.Millisecond
	p.permanent = func(error) bool { return false }
	calls := 0
	errs := make([]error, 12)
	for i := range errs {
		errs[i] = &APIError{Status: 400}
	}
	require.NoError(t, retry(t.Context(), p, failing(&calls, errs...)))
	require.Len(t, w.d, 12)
	for i, d := range w.d {
		c := min(p.base<<i, p.cap)
		assert.GreaterOrEqual(t, d, c/2, "wait %d", i)
		assert.LessOrEqual(t, d, c, "wait %d", i)
	}
}
