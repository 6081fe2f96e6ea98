package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// hourly is an hourly task schedule with the given overlap policy.
func hourly(overlap store.OverlapPolicy) store.ScheduleParams {
	return store.ScheduleParams{Name: uniqueName("hourly"), Timing: store.ScheduleTiming{Cron: "0 * * * *", Overlap: overlap},
		Definition: taskDefinition(`{"plugin": "echo"}`)}
}

// TestScheduleMinIntervalOnCreateAndEdit: a schedule whose slots come closer
// than the store's minimum is refused on create and on edit, for an
// interval and for a cron expression, and a refused edit leaves the
// schedule at its version.
func TestScheduleMinIntervalOnCreateAndEdit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	every := func(tm store.ScheduleTiming) store.ScheduleParams {
		p := hourly(store.OverlapAllow)
		p.Timing = tm
		return p
	}
	_, err := s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, every(store.ScheduleTiming{IntervalSeconds: 59}))
	require.ErrorIs(t, err, store.ErrScheduleTooFrequent, "the default minimum is a minute")
	sc := createSchedule(t, s, b.org.ID, every(store.ScheduleTiming{IntervalSeconds: 60}))

	s.SetScheduleLimits(store.ScheduleLimits{MinInterval: 5 * time.Minute, Quota: 100})
	for _, tm := range []store.ScheduleTiming{{IntervalSeconds: 299}, {Cron: "*/2 * * * *"}, {Cron: "0,4 * * * *"}} {
		_, err := s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, every(tm))
		require.ErrorIs(t, err, store.ErrScheduleTooFrequent, "create %+v", tm)
		_, err = s.UpdateSchedule(ctx, store.EveryOrganization(), sc.ID, every(tm))
		require.ErrorIs(t, err, store.ErrScheduleTooFrequent, "edit %+v", tm)
	}
	got, err := s.GetSchedule(ctx, store.EveryOrganization(), sc.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Version, "a refused edit adds no version")
	_, err = s.UpdateSchedule(ctx, store.EveryOrganization(), sc.ID, every(store.ScheduleTiming{Cron: "*/5 * * * *"}))
	require.NoError(t, err)
	createSchedule(t, s, b.org.ID, every(store.ScheduleTiming{IntervalSeconds: 300}))
}

// TestScheduleQuotaUnderConcurrentCreates: creates racing for the last
// places of an organization's quota never exceed it; the refused ones are
// ErrQuotaExceeded, deleted schedules do not count, and the organization's
// own max_schedules overrides the store's default.
func TestScheduleQuotaUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	s.SetScheduleLimits(store.ScheduleLimits{MinInterval: time.Minute, Quota: 5})
	const racers = 24
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		created, refused int
		unexpected       []error
	)
	start := make(chan struct{})
	for range racers {
		wg.Go(func() {
			<-start
			_, err := s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, hourly(store.OverlapSkip))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, store.ErrQuotaExceeded):
				refused++
			default:
				unexpected = append(unexpected, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(t, unexpected)
	require.Equal(t, 5, created)
	require.Equal(t, racers-5, refused)
	require.Equal(t, 5, liveSchedules(t, b.pool, b.org.ID))

	list, _, err := s.ListSchedules(ctx, store.EveryOrganization(), &b.org.ID, nil, 100)
	require.NoError(t, err)
	_, err = s.DeleteSchedule(ctx, store.EveryOrganization(), list[0].ID)
	require.NoError(t, err)
	createSchedule(t, s, b.org.ID, hourly(store.OverlapSkip))
	_, err = s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, hourly(store.OverlapSkip))
	require.ErrorIs(t, err, store.ErrQuotaExceeded)

	_, err = b.pool.Exec(ctx, `UPDATE organizations SET max_schedules = 6 WHERE id = $1`, b.org.ID)
	require.NoError(t, err)
	createSchedule(t, s, b.org.ID, hourly(store.OverlapSkip))
	_, err = s.CreateSchedule(ctx, store.EveryOrganization(), b.org.ID, hourly(store.OverlapSkip))
	require.ErrorIs(t, err, store.ErrQuotaExceeded)
	require.Equal(t, 6, liveSchedules(t, b.pool, b.org.ID))

	other := createOrg(t, s, "org-b")
	createSchedule(t, s, other.ID, hourly(store.OverlapSkip))
}

