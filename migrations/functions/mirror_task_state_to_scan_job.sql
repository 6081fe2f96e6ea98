-- mirror_task_state_to_scan_job runs for every change of a scan task's
-- state (trigger worker_tasks_mirror_scan_job, migration 000001), whichever
-- path makes it — lease, start, completion, expiry sweep, cancel, revoke,
-- scope policy, redrive: the job takes its task's state (ScanJobStateOf in
-- store/scantransitions.go) and, when the task ended, its summary; the
-- scan starts when a job's task is taken, and advances (advance_scan) when
-- one ends.
CREATE OR REPLACE FUNCTION mirror_task_state_to_scan_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scan_jobs SET
        state = scan_job_state_of(NEW.state),
        error = NEW.last_error,
        output = CASE WHEN task_state_is_final(NEW.state) THEN scan_job_output(NEW.id) ELSE output END,
        started_at = CASE WHEN scan_started_by(NEW.state) THEN coalesce(started_at, now()) ELSE started_at END,
        completed_at = CASE WHEN task_state_is_final(NEW.state) THEN now() ELSE NULL END,
        updated_at = now()
    WHERE id = NEW.scan_job_id;
    IF NEW.scan_id IS NOT NULL THEN
        IF scan_started_by(NEW.state) THEN
            UPDATE scans SET state = scan_state_running(), updated_at = now()
            WHERE id = NEW.scan_id AND state = scan_state_pending();
        ELSIF task_state_is_final(NEW.state) THEN
            PERFORM advance_scan(NEW.scan_id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
