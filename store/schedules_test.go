package store_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

// Schedule tests decide at an injected time (FireDueSchedulesAt) instead of
// the database's now(): a schedule starts at t0, an hour ahead, so nothing
// is due by the real clock, and each step moves the injected time forward.

// scheduleOrigin is a whole minute an hour from now.
func scheduleOrigin() time.Time {
	return time.Now().Add(time.Hour).Truncate(time.Minute).UTC()
}

func taskDefinition(payload string) store.ScheduleDefinition {
	return store.ScheduleDefinition{Kind: store.ScheduleTask, Task: &store.ScheduledTask{
		TaskType: "scanner_plugin", Payload: json.RawMessage(payload)}}
}

// minutely is a one-minute interval schedule starting at t0.
func minutely(t0 time.Time, overlap store.OverlapPolicy, catchUp store.CatchUpPolicy) store.ScheduleParams {
	return store.ScheduleParams{
		Name:       uniqueName("schedule"),
		Timing:     store.ScheduleTiming{IntervalSeconds: 60, StartAt: &t0, Overlap: overlap, CatchUp: catchUp},
		Definition: taskDefinition(`{"plugin": "echo"}`),
	}
}

func createSchedule(t *testing.T, s *store.Store, org uuid.UUID, p store.ScheduleParams) store.Schedule {
	t.Helper()
	sc, err := s.CreateSchedule(t.Context(), store.EveryOrganization(), org, p)
	require.NoError(t, err)
	return sc
}

func fireAt(t *testing.T, s *store.Store, now time.Time) []store.ScheduleFire {
	t.Helper()
	fires, err := s.FireDueSchedulesAt(t.Context(), now, 100)
	require.NoError(t, err)
	return fires
}

// history is a schedule's fires, oldest first.
func history(t *testing.T, s *store.Store, id uuid.UUID) []store.ScheduleFire {
	t.Helper()
	fires, next, err := s.ScheduleFires(t.Context(), store.EveryOrganization(), id, nil, 1000)
	require.NoError(t, err)
	require.Nil(t, next)
	for i, j := 0, len(fires)-1; i < j; i, j = i+1, j-1 {
		fires[i], fires[j] = fires[j], fires[i]
	}
	return fires
}

// fireSummary renders a fire as "slot-offset outcome[/reason][+missed]".
func fireSummary(t0 time.Time, f store.ScheduleFire) string {
	out := fmt.Sprintf("%s %s", f.SlotAt.Sub(t0), f.Outcome)
	if f.SkipReason != "" {
		out += "/" + f.SkipReason
	}
	if f.MissedSlots > 0 {
		out += fmt.Sprintf("+%d", f.MissedSlots)
	}
	return out
}

func summaries(t0 time.Time, fires []store.ScheduleFire) []string {
	out := make([]string, len(fires))
	for i, f := range fires {
		out[i] = fireSummary(t0, f)
	}
	return out
}

func cancelTask(t *testing.T, s *store.Store, id uuid.UUID) {
	t.Helper()
	_, err := s.CancelTask(t.Context(), store.EveryOrganization(), id)
	require.NoError(t, err)
}

