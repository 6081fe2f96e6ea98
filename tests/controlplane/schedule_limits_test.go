package controlplane

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// requireProblemCode checks an answer is problem+json with status and code.
func requireProblemCode(t *testing.T, res *http.Response, body []byte, status int, code string) {
	t.Helper()
	require.Equal(t, status, res.StatusCode, string(body))
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, code, p.Code, string(body))
}

// hourlyTask is a schedule of a task every hour, overlap skip.
func hourlyTask(org uuid.UUID, name string) apiclient.CreateScheduleRequest {
	return apiclient.CreateScheduleRequest{OrganizationId: org, Name: name,
		Timing: apiclient.ScheduleTiming{Cron: ptr("0 * * * *")},
		Definition: apiclient.ScheduleDefinition{Kind: apiclient.ScheduleDefinitionKindTask, Task: &apiclient.ScheduledTask{
			TaskType: apiclient.TaskTypeScannerPlugin, Payload: ptr(apiclient.JSONObject(`{"plugin": "echo"}`))}}}
}

// TestScheduleMinimumInterval: a gateway refuses schedules whose slots come
// closer than its minimum, on create and on edit, for an interval and a
// cron expression, with 400 schedule-interval-too-short; the default is a
// minute.
func TestScheduleMinimumInterval(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Minute, server.DefaultConfig().ScheduleMinInterval, "the default minimum")
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.ScheduleMinInterval = 2 * time.Minute }})
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	sc := createSchedule(t, g, hourlyTask(org, "hourly"))

	for _, timing := range []apiclient.ScheduleTiming{
		{IntervalSeconds: ptr(119)},
		{IntervalSeconds: ptr(1)},
		{Cron: ptr("* * * * *")},
		{Cron: ptr("0,1 * * * *")},
	} {
		req := hourlyTask(org, "too often")
		req.Timing = timing
		res, err := g.Control.CreateScheduleWithResponse(ctx, req)
		require.NoError(t, err)
		requireProblemCode(t, res.HTTPResponse, res.Body, http.StatusBadRequest, "schedule-interval-too-short")

		upd, err := g.Control.UpdateScheduleWithResponse(ctx, sc.Id, apiclient.UpdateScheduleRequest{Name: "too often",
			Timing: timing, Definition: req.Definition})
		require.NoError(t, err)
		requireProblemCode(t, upd.HTTPResponse, upd.Body, http.StatusBadRequest, "schedule-interval-too-short")
	}
	got, err := g.Control.GetScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	require.Equal(t, 1, got.JSON200.Version, "a refused edit adds no version")
	var n int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM schedules`).Scan(&n))
	require.Equal(t, 1, n, "a refused create left a schedule")

	req := hourlyTask(org, "every two minutes")
	req.Timing = apiclient.ScheduleTiming{Cron: ptr("*/2 * * * *")}
	createSchedule(t, g, req)
	req.Timing = apiclient.ScheduleTiming{IntervalSeconds: ptr(120)}
	createSchedule(t, g, req)
}

// TestScheduleQuota: concurrent creates past an organization's quota are
// refused with 403 quota-exceeded and never exceed it; a deleted schedule
// frees its place, and another organization has its own quota.
func TestScheduleQuota(t *testing.T) {
	t.Parallel()
	const quota, racers = 3, 16
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.ScheduleQuota = quota }})
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		created  []uuid.UUID
		refusals []*apiclient.CreateScheduleResponse
	)
	start := make(chan struct{})
	for range racers {
		wg.Go(func() {
			<-start
			res, err := g.Control.CreateScheduleWithResponse(ctx, hourlyTask(org, "racer"))
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[res.StatusCode()]++
			if res.StatusCode() == http.StatusCreated {
				created = append(created, res.JSON201.Id)
			} else {
				refusals = append(refusals, res)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, map[int]int{http.StatusCreated: quota, http.StatusForbidden: racers - quota}, statuses)
	for _, res := range refusals {
		requireProblemCode(t, res.HTTPResponse, res.Body, http.StatusForbidden, "quota-exceeded")
	}
	var n int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE organization_id = $1`, org).Scan(&n))
	require.Equal(t, quota, n)

	del, err := g.Control.DeleteScheduleWithResponse(ctx, created[0])
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode(), string(del.Body))
	createSchedule(t, g, hourlyTask(org, "in the freed place"))
	res, err := g.Control.CreateScheduleWithResponse(ctx, hourlyTask(org, "one too many"))
	require.NoError(t, err)
	requireProblemCode(t, res.HTTPResponse, res.Body, http.StatusForbidden, "quota-exceeded")

	createSchedule(t, g, hourlyTask(g.NewOrganization(t, "other"), "its own quota"))
}

