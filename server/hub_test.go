package server

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func signalled(w *Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func TestHubWakesOnlyAsManyWaitersAsTasks(t *testing.T) {
	h := NewHub()
	org := uuid.New()
	var ws []*Waiter
	for range 4 {
		ws = append(ws, h.Register(uuid.New(), []uuid.UUID{org}, 1, h.Seq()))
	}
	h.WakeOrganization(org, 2)
	require.True(t, signalled(ws[0]))
	require.True(t, signalled(ws[1]))
	require.False(t, signalled(ws[2]), "no thundering herd")
	require.Equal(t, 2, h.Waiting())

	// A woken waiter that leased nothing passes the notice on.
	h.Forward(ws[0])
	require.True(t, signalled(ws[2]))
	require.False(t, signalled(ws[3]))
}

// TestHubNoticePassedOnVisitsEachWorkerOnce: when no waiting worker can
// take a notice's task, passing it on ends after every worker had a turn,
// even as the ones that tried wait again; a new notice starts afresh.
func TestHubNoticePassedOnVisitsEachWorkerOnce(t *testing.T) {
	h := NewHub()
	org := uuid.New()
	var waiting []*Waiter
	for range 3 {
		waiting = append(waiting, h.Register(uuid.New(), []uuid.UUID{org}, 1, h.Seq()))
	}
	h.WakeOrganization(org, 1)
	turns := map[uuid.UUID]int{}
	for range 10 {
		woken := slices.DeleteFunc(slices.Clone(waiting), func(w *Waiter) bool { return !signalled(w) })
		if len(woken) == 0 {
			break
		}
		require.Len(t, woken, 1)
		w := woken[0]
		turns[w.worker]++
		// It leased nothing, passes the notice on and waits again.
		seq := h.Seq()
		h.Forward(w)
		waiting = append(waiting, h.Register(w.worker, []uuid.UUID{org}, 1, seq))
	}
	require.Len(t, turns, 3)
	for worker, n := range turns {
		require.Equal(t, 1, n, "worker %s tried the notice once, and then the chain ended", worker)
	}
	require.Equal(t, 3, h.Waiting())

	h.WakeOrganization(org, 1)
	woken := slices.DeleteFunc(slices.Clone(waiting), func(w *Waiter) bool { return !signalled(w) })
	require.Len(t, woken, 1, "a new notice wakes a waiter again")
}

func TestHubSlotsCountTowardsTheTasks(t *testing.T) {
	h := NewHub()
	org := uuid.New()
	big := h.Register(uuid.New(), []uuid.UUID{org}, 10, h.Seq())
	small := h.Register(uuid.New(), []uuid.UUID{org}, 1, h.Seq())
	h.WakeOrganization(org, 5)
	require.True(t, signalled(big))
	require.False(t, signalled(small), "one waiter with 10 free slots covers 5 tasks")
}

func TestHubNoticeBetweenAcquireAndRegisterIsNotMissed(t *testing.T) {
	h := NewHub()
	org, worker := uuid.New(), uuid.New()
	seq := h.Seq()             // read before the acquisition transaction
	h.WakeOrganization(org, 1) // a task commits meanwhile; nobody waits yet
	w := h.Register(worker, []uuid.UUID{org}, 1, seq)
	require.True(t, signalled(w), "registration sees the notice it missed")

	seq = h.Seq()
	h.WakeWorker(worker)
	w = h.Register(worker, nil, 0, seq)
	require.True(t, signalled(w))
}

func TestHubWorkerWakeReachesFullWaiters(t *testing.T) {
	h := NewHub()
	org, worker := uuid.New(), uuid.New()
	full := h.Register(worker, []uuid.UUID{org}, 0, h.Seq())
	h.WakeOrganization(org, 1)
	require.False(t, signalled(full), "a worker with no free slot is not woken for tasks")
	h.WakeWorker(worker)
	require.True(t, signalled(full), "capacity released")
}

func TestHubTimerWakesAfterDelay(t *testing.T) {
	h := NewHub()
	defer h.StopTimers()
	org := uuid.New()
	w := h.Register(uuid.New(), []uuid.UUID{org}, 1, h.Seq())
	h.WakeOrganizationAfter(org, 20*time.Millisecond)
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("timer never fired")
	}
}

func TestHubCloseAnswersEveryone(t *testing.T) {
	h := NewHub()
	h.Register(uuid.New(), nil, 0, h.Seq())
	h.Close()
	h.Close() // idempotent
	select {
	case <-h.Closed():
	default:
		t.Fatal("closed channel not closed")
	}
}

func TestHubCapacityWakeReachesOnlyFullWaiters(t *testing.T) {
	h := NewHub()
	org, worker := uuid.New(), uuid.New()
	waitingForTasks := h.Register(worker, []uuid.UUID{org}, 2, h.Seq())
	full := h.Register(worker, []uuid.UUID{org}, 0, h.Seq())
	h.WakeCapacity(worker)
	require.True(t, signalled(full), "a freed slot is what it waited for")
	require.False(t, signalled(waitingForTasks), "a freed slot brings no task")

	seq := h.Seq()
	h.WakeCapacity(worker)
	require.True(t, signalled(h.Register(worker, nil, 0, seq)), "a full poll registering late sees the notice")
}