// TestScheduleClaimsEachSlotOnce: several claimers, each on its own
// connection, race over five schedules through thirty slots; every slot
// fires exactly once and creates exactly one task.
func TestScheduleClaimsEachSlotOnce(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	const schedules, slots, claimers = 5, 30, 4
	ids := make([]uuid.UUID, schedules)
	for i := range ids {
		ids[i] = createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce)).ID
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	for step := range slots {
		now := t0.Add(time.Duration(step) * time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, claimers)
		for range claimers {
			wg.Go(func() {
				for {
					fires, err := s.FireDueSchedulesAt(t.Context(), now, 1)
					if err != nil {
						errs <- err
						return
					}
					if len(fires) == 0 {
						return
					}
					mu.Lock()
					for _, f := range fires {
						seen[f.ScheduleID.String()+f.SlotAt.String()]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// Whatever a claimer stepped over (locked by another) is done now.
		for _, f := range fireAt(t, s, now) {
			seen[f.ScheduleID.String()+f.SlotAt.String()]++
		}
	}
	require.Len(t, seen, schedules*slots)
	for key, n := range seen {
		require.Equal(t, 1, n, key)
	}
	for _, id := range ids {
		fires := history(t, s, id)
		require.Len(t, fires, slots)
		for i, f := range fires {
			require.Equal(t, t0.Add(time.Duration(i)*time.Minute), f.SlotAt.UTC())
			require.Equal(t, store.FireCreated, f.Outcome)
			require.NotNil(t, f.TaskID)
		}
		var tasks, distinctSlots int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT trigger_slot_at) FROM worker_tasks
			WHERE trigger_schedule_id = $1 AND trigger_kind = 'schedule' AND trigger_schedule_version = 1`, id).
			Scan(&tasks, &distinctSlots))
		require.Equal(t, slots, tasks)
		require.Equal(t, slots, distinctSlots)
	}
}

// TestScheduleSlotKeyIsIdempotent: a slot already recorded never creates a
// second run, even if the schedule is put back to it (as a claim that
// committed and then lost its answer would leave nothing else to redo).
func TestScheduleSlotKeyIsIdempotent(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
	require.Len(t, fireAt(t, s, t0), 1)
	exec(t, b.pool, `UPDATE schedules SET next_slot_at = $2, next_fire_at = $2 WHERE id = $1`, sc.ID, t0)
	require.Empty(t, fireAt(t, s, t0))
	var tasks int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM worker_tasks WHERE trigger_schedule_id = $1`, sc.ID).Scan(&tasks))
	require.Equal(t, 1, tasks)
	got, err := s.GetSchedule(t.Context(), store.EveryOrganization(), sc.ID)
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Minute), got.NextSlotAt.UTC(), "the schedule moved on past the recorded slot")
}

func TestScheduleOverlapPolicies(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	minute := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

	t.Run("skip", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapSkip, store.CatchUpOnce))
		first := fireAt(t, s, minute(0))
		require.Len(t, first, 1)
		fireAt(t, s, minute(1)) // the first task is still pending
		cancelTask(t, s, *first[0].TaskID)
		fireAt(t, s, minute(2))
		require.Equal(t, []string{"0s created", "1m0s skipped/overlap", "2m0s created"}, summaries(t0, history(t, s, sc.ID)))
	})
	t.Run("allow", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
		fireAt(t, s, minute(0))
		fireAt(t, s, minute(1))
		fires := history(t, s, sc.ID)
		require.Equal(t, []string{"0s created", "1m0s created"}, summaries(t0, fires))
		require.Equal(t, store.TaskPending, taskState(t, s, *fires[0].TaskID), "runs overlap")
	})
	t.Run("queue one", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapQueueOne, store.CatchUpOnce))
		first := fireAt(t, s, minute(0))
		require.Len(t, first, 1)
		fireAt(t, s, minute(1)) // queued behind the first run
		fireAt(t, s, minute(2)) // the queue holds one: skipped
		got, err := s.GetSchedule(t.Context(), store.EveryOrganization(), sc.ID)
		require.NoError(t, err)
		require.Equal(t, minute(1), got.QueuedSlotAt.UTC())
		require.Empty(t, fireAt(t, s, minute(2)), "nothing runs while the first run is active")

		cancelTask(t, s, *first[0].TaskID)
		next, ok, err := s.NextScheduleFireAt(t.Context())
		require.NoError(t, err)
		require.True(t, ok)
		require.Zero(t, next.In, "a queued slot whose run ended is due now")
		queued := fireAt(t, s, minute(2))
		require.Len(t, queued, 1)
		require.Equal(t, minute(1), queued[0].SlotAt.UTC())
		require.NotNil(t, queued[0].TaskID)
		fireAt(t, s, minute(3)) // queued behind the queued slot's run
		require.Equal(t, []string{"0s created", "1m0s created", "2m0s skipped/queue_full", "3m0s queued"},
			summaries(t0, history(t, s, sc.ID)))
	})
}