// assertNoError is require.NoError for goroutines: it marks the test
// failed without stopping the goroutine's caller.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestScheduleDelete: DELETE stops a schedule at once and for good: it is
// 404 to every operation afterwards and left out of lists, its runs stay
// readable, the deletion is audited, and a reader or another organization
// cannot delete it. The schedule fires every second; that it fires no more
// is checked against a second schedule, which goes on firing meanwhile.
func TestScheduleDelete(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	sc := createSchedule(t, g, everySecondTask(org, "doomed"))
	harness.WaitFor(t, 30*time.Second, "a fire", func() bool {
		return len(createdFires(scheduleFires(t, g, sc.Id), apiclient.ScheduleFireTriggerSchedule)) >= 1
	})

	reader, _, err := g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "reader",
		Permissions: []string{"reader"}, OrganizationID: &org})
	require.NoError(t, err)
	res, err := g.ControlClient(t, reader).DeleteScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	requireProblemCode(t, res.HTTPResponse, res.Body, http.StatusForbidden, "forbidden")
	other := g.NewOrganization(t, "other")
	stranger, _, err := g.Store.CreateAPIToken(ctx, store.EveryOrganization(), storeTokenParams(other))
	require.NoError(t, err)
	res, err = g.ControlClient(t, stranger).DeleteScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	requireProblemCode(t, res.HTTPResponse, res.Body, http.StatusNotFound, "not-found")

	producer, _, err := g.Store.CreateAPIToken(ctx, store.EveryOrganization(), storeTokenParams(org))
	require.NoError(t, err)
	res, err = g.ControlClient(t, producer).DeleteScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, res.StatusCode(), string(res.Body))
	// The deletion waited for any fire holding the schedule: what fired
	// is final now.
	var fired int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires WHERE schedule_id = $1`, sc.Id).Scan(&fired))
	require.Positive(t, fired)

	get, err := g.Control.GetScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	requireProblemCode(t, get.HTTPResponse, get.Body, http.StatusNotFound, "not-found")
	fires, err := g.Control.ListScheduleFiresWithResponse(ctx, sc.Id, &apiclient.ListScheduleFiresParams{})
	require.NoError(t, err)
	requireProblemCode(t, fires.HTTPResponse, fires.Body, http.StatusNotFound, "not-found")
	run, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{})
	require.NoError(t, err)
	requireProblemCode(t, run.HTTPResponse, run.Body, http.StatusNotFound, "not-found")
	resume, err := g.Control.ResumeScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	requireProblemCode(t, resume.HTTPResponse, resume.Body, http.StatusNotFound, "not-found")
	upd, err := g.Control.UpdateScheduleWithResponse(ctx, sc.Id, apiclient.UpdateScheduleRequest{Name: "back",
		Timing: sc.Timing, Definition: sc.Definition})
	require.NoError(t, err)
	requireProblemCode(t, upd.HTTPResponse, upd.Body, http.StatusNotFound, "not-found")
	again, err := g.Control.DeleteScheduleWithResponse(ctx, sc.Id)
	require.NoError(t, err)
	requireProblemCode(t, again.HTTPResponse, again.Body, http.StatusNotFound, "not-found")
	list, err := g.Control.ListSchedulesWithResponse(ctx, &apiclient.ListSchedulesParams{OrganizationId: &org})
	require.NoError(t, err)
	require.Empty(t, list.JSON200.Items)

	// Its runs stay readable, still naming it.
	tasks, err := g.Control.ListTasksWithResponse(ctx, &apiclient.ListTasksParams{ScheduleId: &sc.Id})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, tasks.StatusCode(), string(tasks.Body))
	require.Len(t, tasks.JSON200.Items, fired)

	var audited int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = 'schedule.delete'
		AND target_id = $1`, sc.Id.String()).Scan(&audited))
	require.Equal(t, 1, audited)

	// A second schedule fires twice after the deletion; the deleted one
	// fired nothing meanwhile.
	witness := createSchedule(t, g, everySecondTask(org, "witness"))
	harness.WaitFor(t, 30*time.Second, "the witness fires twice", func() bool {
		return len(createdFires(scheduleFires(t, g, witness.Id), apiclient.ScheduleFireTriggerSchedule)) >= 2
	})
	var after int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires WHERE schedule_id = $1`, sc.Id).Scan(&after))
	require.Equal(t, fired, after, "the deleted schedule fired")
}

// TestScheduleRunNowOverlap: with overlap skip, running a schedule while
// its latest run is active is 409 schedule-run-in-progress and creates
// nothing; a repeat of the first run's Idempotency-Key is still answered;
// after the run ends, another may run.
func TestScheduleRunNowOverlap(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	sc := createSchedule(t, g, hourlyTask(org, "skip"))
	key := uuid.NewString()
	first, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{IdempotencyKey: &key})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.StatusCode(), string(first.Body))

	second, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{})
	require.NoError(t, err)
	requireProblemCode(t, second.HTTPResponse, second.Body, http.StatusConflict, "schedule-run-in-progress")
	require.Len(t, scheduleFires(t, g, sc.Id), 1, "the refused run left a fire")

	replay, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{IdempotencyKey: &key})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, replay.StatusCode(), string(replay.Body))
	require.Equal(t, first.JSON201.Id, replay.JSON200.Id)

	cancel, err := g.Control.CancelTaskWithResponse(ctx, *first.JSON201.TaskId)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
	third, err := g.Control.RunScheduleWithResponse(ctx, sc.Id, &apiclient.RunScheduleParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, third.StatusCode(), string(third.Body))
}
