package services

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunPasses: a pass runs at once; one that asks for no sleep is
// followed by another; a notice during a long sleep brings the next pass
// early; the loop returns when its context ends.
func TestRunPasses(t *testing.T) {
	t.Parallel()
	wake := NewSignal()
	started := make(chan int)
	sleeps := make(chan time.Duration)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	n := 0
	go func() {
		done <- RunPasses(ctx, wake, func(context.Context) time.Duration {
			n++
			started <- n
			return <-sleeps
		})
	}()

	require.Equal(t, 1, <-started, "the first pass runs at once")
	sleeps <- 0
	require.Equal(t, 2, <-started, "no sleep: the next pass follows")
	wake.Notify() // during the pass: kept for when it ends
	wake.Notify() // and not queued twice
	sleeps <- SleepUntilWoken
	require.Equal(t, 3, <-started, "a notice brings the next pass")
	cancel()
	sleeps <- SleepUntilWoken
	require.NoError(t, <-done)
}
