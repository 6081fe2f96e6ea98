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

COMMIT;