// TestScheduleCatchUp: the claimers are down for ten minutes; "once" fires
// one run for all the missed slots, "skip" records them as skipped and
// fires only a slot still within its grace.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()

	t.Run("once", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
		fireAt(t, s, t0)
		fires := fireAt(t, s, t0.Add(10*time.Minute+45*time.Second))
		require.Len(t, fires, 1)
		require.NotNil(t, fires[0].TaskID)
		require.Equal(t, []string{"0s created", "10m0s created+9"}, summaries(t0, history(t, s, sc.ID)))
		got, err := s.GetSchedule(t.Context(), store.EveryOrganization(), sc.ID)
		require.NoError(t, err)
		require.Equal(t, t0.Add(11*time.Minute), got.NextSlotAt.UTC())
	})
	t.Run("skip, last slot on time", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpSkip))
		fireAt(t, s, t0)
		fireAt(t, s, t0.Add(10*time.Minute+10*time.Second))
		require.Equal(t, []string{"0s created", "9m0s skipped/missed+8", "10m0s created"}, summaries(t0, history(t, s, sc.ID)))
	})
	t.Run("skip, every slot late", func(t *testing.T) {
		sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpSkip))
		fireAt(t, s, t0)
		fireAt(t, s, t0.Add(10*time.Minute+45*time.Second))
		fireAt(t, s, t0.Add(11*time.Minute))
		require.Equal(t, []string{"0s created", "10m0s skipped/missed+9", "11m0s created"}, summaries(t0, history(t, s, sc.ID)))
	})
}

func TestSchedulePauseResume(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
	paused, err := s.PauseSchedule(t.Context(), store.EveryOrganization(), sc.ID)
	require.NoError(t, err)
	require.False(t, paused.Enabled)
	require.Empty(t, fireAt(t, s, t0.Add(5*time.Minute)), "a paused schedule fires nothing")
	_, ok, err := s.NextScheduleFireAt(t.Context())
	require.NoError(t, err)
	require.False(t, ok)

	resumed, err := s.ResumeSchedule(t.Context(), store.EveryOrganization(), sc.ID)
	require.NoError(t, err)
	require.True(t, resumed.Enabled)
	require.Equal(t, t0, resumed.NextSlotAt.UTC())
	next, ok, err := s.NextScheduleFireAt(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, t0, next.At.UTC())
	require.Positive(t, next.In)
	require.Len(t, fireAt(t, s, t0), 1)
	require.Empty(t, history(t, s, sc.ID)[0].SkipReason)
}

