package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// fencedVerb is a worker write that must hold the attempt's lease.
type fencedVerb struct {
	name string
	call func(ctx context.Context, s *store.Store, b *fenceBundle, ref store.AttemptRef) (any, error)
	// noToken marks a verb that names an upload session instead of
	// presenting a lease token: the token cases do not apply to it.
	noToken bool
	// missIsLost marks a batch verb that answers every lease it cannot
	// renew as lost, whether or not the attempt is the worker's.
	missIsLost bool
}

// fenceBundle is a worker holding one lease, with an artifact upload
// session opened under it.
type fenceBundle struct {
	*testBundle
	lease  store.Lease
	ref    store.AttemptRef
	upload store.Upload
}

// fencedVerbs are every worker write the store has: each must refuse a
// lease it does not hold and change nothing.
var fencedVerbs = []fencedVerb{
	{name: "Heartbeat", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		return s.HeartbeatAttempt(ctx, ref)
	}},
	{name: "Start", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		return s.StartAttempt(ctx, ref)
	}},
	{name: "HeartbeatBatch", missIsLost: true, call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		statuses, err := s.RenewLeases(ctx, store.RenewParams{WorkerID: ref.WorkerID, Leases: []store.AttemptRef{ref}})
		if err != nil {
			return nil, err
		}
		if statuses[0].State == store.LeaseLost {
			return nil, store.ErrLeaseLost
		}
		return statuses, nil
	}},
	{name: "Complete", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		return s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: ref, Outcome: store.AttemptSucceeded})
	}},
	{name: "CompleteBatch", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		out := s.CompleteAttempts(ctx, []store.CompleteParams{{AttemptRef: ref, Outcome: store.AttemptSucceeded}})
		return out[0].Result, out[0].Err
	}},
	{name: "Results", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		return s.AcceptResultBatch(ctx, store.AcceptBatchParams{AttemptRef: ref, IdempotencyKey: uuid.NewString(),
			PayloadSHA256: "checksum", SequenceNumber: 1, Payload: json.RawMessage(`[]`),
			Ack: func(store.BatchInfo) ([]byte, error) { return []byte(`{}`), nil }})
	}},
	{name: "Logs", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		return s.AppendLog(ctx, ref, 0, []byte("late line\n"), 1<<20)
	}},
	{name: "ArtifactOpen", call: func(ctx context.Context, s *store.Store, _ *fenceBundle, ref store.AttemptRef) (any, error) {
		return s.OpenUpload(ctx, uploadParams(ref))
	}},
	{name: "ArtifactCommit", noToken: true, call: func(ctx context.Context, s *store.Store, b *fenceBundle, ref store.AttemptRef) (any, error) {
		upload := b.upload.ID
		if ref.AttemptID != b.lease.AttemptID {
			upload = uuid.New() // the session of an attempt that does not exist
		}
		return s.CommitUpload(ctx, ref.WorkerID, upload, func(context.Context, store.Upload) error { return nil })
	}},
}

// uploadParams declares a small artifact for the attempt.
func uploadParams(ref store.AttemptRef) store.OpenUploadParams {
	return store.OpenUploadParams{AttemptRef: ref, Name: "report.txt", ContentType: "text/plain", SizeBytes: 5,
		SHA256: strings.Repeat("0", 64), ObjectKey: "objects/" + uuid.NewString(), TTL: time.Hour,
		MaxBytes: 1 << 20, MaxBytesPerAttempt: 1 << 20}
}

