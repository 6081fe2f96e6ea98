package scheduletimer

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// TestScheduleTimerSleepsUntilTheNextFire: with nothing scheduled the
// timer sleeps until woken (an idle gateway queries nothing); a schedule due later bounds the
// sleep by its fire time; a due one is fired at once and the timer then
// sleeps until the next slot.
func TestScheduleTimerSleepsUntilTheNextFire(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	st := store.New(pool)
	st.SetScheduleLimits(store.ScheduleLimits{MinInterval: time.Second, Quota: store.DefaultScheduleLimits.Quota})
	timer := New(st, services.NewUnit("schedule-timer", slog.New(slog.DiscardHandler), nil))
	require.Equal(t, services.SleepUntilWoken, timer.fireDue(ctx), "nothing scheduled: sleep until a wake-up")

	org, err := st.CreateOrganization(ctx, store.EveryOrganization(), "acme", store.ScopePolicyUnrestricted)
	require.NoError(t, err)
	params := store.ScheduleParams{Name: "every 10 s",
		Timing: store.ScheduleTiming{IntervalSeconds: 10, Overlap: store.OverlapAllow},
		Definition: store.ScheduleDefinition{Kind: store.ScheduleTask,
			Task: &store.ScheduledTask{TaskType: "scanner_plugin", Payload: []byte(`{"plugin": "echo"}`)}}}
	sc, err := st.CreateSchedule(ctx, store.EveryOrganization(), org.ID, params)
	require.NoError(t, err)
	sleep := timer.fireDue(ctx)
	require.Positive(t, sleep)
	require.LessOrEqual(t, sleep, 10*time.Second, "the sleep ends by the first fire")

	// Make the slot due: the timer fires it and sleeps towards the next.
	_, err = pool.Exec(ctx, `UPDATE schedules SET next_slot_at = now() - interval '1 second',
		next_fire_at = now() - interval '1 second' WHERE id = $1`, sc.ID)
	require.NoError(t, err)
	sleep = timer.fireDue(ctx)
	require.Positive(t, sleep, "the due slot was fired, not left due")
	fires, _, err := st.ScheduleFires(ctx, store.EveryOrganization(), sc.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, fires, 1)
	require.Equal(t, store.FireCreated, fires[0].Outcome)
}

// TestScheduleTimerDrainsABacklogInRounds: more due schedules than one
// claim takes are all fired by one pass, in rounds of claims side by side,
// each slot once; the timer then sleeps at least scheduleGather.
func TestScheduleTimerDrainsABacklogInRounds(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	st := store.New(pool)
	timer := New(st, services.NewUnit("schedule-timer", slog.New(slog.DiscardHandler), nil))
	org, err := st.CreateOrganization(ctx, store.EveryOrganization(), "acme", store.ScopePolicyUnrestricted)
	require.NoError(t, err)
	const schedules = 4*scheduleFireBatch + scheduleFireBatch/2
	for i := range schedules {
		_, err := st.CreateSchedule(ctx, store.EveryOrganization(), org.ID, store.ScheduleParams{
			Name:   fmt.Sprintf("hourly %d", i),
			Timing: store.ScheduleTiming{IntervalSeconds: 3600, Overlap: store.OverlapAllow},
			Definition: store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
				Targets: []string{"127.0.0.1"}, Plugins: []store.ScheduledPlugin{{Name: "tcp-connect"}}}}})
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `UPDATE schedules SET next_slot_at = now() - interval '1 second',
		next_fire_at = now() - interval '1 second'`)
	require.NoError(t, err)

	sleep := timer.fireDue(ctx)
	require.GreaterOrEqual(t, sleep, scheduleGather)
	require.Equal(t, int64(schedules), timer.fires.Load(), "every due slot fired in one pass")
	require.Greater(t, timer.passes.Load(), int64(schedules/scheduleFireBatch), "in more claims than full ones: rounds ran")
	var scans, onceEach int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT trigger_schedule_id) FROM scans`).Scan(&scans, &onceEach))
	require.Equal(t, schedules, scans)
	require.Equal(t, schedules, onceEach, "one scan per schedule")
	var due int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE next_fire_at <= now()`).Scan(&due))
	require.Zero(t, due)
}
