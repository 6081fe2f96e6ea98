package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestCompleteAttemptsAnswersEachCompletionOnItsOwn sends one group holding
// every kind of completion — each outcome, a cancel-requested task, a stale
// token, another worker's attempt, a replay, a claimed batch that was never
// persisted, the same completion twice and an invalid outcome — and checks
// each answer and row against what a completion alone gives.
func TestCompleteAttemptsAnswersEachCompletionOnItsOwn(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	other := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
	assign(t, s, b.org.ID, other.ID)
	_, err := s.UpdateWorker(ctx, store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{MaxConcurrentTasks: ptrTo(20)}, onlineWindow)
	require.NoError(t, err)

	createTasks(t, s, b.org.ID, 9, store.CreateTaskParams{})
	leases := acquire(t, s, b.worker.ID, 9).Leases
	require.Len(t, leases, 9)
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	otherLease := acquireOne(t, s, other.ID)
	ref := func(i int) store.AttemptRef { return refOf(b.worker.ID, leases[i]) }

	// leases[4]'s task is asked to stop; leases[6] was already completed.
	_, err = s.CancelTask(ctx, store.EveryOrganization(), leases[4].Task.ID)
	require.NoError(t, err)
	first := complete(t, s, ref(6), store.AttemptSucceeded, false)
	seq := 7
	stale := ref(5)
	stale.LeaseToken = "not-the-token"

	group := []store.CompleteParams{
		{AttemptRef: ref(0), Outcome: store.AttemptSucceeded},
		{AttemptRef: ref(1), Outcome: store.AttemptFailed, ErrorCode: "boom", ErrorMessage: "retry me", Retryable: true},
		{AttemptRef: ref(2), Outcome: store.AttemptFailed, ErrorCode: "fatal", ErrorMessage: "do not retry"},
		{AttemptRef: ref(3), Outcome: store.AttemptCancelled},
		{AttemptRef: ref(4), Outcome: store.AttemptCancelled},
		{AttemptRef: stale, Outcome: store.AttemptSucceeded},
		{AttemptRef: ref(6), Outcome: store.AttemptSucceeded},
		{AttemptRef: ref(7), Outcome: store.AttemptSucceeded, LastSequenceNumber: &seq},
		{AttemptRef: ref(8), Outcome: store.AttemptSucceeded},
		{AttemptRef: ref(8), Outcome: store.AttemptSucceeded},
		{AttemptRef: store.AttemptRef{WorkerID: b.worker.ID, AttemptID: otherLease.AttemptID, LeaseToken: otherLease.LeaseToken}, Outcome: store.AttemptSucceeded},
		{AttemptRef: ref(0), Outcome: "exploded"},
	}
	out := s.CompleteAttempts(ctx, group)
	require.Len(t, out, len(group))

	wantState := map[int]store.TaskState{
		0: store.TaskCompleted, 1: store.TaskRetryWait, 2: store.TaskFailedTerminal,
		3: store.TaskPending, 4: store.TaskCancelled,
	}
	for i, want := range wantState {
		require.NoError(t, out[i].Err, "completion %d", i)
		require.Equal(t, want, out[i].Result.TaskState, "completion %d", i)
		require.Equal(t, leases[i].Task.ID, out[i].Result.TaskID)
		require.Equal(t, want, taskState(t, s, leases[i].Task.ID), "completion %d", i)
		require.Equal(t, group[i].Outcome, attemptStatus(t, b.pool, leases[i].AttemptID))
		// A completion alone, repeated now, replays the group's answer.
		again, err := s.CompleteAttempt(ctx, group[i])
		require.NoError(t, err)
		require.True(t, again.Replayed)
		again.Replayed = false
		require.Equal(t, normalize(out[i].Result), normalize(again))
	}
	require.NotNil(t, out[1].Result.RetryAt, "a retry says when")
	require.Equal(t, 0, getTask(t, s, leases[3].Task.ID).AttemptCount, "a give-back uses no attempt")

	require.ErrorIs(t, out[5].Err, store.ErrLeaseLost)
	require.Equal(t, store.AttemptLeased, attemptStatus(t, b.pool, leases[5].AttemptID), "a stale token changes nothing")
	require.NoError(t, out[6].Err)
	require.True(t, out[6].Result.Replayed)
	out[6].Result.Replayed = false
	require.Equal(t, normalize(first), normalize(out[6].Result))
	require.ErrorIs(t, out[7].Err, store.ErrUnpersistedBatch)
	require.Equal(t, store.AttemptLeased, attemptStatus(t, b.pool, leases[7].AttemptID), "an unpersisted claim changes nothing")

	// The same completion twice: one ends the attempt, the other replays it.
	require.NoError(t, out[8].Err)
	require.NoError(t, out[9].Err)
	require.NotEqual(t, out[8].Result.Replayed, out[9].Result.Replayed)
	require.Equal(t, store.TaskCompleted, taskState(t, s, leases[8].Task.ID))

	require.ErrorIs(t, out[10].Err, store.ErrNotFound, "another worker's attempt does not exist for this one")
	require.Equal(t, store.AttemptLeased, attemptStatus(t, b.pool, otherLease.AttemptID))
	require.ErrorIs(t, out[11].Err, store.ErrInvalid)
	require.Equal(t, 1, countAttempts(t, b.pool, "task_id = $1", leases[0].Task.ID))
}

// TestCompletionBatcherGroupsConcurrentCompletions completes many attempts
// from many goroutines through the group committer: every one ends exactly
// once, and each caller gets its own attempt's answer.
func TestCompletionBatcherGroupsConcurrentCompletions(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	_, err := s.UpdateWorker(ctx, store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{MaxConcurrentTasks: ptrTo(200)}, onlineWindow)
	require.NoError(t, err)
	createTasks(t, s, b.org.ID, 200, store.CreateTaskParams{})
	leases := acquire(t, s, b.worker.ID, 200).Leases
	require.Len(t, leases, 200)

	batcher := store.NewCompletionBatcher(s, 2, 16, time.Minute)
	defer batcher.Close()
	out := make([]store.CompleteOutcome, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() {
			res, err := batcher.Complete(ctx, store.CompleteParams{AttemptRef: refOf(b.worker.ID, l), Outcome: store.AttemptSucceeded})
			out[i] = store.CompleteOutcome{Result: res, Err: err}
		})
	}
	wg.Wait()
	for i, l := range leases {
		require.NoError(t, out[i].Err)
		require.Equal(t, l.AttemptID, out[i].Result.AttemptID)
		require.Equal(t, l.Task.ID, out[i].Result.TaskID)
		require.Equal(t, store.TaskCompleted, out[i].Result.TaskState)
		require.False(t, out[i].Result.Replayed)
	}
	require.Equal(t, 200, countAttempts(t, b.pool, "worker_id = $1 AND status = 'succeeded' AND result_task_state = 'completed'", b.worker.ID))

	batcher.Close()
	_, err = batcher.Complete(ctx, store.CompleteParams{AttemptRef: refOf(b.worker.ID, leases[0]), Outcome: store.AttemptSucceeded})
	require.ErrorIs(t, err, store.ErrBatcherClosed)
}

func ptrTo[T any](v T) *T { return &v }