// TestFencing drives every fenced verb with a lease it does not hold and
// asserts, river-style, the error, a zero result and both rows unchanged.
func TestFencing(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, started bool) (*store.Store, *fenceBundle) {
		t.Helper()
		s, bundle := setupStore(t)
		createTask(t, s, bundle.org.ID, store.CreateTaskParams{})
		lease := acquireOne(t, s, bundle.worker.ID)
		ref := refOf(bundle.worker.ID, lease)
		if started {
			_, err := s.StartAttempt(t.Context(), ref)
			require.NoError(t, err)
		}
		upload, err := s.OpenUpload(t.Context(), uploadParams(ref))
		require.NoError(t, err)
		return s, &fenceBundle{testBundle: bundle, lease: lease, ref: ref, upload: upload}
	}

	cases := []struct {
		name string
		// token marks a case about the lease token presented.
		token bool
		// stale turns the held lease into the reference a stale writer sends.
		stale   func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef
		wantErr error
	}{
		{"WrongToken", true, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			ref := b.ref
			ref.LeaseToken = "0123456789abcdef0123456789abcdef"
			return ref
		}, store.ErrLeaseLost},
		{"EmptyToken", true, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			ref := b.ref
			ref.LeaseToken = ""
			return ref
		}, store.ErrLeaseLost},
		{"TokenOfAnotherAttempt", true, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			createTask(t, s, b.org.ID, store.CreateTaskParams{})
			other := acquireOne(t, s, b.worker.ID)
			ref := b.ref
			ref.LeaseToken = other.LeaseToken
			return ref
		}, store.ErrLeaseLost},
		{"ExpiredLease", false, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			expireLease(t, b.pool, b.lease.AttemptID)
			return b.ref
		}, store.ErrLeaseLost},
		{"ExpiredLeaseSwept", false, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			expireLease(t, b.pool, b.lease.AttemptID)
			require.Equal(t, 1, sweep(t, s).ExpiredAttempts)
			return b.ref
		}, store.ErrLeaseLost},
		{"AnotherWorker", false, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			other := createWorker(t, s, b.pool, workerOpts{Capacity: 1})
			assign(t, s, b.org.ID, other.ID)
			ref := b.ref
			ref.WorkerID = other.ID // right attempt, right token, wrong certificate
			return ref
		}, store.ErrNotFound},
		{"UnknownAttempt", false, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			ref := b.ref
			ref.AttemptID = uuid.New()
			return ref
		}, store.ErrNotFound},
		{"SupersededByUnassign", false, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			a, err := s.UnassignWorker(t.Context(), store.EveryOrganization(), b.org.ID, b.worker.ID, true, "security")
			require.NoError(t, err)
			require.Equal(t, 1, a.CancelledAttempts)
			require.Equal(t, store.AttemptSuperseded, attemptStatus(t, b.pool, b.lease.AttemptID))
			return b.ref
		}, store.ErrLeaseLost},
		{"SupersededByDisable", false, func(t *testing.T, s *store.Store, b *fenceBundle) store.AttemptRef {
			_, err := s.UpdateWorker(t.Context(), store.EveryOrganization(), b.worker.ID, store.UpdateWorkerParams{Enabled: new(false), CancelActive: true}, onlineWindow)
			require.NoError(t, err)
			require.Equal(t, store.AttemptSuperseded, attemptStatus(t, b.pool, b.lease.AttemptID))
			return b.ref
		}, store.ErrLeaseLost},
	}

	for _, verb := range fencedVerbs {
		for _, started := range []bool{false, true} {
			state := "Leased"
			if started {
				state = "Running"
			}
			for _, tc := range cases {
				if tc.token && verb.noToken {
					continue
				}
				t.Run(verb.name+"/"+state+"/"+tc.name, func(t *testing.T) {
					t.Parallel()
					s, b := setup(t, started)
					ref := tc.stale(t, s, b)
					before := snapshot(t, b.pool, b.lease.AttemptID, b.lease.Task.ID)

					res, err := verb.call(t.Context(), s, b, ref)
					want := tc.wantErr
					if verb.missIsLost && errors.Is(want, store.ErrNotFound) {
						want = store.ErrLeaseLost
					}
					require.ErrorIs(t, err, want)
					require.Equal(t, before, snapshot(t, b.pool, b.lease.AttemptID, b.lease.Task.ID), "a refused write changes nothing")
					require.Zero(t, res, "a refused write returns a zero result")
				})
			}
		}
	}

	// After the attempt finished, every verb but a completion (which
	// replays) is a lost lease.
	for _, verb := range fencedVerbs {
		if strings.HasPrefix(verb.name, "Complete") {
			continue
		}
		t.Run(verb.name+"/AfterFinished", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t, true)
			complete(t, s, b.ref, store.AttemptSucceeded, false)
			before := snapshot(t, b.pool, b.lease.AttemptID, b.lease.Task.ID)

			res, err := verb.call(t.Context(), s, b, b.ref)
			require.ErrorIs(t, err, store.ErrLeaseLost)
			require.Equal(t, before, snapshot(t, b.pool, b.lease.AttemptID, b.lease.Task.ID))
			require.Zero(t, res)
		})
	}
}

