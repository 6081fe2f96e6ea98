package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestWorkerRateLimiter(t *testing.T) {
	l := newRateLimiter[uuid.UUID](10, 3, 0) // 10 per second, 3 at once
	w, other := uuid.New(), uuid.New()
	t0 := time.Unix(1_000_000, 0)

	for i := range 3 {
		ok, _, _ := l.allow(w, t0)
		require.True(t, ok, "request %d of the burst", i)
	}
	ok, wait, _ := l.allow(w, t0)
	require.False(t, ok, "the burst is spent")
	require.Equal(t, 100*time.Millisecond, wait, "one token comes back every 1/rate")
	ok, _, _ = l.allow(other, t0)
	require.True(t, ok, "buckets are per worker")

	ok, _, _ = l.allow(w, t0.Add(100*time.Millisecond))
	require.True(t, ok, "refilled at the rate")
	ok, _, _ = l.allow(w, t0.Add(100*time.Millisecond))
	require.False(t, ok)

	// A full bucket is forgotten by the next sweep; the worker starts over
	// with a full burst.
	later := t0.Add(2 * time.Minute)
	ok, _, _ = l.allow(other, later)
	require.True(t, ok)
	require.NotContains(t, l.buckets, w)
	for range 3 {
		ok, _, _ := l.allow(w, later)
		require.True(t, ok)
	}

	off := newRateLimiter[uuid.UUID](0, 0, 0)
	for range 100 {
		ok, _, _ := off.allow(w, t0)
		require.True(t, ok, "rate 0 is no limit")
	}
}

func TestRateLimiterRefund(t *testing.T) {
	l := newRateLimiter[string](1, 2, 0)
	t0 := time.Unix(1_000_000, 0)
	for i := range 10 {
		ok, _, refund := l.allow("10.0.0.1", t0.Add(time.Duration(i)*time.Millisecond))
		require.True(t, ok, "every refunded request leaves the bucket as it was")
		refund()
	}
	require.Equal(t, 2.0, l.buckets["10.0.0.1"].TokensAt(t0.Add(time.Second)), "a refund never fills past the burst")
	for range 2 {
		ok, _, _ := l.allow("10.0.0.1", t0)
		require.True(t, ok)
	}
	ok, _, refund := l.allow("10.0.0.1", t0)
	require.False(t, ok)
	refund()
	ok, _, _ = l.allow("10.0.0.1", t0)
	require.False(t, ok, "refunding a refusal gives nothing")

	// A refund at the end of a request, after other requests of the same
	// key took tokens, gives back exactly the one it took.
	l = newRateLimiter[string](1, 3, 0)
	_, _, refundFirst := l.allow("a", t0)
	ok, _, _ = l.allow("a", t0.Add(100*time.Millisecond))
	require.True(t, ok)
	refundFirst()
	require.InDelta(t, 2.2, l.buckets["a"].TokensAt(t0.Add(200*time.Millisecond)), 1e-9,
		"3 tokens, one taken and kept, 0.2 refilled")
}

func TestRateLimiterBoundedKeys(t *testing.T) {
	l := newRateLimiter[string](1, 2, 100)
	t0 := time.Unix(1_000_000, 0)
	for i := range 10_000 {
		l.allow(fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), t0)
		require.LessOrEqual(t, len(l.buckets), 100, "many addresses cannot grow the map")
	}
}
