package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestScheduleWhoseTargetLeftScopeIsRefused: a schedule out of scope is
// refused when created or edited; schedules fire scans (on the batched
// path) and scanner tasks while their targets are in scope; once an
// operator removes the entry that covered one schedule's target, its next
// slot is skipped (error) and creates nothing, while the others still fire.
func TestScheduleWhoseTargetLeftScopeIsRefused(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	leaving, _, err := s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "leaving.example"})
	require.NoError(t, err)
	_, _, err = s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "staying.example"})
	require.NoError(t, err)

	t0 := scheduleOrigin()
	scanOf := func(target string) store.ScheduleParams {
		p := minutely(t0, store.OverlapAllow, store.CatchUpOnce)
		p.Definition = store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
			Targets: []string{target}, Plugins: []store.ScheduledPlugin{{Name: "echo"}}}}
		return p
	}
	leavingScan := createSchedule(t, s, b.org.ID, scanOf("leaving.example"))
	stayingScan := createSchedule(t, s, b.org.ID, scanOf("staying.example"))
	taskOf := minutely(t0, store.OverlapAllow, store.CatchUpOnce)
	taskOf.Definition = taskDefinition(`{"plugin": "tcp-connect", "input": {"host": "leaving.example"}}`)
	leavingTask := createSchedule(t, s, b.org.ID, taskOf)

	// A schedule out of scope is refused when created or edited, as its
	// scan or task would be.
	var oos *store.OutOfScopeError
	_, err = s.CreateSchedule(ctx, every, b.org.ID, scanOf("elsewhere.example"))
	require.ErrorAs(t, err, &oos)
	require.Equal(t, []string{"elsewhere.example"}, oos.Targets)
	elsewhere := minutely(t0, store.OverlapAllow, store.CatchUpOnce)
	elsewhere.Definition = taskDefinition(`{"plugin": "tcp-connect", "input": {"addresses": ["elsewhere.example:22"]}}`)
	_, err = s.CreateSchedule(ctx, every, b.org.ID, elsewhere)
	require.ErrorIs(t, err, store.ErrOutOfScope)
	_, err = s.UpdateSchedule(ctx, every, stayingScan.ID, scanOf("elsewhere.example"))
	require.ErrorIs(t, err, store.ErrOutOfScope)

	fireAt(t, s, t0.Add(time.Second))
	for _, id := range []uuid.UUID{leavingScan.ID, stayingScan.ID, leavingTask.ID} {
		require.Equal(t, []string{"0s created"}, summaries(t0, history(t, s, id)))
	}

	_, err = s.RemoveScopeTarget(ctx, every, b.org.ID, leaving.ID)
	require.NoError(t, err)
	fireAt(t, s, t0.Add(time.Minute+time.Second))
	require.Equal(t, []string{"0s created", "1m0s skipped/error"}, summaries(t0, history(t, s, leavingScan.ID)))
	require.Equal(t, []string{"0s created", "1m0s created"}, summaries(t0, history(t, s, stayingScan.ID)))
	require.Equal(t, []string{"0s created", "1m0s skipped/error"}, summaries(t0, history(t, s, leavingTask.ID)))
	var scans, tasks int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM scans WHERE trigger_schedule_id = $1), (SELECT count(*) FROM worker_tasks WHERE trigger_schedule_id = $2)`,
		leavingScan.ID, leavingTask.ID).Scan(&scans, &tasks))
	require.Equal(t, 1, scans, "the refused slot created no scan")
	require.Equal(t, 1, tasks, "the refused slot created no task")
}