func TestCompleteAttemptIdempotency(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*store.Store, *testBundle, store.AttemptRef, store.Lease) {
		t.Helper()
		s, bundle := setupStore(t)
		createTask(t, s, bundle.org.ID, store.CreateTaskParams{})
		lease := acquireOne(t, s, bundle.worker.ID)
		return s, bundle, refOf(bundle.worker.ID, lease), lease
	}

	outcomes := []struct {
		name      string
		outcome   store.AttemptStatus
		retryable bool
		wantState store.TaskState
	}{
		{"Succeeded", store.AttemptSucceeded, false, store.TaskCompleted},
		{"FailedRetryable", store.AttemptFailed, true, store.TaskRetryWait},
		{"FailedNonRetryable", store.AttemptFailed, false, store.TaskFailedTerminal},
		{"CancelledByWorker", store.AttemptCancelled, false, store.TaskPending},
	}
	for _, o := range outcomes {
		t.Run(o.name+"/SameOutcomeReplays", func(t *testing.T) {
			t.Parallel()
			s, bundle, ref, lease := setup(t)
			first := complete(t, s, ref, o.outcome, o.retryable)
			require.Equal(t, o.wantState, first.TaskState)
			require.Equal(t, o.outcome, first.AttemptStatus)
			require.Equal(t, lease.Task.ID, first.TaskID)
			require.Equal(t, o.wantState == store.TaskRetryWait, first.RetryAt != nil)
			before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)

			again, err := s.CompleteAttempt(t.Context(), store.CompleteParams{
				AttemptRef: ref, Outcome: o.outcome, Retryable: o.retryable, ErrorCode: "boom", ErrorMessage: "it broke",
			})
			require.NoError(t, err)
			require.True(t, again.Replayed)
			again.Replayed = false
			require.Equal(t, normalize(first), normalize(again), "a replay gives the original answer")
			require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID), "a replay writes nothing")
		})

		t.Run(o.name+"/OtherOutcomeRefused", func(t *testing.T) {
			t.Parallel()
			s, bundle, ref, lease := setup(t)
			complete(t, s, ref, o.outcome, o.retryable)
			before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)
			other := store.AttemptSucceeded
			if o.outcome == store.AttemptSucceeded {
				other = store.AttemptFailed
			}

			res, err := s.CompleteAttempt(t.Context(), store.CompleteParams{AttemptRef: ref, Outcome: other})
			require.ErrorIs(t, err, store.ErrAttemptFinished)
			require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID))
			require.Zero(t, res)
		})
	}

	t.Run("ReplayWithWrongTokenIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		s, bundle, ref, lease := setup(t)
		complete(t, s, ref, store.AttemptSucceeded, false)
		before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)
		ref.LeaseToken = "forged"

		res, err := s.CompleteAttempt(t.Context(), store.CompleteParams{AttemptRef: ref, Outcome: store.AttemptSucceeded})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID))
		require.Zero(t, res)
	})

	t.Run("ReplayByAnotherWorkerIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, bundle, ref, lease := setup(t)
		complete(t, s, ref, store.AttemptSucceeded, false)
		other := createWorker(t, s, bundle.pool, workerOpts{})
		before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)
		ref.WorkerID = other.ID

		res, err := s.CompleteAttempt(t.Context(), store.CompleteParams{AttemptRef: ref, Outcome: store.AttemptSucceeded})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID))
		require.Zero(t, res)
	})

	t.Run("UnpersistedBatchRefused", func(t *testing.T) {
		t.Parallel()
		s, bundle, ref, lease := setup(t)
		before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)

		res, err := s.CompleteAttempt(t.Context(), store.CompleteParams{AttemptRef: ref, Outcome: store.AttemptSucceeded, LastSequenceNumber: new(3)})
		require.ErrorIs(t, err, store.ErrUnpersistedBatch)
		require.ErrorIs(t, err, store.ErrConflict)
		require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID), "the fenced update is rolled back")
		require.Zero(t, res)
	})
}

