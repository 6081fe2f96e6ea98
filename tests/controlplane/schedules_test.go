package controlplane

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// scheduleFires is a schedule's whole history through the API.
func scheduleFires(t *testing.T, g *harness.Gateway, id uuid.UUID) []apiclient.ScheduleFire {
	t.Helper()
	var all []apiclient.ScheduleFire
	params := &apiclient.ListScheduleFiresParams{Limit: ptr(500)}
	for {
		res, err := g.Control.ListScheduleFiresWithResponse(context.Background(), id, params)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		all = append(all, res.JSON200.Items...)
		if res.JSON200.NextCursor == nil {
			return all
		}
		params.Cursor = res.JSON200.NextCursor
	}
}

func createdFires(fires []apiclient.ScheduleFire, trigger apiclient.ScheduleFireTrigger) []apiclient.ScheduleFire {
	var out []apiclient.ScheduleFire
	for _, f := range fires {
		if f.Outcome == apiclient.Created && f.Trigger == trigger {
			out = append(out, f)
		}
	}
	return out
}

// requireOneTaskPerSlot checks in SQL that no slot of the schedule created
// two tasks or was recorded twice, and that every created fire has its task.
func requireOneTaskPerSlot(t *testing.T, g *harness.Gateway, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	var dupTasks, dupFires, orphans int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT trigger_slot_at FROM worker_tasks
		WHERE trigger_schedule_id = $1 AND trigger_kind = 'schedule' GROUP BY 1 HAVING count(*) > 1) d`, id).Scan(&dupTasks))
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT slot_at FROM schedule_fires
		WHERE schedule_id = $1 AND trigger_kind = 'schedule' GROUP BY 1 HAVING count(*) > 1) d`, id).Scan(&dupFires))
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires f WHERE f.schedule_id = $1
		AND f.outcome = 'created' AND NOT EXISTS (SELECT 1 FROM worker_tasks t WHERE t.id = f.task_id
			AND t.trigger_schedule_id = f.schedule_id AND t.trigger_slot_at = f.slot_at)`, id).Scan(&orphans))
	require.Zero(t, dupTasks, "a slot created two tasks")
	require.Zero(t, dupFires, "a slot was recorded twice")
	require.Zero(t, orphans, "a created fire has no task of its slot")
}

// TestScheduleFiresPausesAndRunsNow: an interval schedule fires on its own
// (one task per slot), stops when paused, and runs at once when asked.
func TestScheduleFiresPausesAndRunsNow(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	sc := createSchedule(t, g, everySecondTask(org, "every second"))
	require.Equal(t, 1, sc.Version)
	require.True(t, sc.Enabled)
	require.NotNil(t, sc.NextFireAt)

	harness.WaitFor(t, 30*time.Second, "three fires", func() bool {
		return len(createdFires(scheduleFires(t, g, sc.Id), apiclient.ScheduleFireTriggerSchedule)) >= 3
	})

	// The counter is added to just after the fires' COMMIT returns, so it
	// may trail the history by an instant.
	harness.WaitFor(t, 30*time.Second, "the fires counted", func() bool {
		return scrape(t, g, g.AdminToken)["gateway_schedule_fires_total"] >= 3
	})
	paused, err := g.Control.PauseScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, paused.StatusCode(), string(paused.Body))
	require.False(t, paused.JSON200.Enabled)
	// The pause holds the schedule's row lock: a fire commits before it or
	// not at all, so the history read now is final.
	before := scheduleFires(t, g, sc.Id)
	created := createdFires(before, apiclient.ScheduleFireTriggerSchedule)
	slots := map[time.Time]bool{}
	tasks := map[uuid.UUID]bool{}
	for _, f := range created {
		require.NotNil(t, f.TaskId)
		require.Equal(t, 1, f.Version)
		require.False(t, slots[f.SlotAt], "slot %s fired twice", f.SlotAt)
		require.False(t, tasks[*f.TaskId], "task %s came from two fires", *f.TaskId)
		slots[f.SlotAt], tasks[*f.TaskId] = true, true
	}
	requireOneTaskPerSlot(t, g, sc.Id)
	task := g.Task(t, *created[0].TaskId)
	require.NotNil(t, task.Trigger)
	require.Equal(t, apiclient.TriggerKindSchedule, task.Trigger.Kind)
	require.Equal(t, sc.Id, *task.Trigger.ScheduleId)
	require.Equal(t, 1, *task.Trigger.ScheduleVersion)
	require.True(t, created[0].SlotAt.Equal(*task.Trigger.SlotAt))
	list, err := g.Control.ListTasksWithResponse(ctx, &apiclient.ListTasksParams{OrganizationId: &org, Limit: ptr(500)})
	require.NoError(t, err)
	require.Len(t, list.JSON200.Items, len(created), "each fire created exactly one task")

	// While paused, `next` counts from now: its first time moves on as
	// slots pass. Two passed slots without a fire show the pause holds.
	firstNext := func() time.Time {
		res, err := g.Control.ListScheduleNextWithResponse(ctx, sc.Id, &apiclient.ListScheduleNextParams{Count: ptr(3)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Len(t, res.JSON200.Items, 3)
		return res.JSON200.Items[0].SlotAt
	}
	for range 2 {
		first := firstNext()
		harness.WaitFor(t, 10*time.Second, "a paused slot to pass", func() bool { return firstNext().After(first) })
	}
	require.Len(t, scheduleFires(t, g, sc.Id), len(before), "a paused schedule fired")

	// Run now, paused: one manual run, repeatable by its key.
	run := func() *apiclient.RunScheduleResponse {
		res, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{IdempotencyKey: ptr("run-1")})
		require.NoError(t, err)
		return res
	}
	first := run()
	require.Equal(t, http.StatusCreated, first.StatusCode(), string(first.Body))
	require.Equal(t, apiclient.ScheduleFireTriggerManual, first.JSON201.Trigger)
	require.NotNil(t, first.JSON201.TaskId)
	require.NotNil(t, first.JSON201.TokenId, "the token that asked is recorded")
	again := run()
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	require.Equal(t, "true", again.HTTPResponse.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.JSON201.Id, again.JSON200.Id)
	require.Equal(t, *first.JSON201.TaskId, *again.JSON200.TaskId)
	var kind string
	var token *uuid.UUID
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT trigger_kind, trigger_token_id FROM worker_tasks WHERE id = $1`,
		*first.JSON201.TaskId).Scan(&kind, &token))
	require.Equal(t, "manual", kind)
	require.Equal(t, first.JSON201.TokenId, token)
	require.Len(t, createdFires(scheduleFires(t, g, sc.Id), apiclient.ScheduleFireTriggerManual), 1)

	// A new version, then resume: it fires again, at the new version.
	upd := everySecondTask(org, "renamed")
	res, err := g.Control.UpdateScheduleWithResponse(ctx, sc.Id, apiclient.UpdateScheduleRequest{
		Name: upd.Name, Timing: upd.Timing, Definition: upd.Definition})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, 2, res.JSON200.Version)
	require.Equal(t, "renamed", res.JSON200.Name)
	resumed, err := g.Control.ResumeScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resumed.StatusCode(), string(resumed.Body))
	harness.WaitFor(t, 30*time.Second, "a fire of version 2", func() bool {
		for _, f := range scheduleFires(t, g, sc.Id) {
			if f.Version == 2 && f.Trigger == apiclient.ScheduleFireTriggerSchedule {
				return true
			}
		}
		return false
	})
	requireOneTaskPerSlot(t, g, sc.Id)

	var audited int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE target_id = $1
		AND action IN ('schedule.create', 'schedule.pause', 'schedule.run', 'schedule.update', 'schedule.resume')`,
		sc.Id.String()).Scan(&audited))
	require.Equal(t, 5, audited, "every change of the schedule is audited")
}

// TestScheduleBadInput: a bad field is a 400 problem naming it.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	start := time.Now().Add(time.Hour)
	end := start.Add(-time.Minute)
	cases := []struct {
		name   string
		timing apiclient.ScheduleTiming
		field  string
	}{
		{"malformed cron", apiclient.ScheduleTiming{Cron: ptr("61 * * * *")}, "cron"},
		{"unknown time zone", apiclient.ScheduleTiming{Cron: ptr("0 2 * * *"), TimeZone: ptr("Mars/Olympus_Mons")}, "time_zone"},
		{"end before start", apiclient.ScheduleTiming{IntervalSeconds: ptr(60), StartAt: &start, EndAt: &end}, "end_at"},
		{"neither cron nor interval", apiclient.ScheduleTiming{}, "cron"},
	}
	for _, c := range cases {
		req := everySecondTask(org, c.name)
		req.Timing = c.timing
		res, err := g.Control.CreateScheduleWithResponse(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, res.StatusCode(), "%s: %s", c.name, res.Body)
		require.Equal(t, "application/problem+json", res.HTTPResponse.Header.Get("Content-Type"), c.name)
		var p struct{ Code, Detail string }
		require.NoError(t, json.Unmarshal(res.Body, &p))
		require.Equal(t, "bad-request", p.Code, c.name)
		require.True(t, strings.HasPrefix(p.Detail, c.field+":"), "%s: the problem names %s: %q", c.name, c.field, p.Detail)
	}
	var n int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM schedules`).Scan(&n))
	require.Zero(t, n)

	// An unscoped caller is told that an organization does not exist.
	missing := uuid.New()
	res, err := g.Control.CreateScheduleWithResponse(context.Background(), everySecondTask(missing, "nowhere"))
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, res.StatusCode(), string(res.Body))
	require.Contains(t, string(res.Body), "does not exist")
	list, err := g.Control.ListSchedulesWithResponse(context.Background(), &apiclient.ListSchedulesParams{OrganizationId: &missing})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, list.StatusCode(), string(list.Body))
}