func TestScheduleRunNowAndVersions(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	sc := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapSkip, store.CatchUpOnce))
	token := uuid.New()

	run := store.RunScheduleParams{TokenID: &token, IdempotencyKey: "run-1", RequestSHA256: "sum-1"}
	manual, replayed, err := s.RunScheduleNow(t.Context(), store.EveryOrganization(), sc.ID, run)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, store.TriggerManual, manual.Trigger)
	require.NotNil(t, manual.TaskID)

	// Repeated under its key, the run answers the first one.
	again, replayed, err := s.RunScheduleNow(t.Context(), store.EveryOrganization(), sc.ID, run)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, manual.ID, again.ID)
	require.Equal(t, *manual.TaskID, *again.TaskID)
	require.Len(t, history(t, s, sc.ID), 1)
	run.RequestSHA256 = "sum-2"
	_, _, err = s.RunScheduleNow(t.Context(), store.EveryOrganization(), sc.ID, run)
	require.ErrorIs(t, err, store.ErrIdempotencyKeyReused)

	var kind string
	var version int
	var tokenID uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT trigger_kind, trigger_schedule_version, trigger_token_id
		FROM worker_tasks WHERE id = $1`, *manual.TaskID).Scan(&kind, &version, &tokenID))
	require.Equal(t, "manual", kind)
	require.Equal(t, 1, version)
	require.Equal(t, token, tokenID)
	got, err := s.GetSchedule(t.Context(), store.EveryOrganization(), sc.ID)
	require.NoError(t, err)
	require.Equal(t, t0, got.NextSlotAt.UTC(), "a manual run leaves the slots alone")

	// An edit is a new version; the next fire records it, version 1 stays.
	cancelTask(t, s, *manual.TaskID)
	p := minutely(t0, store.OverlapSkip, store.CatchUpOnce)
	p.Name = sc.Name
	p.Definition = taskDefinition(`{"plugin": "echo", "v": 2}`)
	updated, err := s.UpdateSchedule(t.Context(), store.EveryOrganization(), sc.ID, p)
	require.NoError(t, err)
	require.Equal(t, 2, updated.Version)
	require.Equal(t, t0, updated.NextSlotAt.UTC(), "the same timing keeps the pending slot")
	fires := fireAt(t, s, t0)
	require.Len(t, fires, 1)
	require.Equal(t, 2, fires[0].Version)
	task := getTask(t, s, *fires[0].TaskID)
	require.JSONEq(t, `{"plugin": "echo", "v": 2}`, string(task.Payload))
	var v1 string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT definition->'task'->>'payload' FROM schedule_versions
		WHERE schedule_id = $1 AND version = 1`, sc.ID).Scan(&v1))
	require.JSONEq(t, `{"plugin": "echo"}`, v1)

	// A task made through the API records that.
	apiTask := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT trigger_kind FROM worker_tasks WHERE id = $1`, apiTask.ID).Scan(&kind))
	require.Equal(t, "api", kind)
}

func TestScheduleCreatesScan(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	p := minutely(t0, store.OverlapSkip, store.CatchUpOnce)
	p.Definition = store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
		Targets: []string{"example.test"}, Plugins: []store.ScheduledPlugin{{Name: "dns"}, {Name: "http"}}}}
	sc := createSchedule(t, s, b.org.ID, p)
	fires := fireAt(t, s, t0)
	require.Len(t, fires, 1)
	require.NotNil(t, fires[0].ScanID)
	scan, err := s.GetScan(t.Context(), store.EveryOrganization(), *fires[0].ScanID)
	require.NoError(t, err)
	require.Equal(t, []string{"example.test"}, scan.Targets)
	require.Len(t, scan.Jobs, 2)
	require.NotNil(t, scan.Jobs[0].Task, "the first job's task exists")
	var kind string
	var slot time.Time
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT trigger_kind, trigger_slot_at FROM scans WHERE id = $1`, scan.ID).
		Scan(&kind, &slot))
	require.Equal(t, "schedule", kind)
	require.Equal(t, t0, slot.UTC())
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT trigger_kind, trigger_slot_at FROM worker_tasks WHERE id = $1`,
		scan.Jobs[0].Task.ID).Scan(&kind, &slot))
	require.Equal(t, "schedule", kind, "a scan's tasks carry its trigger")
	require.Equal(t, t0, slot.UTC())
	fireAt(t, s, t0.Add(time.Minute))
	require.Equal(t, []string{"0s created", "1m0s skipped/overlap"}, summaries(t0, history(t, s, sc.ID)),
		"the scan is still running")
}

func TestScheduleNextFireTimes(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	sc := createSchedule(t, s, b.org.ID, store.ScheduleParams{
		Timing:     store.ScheduleTiming{Cron: "0 9 * * *", TimeZone: "Europe/Berlin", JitterSeconds: 30},
		Definition: taskDefinition(`{}`),
	})
	slots, err := s.NextFireTimes(t.Context(), store.EveryOrganization(), sc.ID, 3)
	require.NoError(t, err)
	require.Len(t, slots, 3)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	for i, sl := range slots {
		local := sl.SlotAt.In(berlin)
		require.Equal(t, 9, local.Hour())
		require.Zero(t, local.Minute())
		require.False(t, sl.FireAt.Before(sl.SlotAt))
		require.Less(t, sl.FireAt.Sub(sl.SlotAt), 30*time.Second)
		if i > 0 {
			require.True(t, sl.SlotAt.After(slots[i-1].SlotAt))
		}
	}
	require.Equal(t, slots[0].SlotAt, sc.NextSlotAt.UTC())
	require.Equal(t, slots[0].FireAt, sc.NextFireAt.UTC())
}

// TestScheduleIsolation: another organization's scope sees none of it.
func TestScheduleIsolation(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	other := store.OneOrganization(createOrg(t, s, "org-b").ID)
	t0 := scheduleOrigin()
	p := minutely(t0, store.OverlapSkip, store.CatchUpOnce)
	sc := createSchedule(t, s, b.org.ID, p)
	ctx := t.Context()

	_, err := s.CreateSchedule(ctx, other, b.org.ID, p)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetSchedule(ctx, other, sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.UpdateSchedule(ctx, other, sc.ID, p)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.PauseSchedule(ctx, other, sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ResumeSchedule(ctx, other, sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.RunScheduleNow(ctx, other, sc.ID, store.RunScheduleParams{})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.ScheduleFires(ctx, other, sc.ID, nil, 10)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.NextFireTimes(ctx, other, sc.ID, 3)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, _, err := s.ListSchedules(ctx, other, nil, nil, 10)
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = s.GetSchedule(ctx, store.Tenant{}, sc.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the zero scope sees nothing")

	mine, _, err := s.ListSchedules(ctx, store.OneOrganization(b.org.ID), nil, nil, 10)
	require.NoError(t, err)
	require.Len(t, mine, 1)
	got, err := s.GetSchedule(ctx, store.OneOrganization(b.org.ID), sc.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Version, "the refused update changed nothing")
	require.True(t, got.Enabled)
}

// TestScheduleBadInput: each refusal is ErrInvalid, and its client text
// names the field.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	start := scheduleOrigin()
	before := start.Add(-time.Hour)
	cases := []struct {
		field  string
		timing store.ScheduleTiming
		def    *store.ScheduleDefinition
	}{
		{"cron", store.ScheduleTiming{Cron: "61 * * * *"}, nil},
		{"cron", store.ScheduleTiming{Cron: "* * *"}, nil},
		{"cron", store.ScheduleTiming{Cron: "@every 5m"}, nil},
		{"cron", store.ScheduleTiming{}, nil},
		{"cron", store.ScheduleTiming{Cron: "@daily", IntervalSeconds: 60}, nil},
		{"interval_seconds", store.ScheduleTiming{IntervalSeconds: -5}, nil},
		{"time_zone", store.ScheduleTiming{Cron: "@daily", TimeZone: "Mars/Olympus_Mons"}, nil},
		{"end_at", store.ScheduleTiming{Cron: "@daily", StartAt: &start, EndAt: &before}, nil},
		{"jitter_seconds", store.ScheduleTiming{IntervalSeconds: 60, JitterSeconds: 60}, nil},
		{"overlap", store.ScheduleTiming{Cron: "@daily", Overlap: "sometimes"}, nil},
		{"catch_up", store.ScheduleTiming{Cron: "@daily", CatchUp: "all"}, nil},
		{"definition.kind", store.ScheduleTiming{Cron: "@daily"}, &store.ScheduleDefinition{Kind: "job"}},
		{"definition.task.task_type", store.ScheduleTiming{Cron: "@daily"},
			&store.ScheduleDefinition{Kind: store.ScheduleTask, Task: &store.ScheduledTask{TaskType: "shell"}}},
		{"definition.task.payload", store.ScheduleTiming{Cron: "@daily"},
			&store.ScheduleDefinition{Kind: store.ScheduleTask, Task: &store.ScheduledTask{TaskType: "ai", Payload: json.RawMessage(`[1]`)}}},
		{"definition.scan.plugins", store.ScheduleTiming{Cron: "@daily"},
			&store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{Targets: []string{"x"}}}},
	}
	for _, tc := range cases {
		def := taskDefinition(`{}`)
		if tc.def != nil {
			def = *tc.def
		}
		p := store.ScheduleParams{Timing: tc.timing, Definition: def}
		_, err := s.CreateSchedule(t.Context(), store.EveryOrganization(), b.org.ID, p)
		require.ErrorIs(t, err, store.ErrInvalid, tc.field)
		text, ok := problem.PublicText(err)
		require.True(t, ok, tc.field)
		require.Regexp(t, "^"+tc.field+":", string(text))
	}
	// An update is checked the same way.
	sc := createSchedule(t, s, b.org.ID, minutely(start, store.OverlapSkip, store.CatchUpOnce))
	_, err := s.UpdateSchedule(t.Context(), store.EveryOrganization(), sc.ID,
		store.ScheduleParams{Timing: store.ScheduleTiming{Cron: "nope"}, Definition: taskDefinition(`{}`)})
	require.ErrorIs(t, err, store.ErrInvalid)
	var schedules int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM schedules`).Scan(&schedules))
	require.Equal(t, 1, schedules)
}