// TestCompleteAttemptAfterTimeoutIsLeaseLost: an attempt the sweeper failed
// for exceeding its timeout was not finished by the worker, so the worker's
// late completion is a lost lease whatever its outcome — not "finished with
// another outcome", and never a replay.
func TestCompleteAttemptAfterTimeoutIsLeaseLost(t *testing.T) {
	t.Parallel()
	for _, outcome := range []store.AttemptStatus{store.AttemptFailed, store.AttemptSucceeded} {
		t.Run(string(outcome), func(t *testing.T) {
			t.Parallel()
			s, bundle := setupStore(t)
			createTask(t, s, bundle.org.ID, store.CreateTaskParams{AttemptTimeoutSeconds: new(60)})
			lease := acquireOne(t, s, bundle.worker.ID)
			exec(t, bundle.pool, `UPDATE worker_task_attempts SET deadline_at = now() - interval '1 second',
				lease_expires_at = now() - interval '1 second' WHERE id = $1`, lease.AttemptID)
			sweep(t, s)
			require.Equal(t, store.AttemptFailed, attemptStatus(t, bundle.pool, lease.AttemptID))
			before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)

			res, err := s.CompleteAttempt(t.Context(), store.CompleteParams{
				AttemptRef: refOf(bundle.worker.ID, lease), Outcome: outcome, Retryable: true,
			})
			require.ErrorIs(t, err, store.ErrLeaseLost)
			require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID))
			require.Zero(t, res)
		})
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, p store.CreateTaskParams) (*store.Store, *testBundle, store.Lease) {
		t.Helper()
		s, bundle := setupStore(t)
		createTask(t, s, bundle.org.ID, p)
		return s, bundle, acquireOne(t, s, bundle.worker.ID)
	}

	t.Run("RenewsAndStarts", func(t *testing.T) {
		t.Parallel()
		s, bundle, lease := setup(t, store.CreateTaskParams{})
		exec(t, bundle.pool, `UPDATE worker_task_attempts SET lease_expires_at = now() + interval '2 seconds' WHERE id = $1`, lease.AttemptID)

		st, err := s.HeartbeatAttempt(t.Context(), refOf(bundle.worker.ID, lease))
		require.NoError(t, err)
		require.Equal(t, store.LeaseActive, st.State)
		require.Equal(t, lease.AttemptID, st.AttemptID)
		require.Equal(t, 30*time.Second, st.LeaseTTL)
		require.Equal(t, 30*time.Second, st.LeaseDuration)
		require.Equal(t, store.AttemptRunning, attemptStatus(t, bundle.pool, lease.AttemptID))
		require.Equal(t, store.TaskRunning, taskState(t, s, lease.Task.ID))

		// Repeating start is harmless.
		st, err = s.StartAttempt(t.Context(), refOf(bundle.worker.ID, lease))
		require.NoError(t, err)
		require.Equal(t, store.LeaseActive, st.State)
		require.Equal(t, store.TaskRunning, taskState(t, s, lease.Task.ID))
	})

	t.Run("ReportsCancelRequested", func(t *testing.T) {
		t.Parallel()
		s, bundle, lease := setup(t, store.CreateTaskParams{})
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), lease.Task.ID)
		require.NoError(t, err)

		st, err := s.HeartbeatAttempt(t.Context(), refOf(bundle.worker.ID, lease))
		require.NoError(t, err)
		require.Equal(t, store.LeaseCancelRequested, st.State)
		require.Equal(t, store.TaskCancelling, taskState(t, s, lease.Task.ID), "a heartbeat never undoes a cancel")
	})

	t.Run("NeverPastTheAttemptDeadline", func(t *testing.T) {
		t.Parallel()
		s, bundle, lease := setup(t, store.CreateTaskParams{AttemptTimeoutSeconds: new(10), LeaseDurationSeconds: 30})
		require.Equal(t, 10*time.Second, lease.LeaseTTL, "the first lease already stops at the attempt deadline")

		_, err := s.HeartbeatAttempt(t.Context(), refOf(bundle.worker.ID, lease))
		require.NoError(t, err)
		var beyond bool
		require.NoError(t, bundle.pool.QueryRow(t.Context(),
			`SELECT lease_expires_at > deadline_at FROM worker_task_attempts WHERE id = $1`, lease.AttemptID).Scan(&beyond))
		require.False(t, beyond)
	})

	t.Run("RenewLeasesAnswersPerLease", func(t *testing.T) {
		t.Parallel()
		s, bundle := setupStore(t)
		createTasks(t, s, bundle.org.ID, 3, store.CreateTaskParams{})
		leases := acquire(t, s, bundle.worker.ID, 3).Leases
		require.Len(t, leases, 3)
		_, err := s.CancelTask(t.Context(), store.EveryOrganization(), leases[1].Task.ID)
		require.NoError(t, err)
		expireLease(t, bundle.pool, leases[2].AttemptID)
		bogus := store.AttemptRef{AttemptID: uuid.New(), LeaseToken: "nope"}

		out, err := s.RenewLeases(t.Context(), store.RenewParams{
			WorkerID:     bundle.worker.ID,
			Leases:       []store.AttemptRef{refOf(uuid.Nil, leases[0]), refOf(uuid.Nil, leases[1]), refOf(uuid.Nil, leases[2]), bogus},
			Capabilities: json.RawMessage(`{"v":2}`),
		})
		require.NoError(t, err)
		require.Len(t, out, 4)
		require.Equal(t, []store.LeaseState{store.LeaseActive, store.LeaseCancelRequested, store.LeaseLost, store.LeaseLost},
			[]store.LeaseState{out[0].State, out[1].State, out[2].State, out[3].State})
		require.Equal(t, bogus.AttemptID, out[3].AttemptID)
		w, err := s.GetWorker(t.Context(), store.EveryOrganization(), bundle.worker.ID, onlineWindow)
		require.NoError(t, err)
		require.JSONEq(t, `{"v":2}`, string(w.Capabilities))
		require.True(t, w.Online)
	})

	t.Run("RenewLeasesRevokedWorker", func(t *testing.T) {
		t.Parallel()
		s, bundle, lease := setup(t, store.CreateTaskParams{})
		exec(t, bundle.pool, `UPDATE workers SET revoked_at = now() WHERE id = $1`, bundle.worker.ID)
		before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)

		out, err := s.RenewLeases(t.Context(), store.RenewParams{WorkerID: bundle.worker.ID, Leases: []store.AttemptRef{refOf(uuid.Nil, lease)}})
		require.ErrorIs(t, err, store.ErrWorkerRevoked)
		require.Nil(t, out)
		require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID))
	})
}

