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

// fakeSleep records the waits retry asks for and returns at once; it
// reports false once ctx is done, as the real sleep would.
type fakeSleep struct{ waits []time.Duration }

func (f *fakeSleep) sleep(ctx context.Context, d time.Duration) bool {
	f.waits = append(f.waits, d)
	return ctx.Err() == nil
}

func testPolicy(f *fakeSleep) retryPolicy {
	p := callRetry
	p.sleep = f.sleep
	return p
}

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
	f := &fakeSleep{}
	var logged []error
	p := testPolicy(f).withLog(func(err error, _ time.Duration) { logged = append(logged, err) })
	calls := 0
	transient := []error{errors.New("connection reset"), &APIError{Status: 503}, &APIError{Status: 429},
		&APIError{Status: 409, Code: problem.IdempotencyInFlight}}
	require.NoError(t, retry(t.Context(), p, failing(&calls, transient...)))
	assert.Equal(t, 5, calls)
	assert.Equal(t, transient, logged, "every retried failure is told to onRetry")
	require.Len(t, f.waits, 4)
	for i, d := range f.waits {
		assert.LessOrEqual(t, d, min(backoffBase<<i, backoffCap), "wait %d", i)
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
		f := &fakeSleep{}
		calls := 0
		err := retry(t.Context(), testPolicy(f), failing(&calls, errors.New("timeout"), perm))
		assert.Same(t, perm, err, "the permanent error is returned as is")
		assert.Equal(t, 2, calls)
		assert.Len(t, f.waits, 1)
		assert.False(t, isInterrupted(err))
	}
}

func TestRetryPolicyChoosesWhatIsPermanent(t *testing.T) {
	t.Parallel()
	f := &fakeSleep{}
	p := testPolicy(f)
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
	f := &fakeSleep{}
	calls := 0
	err := retry(t.Context(), testPolicy(f), failing(&calls,
		&APIError{Status: 429, RetryAfter: 7 * time.Second},
		fmt.Errorf("wrapped: %w", &APIError{Status: 503, RetryAfter: 2 * time.Minute})))
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{7 * time.Second, 2 * time.Minute}, f.waits,
		"Retry-After is waited exactly, beyond the backoff's cap")
}

func TestRetryPolicyDelayOverridesBackoff(t *testing.T) {
	t.Parallel()
	f := &fakeSleep{}
	p := testPolicy(f)
	p.permanent = func(error) bool { return false }
	p.delay = func(err error) (time.Duration, bool) { return time.Hour, isPollRefused(err) }
	calls := 0
	require.NoError(t, retry(t.Context(), p, failing(&calls, &APIError{Status: 401}, errors.New("reset"))))
	require.Len(t, f.waits, 2)
	assert.Equal(t, time.Hour, f.waits[0])
	assert.LessOrEqual(t, f.waits[1], backoffBase, "the override did not advance the backoff")
}

func TestRetryEndsWithItsContext(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutting down")

	// Cancelled during a wait.
	ctx, cancel := context.WithCancelCause(t.Context())
	p := retryPolicy{base: backoffBase, cap: backoffCap, sleep: func(ctx context.Context, _ time.Duration) bool {
		cancel(cause)
		return ctx.Err() == nil
	}}
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
	f := &fakeSleep{}
	err = retry(ctx, testPolicy(f), func(context.Context) error {
		cancel2()
		return &APIError{Status: 400}
	})
	require.True(t, isInterrupted(err))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, f.waits)
}

func TestRetryEqualJitterPolicy(t *testing.T) {
	t.Parallel()
	f := &fakeSleep{}
	p := renewRetry
	p.sleep = f.sleep
	p.permanent = func(error) bool { return false }
	calls := 0
	errs := make([]error, 12)
	for i := range errs {
		errs[i] = &APIError{Status: 400}
	}
	require.NoError(t, retry(t.Context(), p, failing(&calls, errs...)))
	require.Len(t, f.waits, 12)
	for i, d := range f.waits {
		c := min(renewBackoffBase<<i, renewBackoffCap)
		assert.GreaterOrEqual(t, d, c/2, "wait %d", i)
		assert.LessOrEqual(t, d, c, "wait %d", i)
	}
}
