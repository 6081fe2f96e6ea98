package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

func createHook(t *testing.T, s *store.Store, org uuid.UUID, types ...string) store.WebhookTarget {
	t.Helper()
	w, secret, err := s.CreateWebhookTarget(t.Context(), store.OneOrganization(org), hookKeyring, org,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: types, Enabled: true})
	require.NoError(t, err)
	require.Len(t, secret, 32)
	return w
}

// hookEvent is one outbox row with its body decoded.
type hookEvent struct {
	ID   uuid.UUID
	Type string
	Org  uuid.UUID
	Body map[string]any
}

func outbox(t *testing.T, pool *pgxpool.Pool) []hookEvent {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id, event_type, organization_id, body FROM webhook_events ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []hookEvent
	for rows.Next() {
		var e hookEvent
		var body []byte
		require.NoError(t, rows.Scan(&e.ID, &e.Type, &e.Org, &body))
		require.NoError(t, json.Unmarshal(body, &e.Body))
		require.Equal(t, e.ID.String(), e.Body["id"], "the body names its event id")
		require.Equal(t, e.Type, e.Body["type"])
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

func countHookRows(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), query, args...).Scan(&n))
	return n
}

// TestWebhookOutboxOnlyWhenSubscribed: a completion writes an outbox row
// and its deliveries in its own transaction, and only when the
// organization has a target subscribed to the event; another organization's
// target, or one subscribed to other events, gets nothing.
func TestWebhookOutboxOnlyWhenSubscribed(t *testing.T) {
	s, b := setupStore(t)
	other := createOrg(t, s, "other")
	createHook(t, s, other.ID, store.EventTaskCompleted)
	createHook(t, s, b.org.ID, store.EventScanCompleted)

	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	require.Empty(t, outbox(t, b.pool), "no target subscribed: nothing written")

	hook := createHook(t, s, b.org.ID, store.EventTaskCompleted, store.EventTaskFailedTerminal)
	second := createHook(t, s, b.org.ID, store.EventTaskCompleted)
	task := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	events := outbox(t, b.pool)
	require.Len(t, events, 1)
	require.Equal(t, store.EventTaskCompleted, events[0].Type)
	require.Equal(t, b.org.ID, events[0].Org)
	require.Equal(t, task.ID.String(), events[0].Body["data"].(map[string]any)["task_id"])
	require.Equal(t, 2, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND target_id IN ($2, $3) AND state = 'pending'`,
		events[0].ID, hook.ID, second.ID), "one delivery per subscribed target")

	// A retryable failure is not terminal: no event.
	createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 2})
	complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptFailed, true)
	require.Len(t, outbox(t, b.pool), 1)
	// A disabled target is not subscribed.
	_, err := s.UpdateWebhookTarget(t.Context(), store.EveryOrganization(), second.ID, store.WebhookTargetParams{
		URL: "http://127.0.0.1:9/x", EventTypes: []string{store.EventTaskCompleted}, Enabled: false})
	require.NoError(t, err)
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	lease := acquireOne(t, s, b.worker.ID)
	complete(t, s, refOf(b.worker.ID, lease), store.AttemptSucceeded, false)
	events = outbox(t, b.pool)
	require.Len(t, events, 2)
	require.Equal(t, 1, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, events[1].ID))
	// A replayed completion writes nothing more.
	replay, err := s.CompleteAttempt(t.Context(), store.CompleteParams{AttemptRef: refOf(b.worker.ID, lease), Outcome: store.AttemptSucceeded})
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	require.Len(t, outbox(t, b.pool), 2)
}

// TestWebhookOutboxFromTheSweeper: a task failed terminally by the sweeper
// — its last lease expired, or its execution deadline passed while queued —
// writes task.failed_terminal in the sweep's transaction.
func TestWebhookOutboxFromTheSweeper(t *testing.T) {
	s, b := setupStore(t)
	createHook(t, s, b.org.ID, store.EventTaskFailedTerminal)

	expiring := createTask(t, s, b.org.ID, store.CreateTaskParams{MaxAttempts: 1})
	lease := acquireOne(t, s, b.worker.ID)
	expireLease(t, b.pool, lease.AttemptID)
	queued := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	editTasks(t, b.pool, `UPDATE worker_tasks SET execution_deadline_at = now() - interval '1 second' WHERE id = $1`, queued.ID)
	res := sweep(t, s)
	require.Equal(t, 1, res.ExpiredAttempts)
	require.Equal(t, 1, res.DeadlinedTasks)

	events := outbox(t, b.pool)
	require.Len(t, events, 2)
	codes := map[string]string{}
	for _, e := range events {
		require.Equal(t, store.EventTaskFailedTerminal, e.Type)
		data := e.Body["data"].(map[string]any)
		codes[data["task_id"].(string)] = data["error_code"].(string)
	}
	require.Equal(t, map[string]string{expiring.ID.String(): "lease_expired", queued.ID.String(): "execution_deadline_exceeded"}, codes)
}

// TestWebhookOutboxTriggers: scans ending, worker revocation and skipped
// schedule slots write their events from triggers, to every organization
// concerned.
func TestWebhookOutboxTriggers(t *testing.T) {
	s, b := setupStore(t)
	createHook(t, s, b.org.ID, store.EventScanCompleted, store.EventScanFailed, store.EventWorkerRevoked, store.EventScheduleFireSkipped)

	scan, _, err := s.CreateScan(t.Context(), store.EveryOrganization(), store.CreateScanParams{OrganizationID: b.org.ID,
		Targets: []string{"example.com"}, Plugins: []store.ScanPlugin{{Name: "dns-resolve"}}})
	require.NoError(t, err)
	exec(t, b.pool, `UPDATE scans SET state = 'failed', completed_at = now() WHERE id = $1`, scan.ID)
	exec(t, b.pool, `UPDATE scans SET updated_at = now() WHERE id = $1`, scan.ID) // no state change: no event

	_, err = s.RevokeWorker(t.Context(), store.EveryOrganization(), b.worker.ID, "compromised", onlineWindow)
	require.NoError(t, err)

	sc, err := s.CreateSchedule(t.Context(), store.EveryOrganization(), b.org.ID, store.ScheduleParams{Name: "s",
		Timing: store.ScheduleTiming{Cron: "0 3 1 1 *"}, Definition: store.ScheduleDefinition{Kind: store.ScheduleScan,
			Scan: &store.ScheduledScan{Targets: []string{"example.com"}, Plugins: []store.ScheduledPlugin{{Name: "dns-resolve"}}}}})
	require.NoError(t, err)
	exec(t, b.pool, `INSERT INTO schedule_fires (schedule_id, organization_id, version, slot_at, trigger_kind, outcome, skip_reason)
		VALUES ($1, $2, 1, now(), 'schedule', 'skipped', 'overlap')`, sc.ID, b.org.ID)

	var types []string
	for _, e := range outbox(t, b.pool) {
		types = append(types, e.Type)
		if e.Type == store.EventWorkerRevoked {
			require.Equal(t, "compromised", e.Body["data"].(map[string]any)["reason"])
		}
	}
	require.Equal(t, []string{store.EventScanFailed, store.EventWorkerRevoked, store.EventScheduleFireSkipped}, types)
}

// TestWebhookWatchWorkerOffline: a worker going offline is reported once
// per transition, to its organizations, and never to a target created
// after it went offline.
func TestWebhookWatchWorkerOffline(t *testing.T) {
	s, b := setupStore(t)
	window := time.Minute
	// Offline for long, before any target existed: never announced.
	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() - interval '1 hour' WHERE id = $1`, b.worker.ID)
	createHook(t, s, b.org.ID, store.EventWorkerOffline)
	res, err := s.WatchWebhookConditions(t.Context(), window)
	require.NoError(t, err)
	require.True(t, res.Subscribed)
	require.Equal(t, 1, res.WorkersOffline, "marked as reported")
	require.Empty(t, outbox(t, b.pool))

	// Seen again: online, and due to go offline a window from now.
	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() WHERE id = $1`, b.worker.ID)
	res, err = s.WatchWebhookConditions(t.Context(), window)
	require.NoError(t, err)
	require.Zero(t, res.WorkersOffline)
	require.NotNil(t, res.NextIn)
	require.InDelta(t, window.Seconds(), res.NextIn.Seconds(), 5)

	// The window passes (both times move back): reported once.
	exec(t, b.pool, `UPDATE workers SET last_seen_at = last_seen_at - interval '61 seconds',
		offline_reported_at = offline_reported_at - interval '61 seconds' WHERE id = $1`, b.worker.ID)
	exec(t, b.pool, `UPDATE webhook_targets SET created_at = created_at - interval '61 seconds'`)
	for range 2 {
		_, err = s.WatchWebhookConditions(t.Context(), window)
		require.NoError(t, err)
	}
	events := outbox(t, b.pool)
	require.Len(t, events, 1)
	require.Equal(t, store.EventWorkerOffline, events[0].Type)
	require.Equal(t, b.worker.ID.String(), events[0].Body["data"].(map[string]any)["worker_id"])
}

// TestWebhookWatchNoEligibleWorker: an organization with leasable work and
// no online eligible worker is reported when it becomes so, once, and again
// after it recovered and lost its workers anew.
func TestWebhookWatchNoEligibleWorker(t *testing.T) {
	s, b := setupStore(t)
	createHook(t, s, b.org.ID, store.EventOrgNoEligibleWorker)
	watch := func() store.WebhookWatch {
		res, err := s.WatchWebhookConditions(t.Context(), time.Minute)
		require.NoError(t, err)
		return res
	}
	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() WHERE id = $1`, b.worker.ID)
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	require.Zero(t, watch().OrganizationsStarved, "an online worker is assigned")

	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() - interval '5 minutes' WHERE id = $1`, b.worker.ID)
	require.Equal(t, 1, watch().OrganizationsStarved)
	require.Zero(t, watch().OrganizationsStarved, "reported once while it lasts")

	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() WHERE id = $1`, b.worker.ID)
	require.Zero(t, watch().OrganizationsStarved)
	exec(t, b.pool, `UPDATE workers SET last_seen_at = now() - interval '5 minutes' WHERE id = $1`, b.worker.ID)
	require.Equal(t, 1, watch().OrganizationsStarved, "a new transition")

	events := outbox(t, b.pool)
	require.Len(t, events, 2)
	for _, e := range events {
		require.Equal(t, store.EventOrgNoEligibleWorker, e.Type)
		require.EqualValues(t, 1, e.Body["data"].(map[string]any)["leasable_tasks"])
	}
}

