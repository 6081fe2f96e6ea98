package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// scanSchedule is a minutely schedule creating a scan of two plugins.
func scanSchedule(t0 time.Time, timeout *int) store.ScheduleParams {
	p := minutely(t0, store.OverlapAllow, store.CatchUpOnce)
	p.Definition = store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
		Targets: []string{"example.test", "10.0.0.1"}, Priority: 7,
		Plugins: []store.ScheduledPlugin{
			{Name: "dns", Input: json.RawMessage(`{"depth":2}`), TimeoutSeconds: timeout,
				RequiredCapabilities: json.RawMessage(`{"net":"outbound"}`)},
			{Name: "http"},
		}}}
	return p
}

// TestScheduledScansMatchCreatedScans: the fast path writes a claim's scans
// and jobs with statements of its own; what it writes must be what
// CreateScan writes for the same definition, job by job and task by task.
func TestScheduledScansMatchCreatedScans(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	timeout := 30
	p := scanSchedule(t0, &timeout)
	createSchedule(t, s, b.org.ID, p)
	createSchedule(t, s, b.org.ID, scanSchedule(t0, &timeout)) // two in one claim: the batch
	fires := fireAt(t, s, t0)
	require.Len(t, fires, 2)

	plugins := make([]store.ScanPlugin, len(p.Definition.Scan.Plugins))
	for i, pl := range p.Definition.Scan.Plugins {
		plugins[i] = store.ScanPlugin(pl)
	}
	made, _, err := s.CreateScan(t.Context(), store.EveryOrganization(), store.CreateScanParams{
		OrganizationID: b.org.ID, Targets: p.Definition.Scan.Targets, Plugins: plugins, Priority: p.Definition.Scan.Priority})
	require.NoError(t, err)

	// Everything but ids, times and the trigger.
	shape := func(scan uuid.UUID) string {
		var out string
		require.NoError(t, b.pool.QueryRow(t.Context(), `
			SELECT jsonb_build_object(
				'scan', (SELECT jsonb_build_object('org', organization_id, 'state', state, 'targets', targets,
					'priority', priority, 'sha', request_sha256, 'key', idempotency_key) FROM scans WHERE id = $1),
				'jobs', (SELECT jsonb_agg(jsonb_build_object('org', organization_id, 'position', position,
					'plugin', plugin_name, 'state', state, 'input', input, 'timeout', timeout_seconds,
					'caps', required_capabilities) ORDER BY position) FROM scan_jobs WHERE scan_id = $1),
				'tasks', (SELECT jsonb_agg(jsonb_build_object('org', t.organization_id, 'type', t.task_type,
					'state', t.state, 'payload', t.payload, 'caps', t.required_capabilities, 'priority', t.priority,
					'timeout', t.attempt_timeout_seconds, 'queued', q.task_id IS NOT NULL, 'job', j.position))
					FROM worker_tasks t JOIN scan_jobs j ON j.id = t.scan_job_id
					LEFT JOIN worker_task_queue q ON q.task_id = t.id WHERE t.scan_id = $1))::text`, scan).Scan(&out))
		return out
	}
	want := shape(made.ID)
	require.Contains(t, want, `"queued": true`, "the created scan's first task is queued")
	for _, f := range fires {
		require.NotNil(t, f.ScanID)
		require.NotEqual(t, uuid.Nil, f.ID)
		require.JSONEq(t, want, shape(*f.ScanID))
	}
}

// TestScheduledScanSlotKeyIsIdempotent: a scan slot already recorded sends
// the claim one slot at a time, which creates the other schedules' scans
// once and none for the recorded slot.
func TestScheduledScanSlotKeyIsIdempotent(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	first := createSchedule(t, s, b.org.ID, scanSchedule(t0, nil))
	require.Len(t, fireAt(t, s, t0), 1)
	exec(t, b.pool, `UPDATE schedules SET next_slot_at = $2, next_fire_at = $2 WHERE id = $1`, first.ID, t0)
	second := createSchedule(t, s, b.org.ID, scanSchedule(t0, nil))
	fires := fireAt(t, s, t0)
	require.Len(t, fires, 1, "only the second schedule's slot fires")
	require.Equal(t, second.ID, fires[0].ScheduleID)
	for id, want := range map[uuid.UUID]int{first.ID: 1, second.ID: 1} {
		var scans, tasks int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*), (SELECT count(*) FROM worker_tasks WHERE trigger_schedule_id = $1)
			FROM scans WHERE trigger_schedule_id = $1`, id).Scan(&scans, &tasks))
		require.Equal(t, want, scans)
		require.Equal(t, want, tasks)
	}
}

// TestScheduledScanRefusedSkipsItsSlot: a scan the database refuses (a job
// timeout its check forbids) is recorded as skipped, and the scans claimed
// with it are created.
func TestScheduledScanRefusedSkipsItsSlot(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	bad := createSchedule(t, s, b.org.ID, scanSchedule(t0, nil))
	good := createSchedule(t, s, b.org.ID, scanSchedule(t0, nil))
	// A definition the checks of scan_jobs refuse (the API never stores one).
	exec(t, b.pool, `UPDATE schedule_versions SET definition = jsonb_set(definition, '{scan,plugins,0,timeout_seconds}', '0')
		WHERE schedule_id = $1`, bad.ID)
	require.Len(t, fireAt(t, s, t0), 2)
	require.Equal(t, []string{"0s skipped/error"}, summaries(t0, history(t, s, bad.ID)))
	require.Equal(t, []string{"0s created"}, summaries(t0, history(t, s, good.ID)))
	var scans int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM scans WHERE trigger_schedule_id = ANY($1)`,
		[]uuid.UUID{bad.ID, good.ID}).Scan(&scans))
	require.Equal(t, 1, scans)
}
