-- 1. Wake-ups for queued slots.
--
-- A schedule holding a queued slot (overlap queue_one) fires it when its
-- previous run ends. The run's end is a state change of a task or a scan
-- that many code paths make (a completion, a batch of completions, the
-- expiry sweep, a cancel, advance_scan); these triggers send the schedule
-- timer its wake-up ("s:<organization>", store.WakeSchedules) from every one
-- of them, so no timer has to look again now and then.
--
-- The WHEN clause keeps the cost off the hot path: only a row that a
-- schedule created and that just reached a final state runs the function,
-- and the function notifies only when that run is the one a queued slot
-- waits for.

BEGIN;

CREATE FUNCTION wake_schedule_of_ended_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM schedules s
               WHERE s.id = NEW.trigger_schedule_id AND s.queued_slot_at IS NOT NULL AND s.enabled
                   AND (s.last_task_id = NEW.id OR s.last_scan_id = NEW.id)) THEN
        -- The channel and payload format are store.NotifyChannel and
        -- store.Wakeup.
        PERFORM pg_notify('worker_gateway_wakeup', 's:' || NEW.organization_id::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER worker_tasks_wake_schedule
    AFTER UPDATE OF state ON worker_tasks
    FOR EACH ROW
    WHEN (NEW.trigger_schedule_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
        AND NEW.state IN ('completed', 'failed_terminal', 'cancelled'))
    EXECUTE FUNCTION wake_schedule_of_ended_run();

CREATE TRIGGER scans_wake_schedule
    AFTER UPDATE OF state ON scans
    FOR EACH ROW
    WHEN (NEW.trigger_schedule_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
        AND NEW.state IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION wake_schedule_of_ended_run();

-- 2. advance_scan finds a scan's tasks through their scan.
--
-- advance_scan looked for a job's task by joining scan_jobs to worker_tasks
-- on scan_job_id, whose only index is partial (task_type =
-- 'scanner_plugin') and which the query did not name: every scan it created
-- or advanced read the whole task table, 4 ms per scan with a few thousand
-- tasks and growing with the table (measured with `go run ./scripts/bench
-- -scenario schedules`). Even naming the type, a plan made while the table
-- was small walked that whole index as a join filter. A scan's tasks are
-- now found by their scan_id (worker_tasks_scan_idx) with the function's
-- parameter, a lookup no plan can turn into a walk of the table.
-- Otherwise unchanged.
CREATE OR REPLACE FUNCTION advance_scan(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s    scans%ROWTYPE;
    j    scan_jobs%ROWTYPE;
BEGIN
    SELECT * INTO s FROM scans WHERE id = p_scan FOR UPDATE;
    IF NOT FOUND OR s.state IN ('completed', 'failed', 'cancelled') THEN
        RETURN;
    END IF;
    -- A job still in flight: nothing to do until it ends.
    IF EXISTS (SELECT 1 FROM worker_tasks t
               WHERE t.scan_id = p_scan AND t.scan_job_id IS NOT NULL
                   AND t.state NOT IN ('completed', 'failed_terminal', 'cancelled')) THEN
        RETURN;
    END IF;
    SELECT sj.* INTO j FROM scan_jobs sj
    WHERE sj.scan_id = p_scan AND sj.state = 'pending'
        AND NOT EXISTS (SELECT 1 FROM worker_tasks t WHERE t.scan_id = p_scan AND t.scan_job_id = sj.id)
    ORDER BY sj.position LIMIT 1;
    IF FOUND THEN
        WITH created AS (
            INSERT INTO worker_tasks (task_type, organization_id, scan_id, scan_job_id, required_capabilities,
                payload, priority, attempt_timeout_seconds, trigger_kind, trigger_schedule_id,
                trigger_schedule_version, trigger_slot_at, trigger_token_id)
            VALUES ('scanner_plugin', s.organization_id, s.id, j.id, j.required_capabilities,
                jsonb_build_object(
                    'plugin', j.plugin_name,
                    'input', j.input,
                    'targets', s.targets,
                    'assets', (SELECT coalesce(jsonb_agg(jsonb_build_object('type', a.type, 'value', a.value, 'details', a.details)
                                    ORDER BY a.type, a.normalized_value), '[]'::jsonb)
                               FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id WHERE sa.scan_id = s.id)),
                s.priority, j.timeout_seconds, s.trigger_kind, s.trigger_schedule_id,
                s.trigger_schedule_version, s.trigger_slot_at, s.trigger_token_id)
            RETURNING *
        )
        INSERT INTO worker_task_queue (task_id, organization_id, lease_class, task_type, required_capabilities,
                priority, created_at, available_at, execution_deadline_at)
            SELECT id, organization_id, lease_class, task_type, required_capabilities,
                priority, created_at, available_at, execution_deadline_at
            FROM created;
        -- The channel and payload format are store.NotifyChannel and
        -- store.Wakeup ("o:<organization>:<count>").
        PERFORM pg_notify('worker_gateway_wakeup', 'o:' || s.organization_id::text || ':1');
        RETURN;
    END IF;
    UPDATE scans SET
        state = CASE WHEN EXISTS (SELECT 1 FROM scan_jobs WHERE scan_id = p_scan AND state <> 'failed')
                     THEN 'completed' ELSE 'failed' END,
        completed_at = now(), updated_at = now()
    WHERE id = p_scan;
END;
$$;


COMMIT;