// TestWebhookDeliveryRetriesAndBreaker: a claimed delivery is held for its
// claim; failures back off and open the target's circuit at the threshold,
// which holds every delivery to it back until the cooldown ends; a stale
// record (its claim ran out and another try began) changes nothing; a
// success closes the circuit.
func TestWebhookDeliveryRetriesAndBreaker(t *testing.T) {
	s, b := setupStore(t)
	hook := createHook(t, s, b.org.ID, store.EventTaskCompleted)
	for range 2 {
		createTask(t, s, b.org.ID, store.CreateTaskParams{})
		complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	}
	policy := store.DeliveryPolicy{MaxAttempts: 3, RetryBase: time.Hour, RetryMax: time.Hour, BreakerThreshold: 2, BreakerCooldown: time.Hour}

	claimed, err := s.ClaimWebhookDeliveries(t.Context(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	first := claimed[0]
	require.Equal(t, 1, first.Attempt)
	require.Len(t, first.Secrets, 1)
	body, err := s.WebhookEventBody(t.Context(), first.EventID)
	require.NoError(t, err)
	require.Equal(t, body, first.Body)

	// The first is held; the second is claimable.
	claimed, err = s.ClaimWebhookDeliveries(t.Context(), 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	second := claimed[0]
	require.NotEqual(t, first.ID, second.ID)

	status := 503
	require.NoError(t, s.RecordWebhookDelivery(t.Context(), store.DeliveryOutcome{DeliveryID: first.ID, Attempt: 1,
		StatusCode: &status, Error: "HTTP 503"}, policy))
	got, err := s.GetWebhookTarget(t.Context(), store.EveryOrganization(), hook.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.ConsecutiveFailures)
	require.Nil(t, got.CircuitOpenUntil)
	require.NoError(t, s.RecordWebhookDelivery(t.Context(), store.DeliveryOutcome{DeliveryID: second.ID, Attempt: 1,
		Error: "timed out"}, policy))
	got, err = s.GetWebhookTarget(t.Context(), store.EveryOrganization(), hook.ID)
	require.NoError(t, err)
	require.NotNil(t, got.CircuitOpenUntil, "the second failure in a row opens the circuit")

	// Both are due (their backoff forced past), but the circuit holds them.
	exec(t, b.pool, `UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 second'`)
	claimed, err = s.ClaimWebhookDeliveries(t.Context(), 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed)
	in, ok, err := s.NextWebhookDeliveryIn(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), in.Seconds(), 60, "the next try waits for the circuit")

	// The cooldown ends: the next claim probes.
	exec(t, b.pool, `UPDATE webhook_targets SET circuit_open_until = now() - interval '1 second' WHERE id = $1`, hook.ID)
	claimed, err = s.ClaimWebhookDeliveries(t.Context(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	probe := claimed[0]
	require.Equal(t, 2, probe.Attempt)
	// A stale record of the first try changes nothing.
	require.NoError(t, s.RecordWebhookDelivery(t.Context(), store.DeliveryOutcome{DeliveryID: probe.ID, Attempt: 1, Delivered: true}, policy))
	require.Equal(t, 0, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`))
	ok200 := 200
	require.NoError(t, s.RecordWebhookDelivery(t.Context(), store.DeliveryOutcome{DeliveryID: probe.ID, Attempt: 2, Delivered: true,
		StatusCode: &ok200, Latency: 12 * time.Millisecond}, policy))
	got, err = s.GetWebhookTarget(t.Context(), store.EveryOrganization(), hook.ID)
	require.NoError(t, err)
	require.Zero(t, got.ConsecutiveFailures)
	require.Nil(t, got.CircuitOpenUntil)

	list, next, err := s.ListWebhookDeliveries(t.Context(), store.OneOrganization(b.org.ID), hook.ID, nil, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NotNil(t, next, "cursor paging")
	rest, next, err := s.ListWebhookDeliveries(t.Context(), store.OneOrganization(b.org.ID), hook.ID, next, 10)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Nil(t, next)
	byID := map[uuid.UUID]store.WebhookDelivery{list[0].ID: list[0], rest[0].ID: rest[0]}
	require.Equal(t, store.DeliveryDelivered, byID[probe.ID].State)
	require.Equal(t, 200, *byID[probe.ID].LastStatusCode)
	require.Equal(t, 12*time.Millisecond, *byID[probe.ID].LastLatency)

	// The last try fails: MaxAttempts ends it.
	other := first.ID
	if other == probe.ID {
		other = second.ID
	}
	exec(t, b.pool, `UPDATE webhook_deliveries SET attempts = 2 WHERE id = $1`, other)
	claimed, err = s.ClaimWebhookDeliveries(t.Context(), 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 3, claimed[0].Attempt)
	require.NoError(t, s.RecordWebhookDelivery(t.Context(), store.DeliveryOutcome{DeliveryID: other, Attempt: 3, Error: "HTTP 500"}, policy))
	require.Equal(t, 1, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'failed' AND id = $1`, other))
	_, ok, err = s.NextWebhookDeliveryIn(t.Context())
	require.NoError(t, err)
	require.False(t, ok, "nothing pending")

	// Past the retention, ended deliveries go with their events; a
	// pending one keeps its event.
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	exec(t, b.pool, `UPDATE webhook_events SET created_at = now() - interval '40 days'`)
	pruned, err := s.PruneWebhookEvents(t.Context(), 30*24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 2, pruned)
	require.Equal(t, 1, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`))
	require.Equal(t, 1, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_events`))

	// Other organizations see none of it.
	stranger := createOrg(t, s, "stranger")
	_, _, err = s.ListWebhookDeliveries(t.Context(), store.OneOrganization(stranger.ID), hook.ID, nil, 10)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.DeleteWebhookTarget(t.Context(), store.OneOrganization(stranger.ID), hook.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestWebhookDeliveriesRecordedInABatch: one statement records a batch of
// tries; the breaker moves once per target and batch (failures add up, a
// delivery that got through closes it), and a healthy target's row is not
// written by a batch of successes.
func TestWebhookDeliveriesRecordedInABatch(t *testing.T) {
	s, b := setupStore(t)
	hook := createHook(t, s, b.org.ID, store.EventTaskCompleted)
	for range 5 {
		createTask(t, s, b.org.ID, store.CreateTaskParams{})
		complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	}
	policy := store.DeliveryPolicy{MaxAttempts: 5, RetryBase: time.Hour, RetryMax: time.Hour, BreakerThreshold: 3, BreakerCooldown: time.Hour}
	targetVersion := func() string {
		var xmin string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT xmin::text FROM webhook_targets WHERE id = $1`, hook.ID).Scan(&xmin))
		return xmin
	}
	claim := func(n int) []store.ClaimedDelivery {
		claimed, err := s.ClaimWebhookDeliveries(t.Context(), n, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, n)
		return claimed
	}
	outcome := func(c store.ClaimedDelivery, delivered bool) store.DeliveryOutcome {
		o := store.DeliveryOutcome{DeliveryID: c.ID, Attempt: c.Attempt, Delivered: delivered}
		if !delivered {
			o.Error = "HTTP 502"
		}
		return o
	}

	// Two failures in one batch: both count.
	failed := claim(2)
	require.NoError(t, s.RecordWebhookDeliveries(t.Context(), []store.DeliveryOutcome{outcome(failed[0], false), outcome(failed[1], false)}, policy))
	got, err := s.GetWebhookTarget(t.Context(), store.EveryOrganization(), hook.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got.ConsecutiveFailures)
	require.Nil(t, got.CircuitOpenUntil)

	// A batch with a failure and a success: the target answered, so the
	// circuit stays closed and the count starts again.
	mixed := claim(2)
	require.NoError(t, s.RecordWebhookDeliveries(t.Context(), []store.DeliveryOutcome{outcome(mixed[0], false), outcome(mixed[1], true)}, policy))
	got, err = s.GetWebhookTarget(t.Context(), store.EveryOrganization(), hook.ID)
	require.NoError(t, err)
	require.Zero(t, got.ConsecutiveFailures)
	require.Nil(t, got.CircuitOpenUntil)
	require.Equal(t, 1, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`))

	// Successes to a healthy target leave its row alone.
	before := targetVersion()
	require.NoError(t, s.RecordWebhookDeliveries(t.Context(), []store.DeliveryOutcome{outcome(claim(1)[0], true)}, policy))
	require.Equal(t, before, targetVersion(), "a healthy target is not rewritten")
	require.Equal(t, 2, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`))
	require.Equal(t, 3, countHookRows(t, b.pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`))
}