// normalize makes results read at different times comparable with Equal.
func normalize(r store.CompleteResult) store.CompleteResult {
	r.FinishedAt = r.FinishedAt.UTC()
	if r.RetryAt != nil {
		at := r.RetryAt.UTC()
		r.RetryAt = &at
	}
	return r
}

// TestCompleteAttemptRejectsOtherOutcomes: a worker ends an attempt as
// succeeded, failed or cancelled, nothing else. Any other "outcome" must be
// refused as invalid before it touches a row: "running" or "leased" would
// leave an active attempt behind a task the completion moved on, and
// "expired" or "superseded" are the gateway's to decide.
func TestCompleteAttemptRejectsOtherOutcomes(t *testing.T) {
	t.Parallel()
	for _, outcome := range []store.AttemptStatus{store.AttemptLeased, store.AttemptRunning, store.AttemptExpired,
		store.AttemptSuperseded, "", "bogus"} {
		t.Run(string(outcome), func(t *testing.T) {
			t.Parallel()
			s, bundle := setupStore(t)
			createTask(t, s, bundle.org.ID, store.CreateTaskParams{})
			lease := acquireOne(t, s, bundle.worker.ID)
			ref := refOf(bundle.worker.ID, lease)
			_, err := s.StartAttempt(t.Context(), ref)
			require.NoError(t, err)
			before := snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID)

			res, err := s.CompleteAttempt(t.Context(), store.CompleteParams{AttemptRef: ref, Outcome: outcome, Retryable: true})
			require.ErrorIs(t, err, store.ErrInvalid)
			require.Equal(t, before, snapshot(t, bundle.pool, lease.AttemptID, lease.Task.ID))
			require.Zero(t, res)
		})
	}
}
