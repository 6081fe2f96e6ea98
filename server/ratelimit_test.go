package server

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestWorkerRateLimiter(t *testing.T) {
	l := newWorkerRateLimiter(10, 3) // 10 per second, 3 at once
	w, other := uuid.New(), uuid.New()
	t0 := time.Unix(1_000_000, 0)

	for i := range 3 {
		ok, _ := l.allow(w, t0)
		require.True(t, ok, "request %d of the burst", i)
	}
	ok, wait := l.allow(w, t0)
	require.False(t, ok, "the burst is spent")
	require.Equal(t, 100*time.Millisecond, wait, "one token comes back every 1/rate")
	ok, _ = l.allow(other, t0)
	require.True(t, ok, "buckets are per worker")

	ok, _ = l.allow(w, t0.Add(100*time.Millisecond))
	require.True(t, ok, "refilled at the rate")
	ok, _ = l.allow(w, t0.Add(100*time.Millisecond))
	require.False(t, ok)

	// A full bucket is forgotten by the next sweep; the worker starts over
	// with a full burst.
	later := t0.Add(2 * time.Minute)
	ok, _ = l.allow(other, later)
	require.True(t, ok)
	require.NotContains(t, l.buckets, w)
	for range 3 {
		ok, _ := l.allow(w, later)
		require.True(t, ok)
	}

	off := newWorkerRateLimiter(0, 0)
	for range 100 {
		ok, _ := off.allow(w, t0)
		require.True(t, ok, "rate 0 is no limit")
	}
}