// TestAPITaskTrigger: a task created through the API says so, and records
// the token that asked (not shown in the answer).
func TestAPITaskTrigger(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	id := g.CreateTask(t, org, harness.TaskSpec{})
	task := g.Task(t, id)
	require.NotNil(t, task.Trigger)
	require.Equal(t, apiclient.TriggerKindApi, task.Trigger.Kind)
	require.Nil(t, task.Trigger.ScheduleId)
	var token *uuid.UUID
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT trigger_token_id FROM worker_tasks WHERE id = $1`, id).Scan(&token))
	require.NotNil(t, token)
}

// TestListFilteredByTrigger: task and scan lists keep those created by an
// API call, or by one schedule (a manual run here).
func TestListFilteredByTrigger(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	apiTask := g.CreateTask(t, org, harness.TaskSpec{})
	hourly := "@hourly"
	taskSchedule := everySecondTask(org, "hourly task")
	taskSchedule.Timing = apiclient.ScheduleTiming{Cron: &hourly}
	scanSchedule := apiclient.CreateScheduleRequest{OrganizationId: org, Name: "hourly scan", Timing: apiclient.ScheduleTiming{Cron: &hourly},
		Definition: apiclient.ScheduleDefinition{Kind: apiclient.ScheduleDefinitionKindScan, Scan: &apiclient.ScheduledScan{
			Targets: []string{"127.0.0.1"}, Plugins: []apiclient.ScanPlugin{{Name: "echo"}}}}}
	runNow := func(req apiclient.CreateScheduleRequest) (uuid.UUID, apiclient.ScheduleFire) {
		sc := createSchedule(t, g, req)
		res, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		return sc.Id, *res.JSON201
	}
	taskScheduleID, taskFire := runNow(taskSchedule)
	scanScheduleID, scanFire := runNow(scanSchedule)

	listTasks := func(p apiclient.ListTasksParams) []uuid.UUID {
		p.OrganizationId = &org
		res, err := g.Control.ListTasksWithResponse(ctx, &p)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		var ids []uuid.UUID
		for _, task := range res.JSON200.Items {
			ids = append(ids, task.Id)
		}
		return ids
	}
	api, manual := apiclient.TriggerKindApi, apiclient.TriggerKindManual
	require.Equal(t, []uuid.UUID{apiTask}, listTasks(apiclient.ListTasksParams{Trigger: &api}))
	require.Equal(t, []uuid.UUID{*taskFire.TaskId}, listTasks(apiclient.ListTasksParams{ScheduleId: &taskScheduleID}))
	require.Equal(t, []uuid.UUID{*taskFire.TaskId}, listTasks(apiclient.ListTasksParams{Trigger: &manual, ScheduleId: &taskScheduleID}))
	require.Empty(t, listTasks(apiclient.ListTasksParams{Trigger: &api, ScheduleId: &taskScheduleID}))

	scans, err := g.Control.ListScansWithResponse(ctx, &apiclient.ListScansParams{OrganizationId: &org, Trigger: &manual, ScheduleId: &scanScheduleID})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, scans.StatusCode(), string(scans.Body))
	require.Len(t, scans.JSON200.Items, 1)
	require.Equal(t, *scanFire.ScanId, scans.JSON200.Items[0].Id)
	none, err := g.Control.ListScansWithResponse(ctx, &apiclient.ListScansParams{OrganizationId: &org, Trigger: &api})
	require.NoError(t, err)
	require.Empty(t, none.JSON200.Items)

	bad, err := g.Control.ListTasksWithResponse(ctx, &apiclient.ListTasksParams{Trigger: ptr(apiclient.TriggerKind("cron"))})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, bad.StatusCode(), string(bad.Body))
}
