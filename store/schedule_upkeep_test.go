package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestScheduleQueuedRunEndWakesTheTimer: when the run a queued slot waits
// for ends, the database sends the schedule timer its wake-up, so no timer
// has to look again now and then.
func TestScheduleQueuedRunEndWakesTheTimer(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapQueueOne, store.CatchUpOnce))
	first := fireAt(t, s, t0)
	require.Len(t, first, 1)
	fireAt(t, s, t0.Add(time.Minute)) // queued behind the first run

	conn, err := b.pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(t.Context(), "LISTEN "+store.NotifyChannel)
	require.NoError(t, err)

	cancelTask(t, s, *first[0].TaskID)
	want := store.Wakeup{Kind: store.WakeSchedules, Organization: b.org.ID}.Payload()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err, "no schedule wake-up after the queued slot's run ended")
		if n.Payload == want {
			break
		}
	}
}

// TestPruneScheduleFires: fires older than the task retention go, except a
// queued one; a pruned slot does not fire again.
func TestPruneScheduleFires(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapQueueOne, store.CatchUpOnce))
	fireAt(t, s, t0)                  // created
	fireAt(t, s, t0.Add(time.Minute)) // queued
	fireAt(t, s, t0.Add(2*time.Minute))
	require.Equal(t, []string{"0s created", "1m0s queued", "2m0s skipped/queue_full"}, summaries(t0, history(t, s, sc.ID)))

	// The first two entries were recorded 31 days ago: their ids (UUID
	// version 7) carry the time they were made.
	exec(t, b.pool, `UPDATE schedule_fires SET id = encode(overlay(uuid_send(id)
			PLACING substring(int8send((extract(epoch FROM now() - interval '31 days') * 1000)::bigint) FROM 3)
			FROM 1 FOR 6), 'hex')::uuid
		WHERE schedule_id = $1 AND slot_at < $2`, sc.ID, t0.Add(2*time.Minute))

	res := prune(t, s, pruneParams(100))
	require.Equal(t, 1, res.ScheduleFires, "the old created entry goes, the old queued one stays")
	require.Equal(t, []string{"1m0s queued", "2m0s skipped/queue_full"}, summaries(t0, history(t, s, sc.ID)))
	require.Empty(t, fireAt(t, s, t0.Add(2*time.Minute)), "the pruned slot does not fire again")
	require.Zero(t, prune(t, s, pruneParams(100)).ScheduleFires)
}
