-- wake_schedule_of_ended_run sends the schedule timer its wake-up when the
-- run a queued slot waits for ends (triggers worker_tasks_wake_schedule and
-- scans_wake_schedule, migration 000016, whose WHEN clauses keep it off the
-- hot path: only a run a schedule created that just reached a final state).
CREATE OR REPLACE FUNCTION wake_schedule_of_ended_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM schedules s
               WHERE s.id = NEW.trigger_schedule_id AND s.queued_slot_at IS NOT NULL AND s.enabled
                   AND (s.last_task_id = NEW.id OR s.last_scan_id = NEW.id)) THEN
        PERFORM gateway_wake_schedules(NEW.organization_id);
    END IF;
    RETURN NULL;
END;
$$;