// TestScheduleRefusedRunSkipsItsSlot: a run the database refuses is
// recorded as skipped, and the schedules claimed with it still fire.
func TestScheduleRefusedRunSkipsItsSlot(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	bad := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
	good := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
	// A definition the checks of worker_tasks refuse (the API never stores one).
	exec(t, b.pool, `UPDATE schedule_versions SET definition = jsonb_set(definition, '{task,task_type}', '"shell"')
		WHERE schedule_id = $1`, bad.ID)
	require.Len(t, fireAt(t, s, t0), 2)
	require.Equal(t, []string{"0s skipped/error"}, summaries(t0, history(t, s, bad.ID)))
	require.Equal(t, []string{"0s created"}, summaries(t0, history(t, s, good.ID)))
	fireAt(t, s, t0.Add(time.Minute))
	require.Equal(t, []string{"0s skipped/error", "1m0s skipped/error"}, summaries(t0, history(t, s, bad.ID)))
}

// TestScheduleMigrationKeepsExistingRows: tasks and scans made before
// migration 000015 keep working with no trigger recorded, and the
// migration adds no index on worker_tasks (see "Shape" in doc.go).
func TestScheduleMigrationKeepsExistingRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const schedulesMigration = 15
	url, oldPool := beforeMigration(t, schedulesMigration)
	old := store.New(oldPool) // only for tables the migration leaves alone
	org := createOldOrg(t, oldPool, "org-a")
	worker := createOldWorker(t, oldPool, 2)
	assign(t, old, org.ID, worker.ID)
	indexes := func(pool *pgxpool.Pool) []string {
		rows, err := pool.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE tablename = 'worker_tasks' ORDER BY indexname`)
		require.NoError(t, err)
		defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return defs
	}
	taskIndexes := indexes(oldPool)
	var scanID uuid.UUID
	require.NoError(t, oldPool.QueryRow(ctx, `INSERT INTO scans (organization_id, targets) VALUES ($1, '["a.test"]') RETURNING id`,
		org.ID).Scan(&scanID))
	oldPool.Close()

	require.NoError(t, migrations.Up(ctx, url))
	pool, err := store.OpenPool(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.New(pool)
	require.Equal(t, taskIndexes, indexes(pool))
	var kind *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT trigger_kind FROM scans WHERE id = $1`, scanID).Scan(&kind))
	require.Nil(t, kind, "rows from before record no trigger")
	_, err = s.GetScan(ctx, store.EveryOrganization(), scanID)
	require.NoError(t, err)

	task := createTask(t, s, org.ID, store.CreateTaskParams{})
	lease := acquireOne(t, s, worker.ID)
	require.Equal(t, task.ID, lease.Task.ID)
	sc := createSchedule(t, s, org.ID, minutely(scheduleOrigin(), store.OverlapSkip, store.CatchUpOnce))
	require.Equal(t, 1, sc.Version)
}