func liveSchedules(t *testing.T, pool *pgxpool.Pool, org uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM schedules WHERE organization_id = $1 AND deleted_at IS NULL`,
		org).Scan(&n))
	return n
}

// makeScheduleDue puts a schedule's pending slot a second in the database's past
// and returns that slot.
func makeScheduleDue(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) time.Time {
	t.Helper()
	var slot time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `UPDATE schedules SET next_slot_at = now() - interval '1 second',
		next_fire_at = now() - interval '1 second' WHERE id = $1 RETURNING next_slot_at`, id).Scan(&slot))
	return slot
}

// firesOf counts a schedule's fire rows and the tasks it created.
func firesOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (fires, tasks int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM schedule_fires WHERE schedule_id = $1),
		(SELECT count(*) FROM worker_tasks WHERE trigger_schedule_id = $1)`, id).Scan(&fires, &tasks))
	return fires, tasks
}

// waitLockWaiters waits until n statements of this test's database wait
// on a lock.
func waitLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting >= n
	}, 30*time.Second, 5*time.Millisecond)
}

// TestScheduleDeleteStopsTheClaim: a due schedule deleted is never claimed
// again, by the database's clock or any later one; every verb answers
// ErrNotFound for it, and lists leave it out.
func TestScheduleDeleteStopsTheClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	sc := createSchedule(t, s, b.org.ID, hourly(store.OverlapAllow))
	makeScheduleDue(t, b.pool, sc.ID)
	deleted, err := s.DeleteSchedule(ctx, store.EveryOrganization(), sc.ID)
	require.NoError(t, err)
	require.Equal(t, sc.ID, deleted.ID)

	_, err = s.FireDueSchedules(ctx, 100)
	require.NoError(t, err)
	fireAt(t, s, time.Now().Add(30*24*time.Hour))
	fires, tasks := firesOf(t, b.pool, sc.ID)
	require.Zero(t, fires, "a deleted schedule fired")
	require.Zero(t, tasks)

	_, err = s.GetSchedule(ctx, store.EveryOrganization(), sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.UpdateSchedule(ctx, store.EveryOrganization(), sc.ID, hourly(store.OverlapAllow))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ResumeSchedule(ctx, store.EveryOrganization(), sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, store.RunScheduleParams{})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.ScheduleFires(ctx, store.EveryOrganization(), sc.ID, nil, 10)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.DeleteSchedule(ctx, store.EveryOrganization(), sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, _, err := s.ListSchedules(ctx, store.EveryOrganization(), &b.org.ID, nil, 100)
	require.NoError(t, err)
	require.Empty(t, list)

	other := createOrg(t, s, "org-b")
	mine := createSchedule(t, s, b.org.ID, hourly(store.OverlapAllow))
	_, err = s.DeleteSchedule(ctx, store.OneOrganization(other.ID), mine.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "another organization cannot delete it")
}

// TestScheduleDeleteRacesTheClaim: a claim and a deletion of the same due
// schedule, interleaved with row locks instead of sleeps. A claim running
// while the deletion holds the schedule skips it; a deletion arriving while
// a claim holds it waits for the claim's fire to commit. Either way no
// fire starts after the deletion commits.
func TestScheduleDeleteRacesTheClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)

	t.Run("claim during the deletion", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, hourly(store.OverlapAllow))
		makeScheduleDue(t, b.pool, sc.ID)
		// A queued entry of the schedule, held by another transaction,
		// stops the deletion after it has taken and changed the schedule.
		var queued uuid.UUID
		require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO schedule_fires (schedule_id, organization_id, version, slot_at,
			trigger_kind, outcome) VALUES ($1, $2, 1, now() - interval '1 hour', 'schedule', 'queued') RETURNING id`,
			sc.ID, b.org.ID).Scan(&queued))
		hold, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = hold.Rollback(context.Background()) }()
		_, err = hold.Exec(ctx, `SELECT 1 FROM schedule_fires WHERE id = $1 FOR UPDATE`, queued)
		require.NoError(t, err)

		deleted := make(chan error, 1)
		go func() {
			_, err := s.DeleteSchedule(ctx, store.EveryOrganization(), sc.ID)
			deleted <- err
		}()
		waitLockWaiters(t, b.pool, 1)
		fires, err := s.FireDueSchedules(ctx, 100)
		require.NoError(t, err)
		for _, f := range fires {
			require.NotEqual(t, sc.ID, f.ScheduleID, "the claim took a schedule being deleted")
		}
		require.NoError(t, hold.Rollback(ctx))
		require.NoError(t, <-deleted)

		_, err = s.FireDueSchedules(ctx, 100)
		require.NoError(t, err)
		fireAt(t, s, time.Now().Add(30*24*time.Hour))
		n, tasks := firesOf(t, b.pool, sc.ID)
		require.Zero(t, n, "a fire after the deletion (or the queued entry kept)")
		require.Zero(t, tasks)
	})

	t.Run("deletion during the claim", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, hourly(store.OverlapAllow))
		makeScheduleDue(t, b.pool, sc.ID)
		// The organization's row, held by another transaction, stops the
		// claim after it has locked the schedule: the slot's task names
		// the organization, whose key the insert must share.
		hold, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = hold.Rollback(context.Background()) }()
		_, err = hold.Exec(ctx, `SELECT 1 FROM organizations WHERE id = $1 FOR UPDATE`, b.org.ID)
		require.NoError(t, err)

		claimed := make(chan []store.ScheduleFire, 1)
		go func() {
			fires, err := s.FireDueSchedules(ctx, 100)
			if err != nil {
				t.Error(err)
			}
			claimed <- fires
		}()
		waitLockWaiters(t, b.pool, 1)
		deleted := make(chan error, 1)
		go func() {
			_, err := s.DeleteSchedule(ctx, store.EveryOrganization(), sc.ID)
			deleted <- err
		}()
		waitLockWaiters(t, b.pool, 2)
		require.NoError(t, hold.Rollback(ctx))
		fires := <-claimed
		require.NoError(t, <-deleted)
		require.Len(t, fires, 1, "the claim that held the schedule fires its slot")
		require.Equal(t, sc.ID, fires[0].ScheduleID)

		var firedBefore bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT bool_and(f.fired_at <= s.deleted_at) FROM schedule_fires f
			JOIN schedules s ON s.id = f.schedule_id WHERE s.id = $1`, sc.ID).Scan(&firedBefore))
		require.True(t, firedBefore)
		_, err = s.FireDueSchedules(ctx, 100)
		require.NoError(t, err)
		fireAt(t, s, time.Now().Add(30*24*time.Hour))
		n, tasks := firesOf(t, b.pool, sc.ID)
		require.Equal(t, 1, n, "a fire after the deletion")
		require.Equal(t, 1, tasks)
	})
}

// TestScheduleRunNowHonoursOverlap: a manual run while the schedule's
// latest run is active is ErrScheduleRunInProgress under skip and
// queue_one, and creates nothing; a repeat of the first run's key is still
// answered; once the run ends another may start; allow overlaps.
func TestScheduleRunNowHonoursOverlap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, b := setupStore(t)
	for _, overlap := range []store.OverlapPolicy{store.OverlapSkip, store.OverlapQueueOne} {
		sc := createSchedule(t, s, b.org.ID, hourly(overlap))
		first := store.RunScheduleParams{IdempotencyKey: uuid.NewString(), RequestSHA256: "run"}
		f, replayed, err := s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, first)
		require.NoError(t, err)
		require.False(t, replayed)

		_, _, err = s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, store.RunScheduleParams{})
		require.ErrorIs(t, err, store.ErrScheduleRunInProgress, string(overlap))
		_, _, err = s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID,
			store.RunScheduleParams{IdempotencyKey: uuid.NewString(), RequestSHA256: "run"})
		require.ErrorIs(t, err, store.ErrScheduleRunInProgress, string(overlap))
		fires, tasks := firesOf(t, b.pool, sc.ID)
		require.Equal(t, 1, fires, "a refused run left a fire")
		require.Equal(t, 1, tasks, "a refused run left a task")

		again, replayed, err := s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, first)
		require.NoError(t, err, "a repeat of the first run's key is answered")
		require.True(t, replayed)
		require.Equal(t, f.ID, again.ID)

		cancelTask(t, s, *f.TaskID)
		_, replayed, err = s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, store.RunScheduleParams{})
		require.NoError(t, err, "the run ended: another may start")
		require.False(t, replayed)
	}
	sc := createSchedule(t, s, b.org.ID, hourly(store.OverlapAllow))
	for range 2 {
		_, _, err := s.RunScheduleNow(ctx, store.EveryOrganization(), sc.ID, store.RunScheduleParams{})
		require.NoError(t, err)
	}
}
