-- advance_scan creates the scan's next job's task when no job is in flight,
-- or ends the scan when every job has ended (store/scantransitions.go has
-- the rules). It runs in the transaction that ended the previous job's task
-- (through mirror_task_state_to_scan_job) or that created the scan, so a
-- scan can never stall between jobs nor run two jobs at once: the scan row
-- is locked while deciding. A job's task gets the scan's free targets, its
-- asset targets' values, and the assets the scan found so far; a scan that
-- completes records its history (record_scan_history).
CREATE OR REPLACE FUNCTION advance_scan(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s    scans%ROWTYPE;
    j    scan_jobs%ROWTYPE;
    task uuid;
    done text;
BEGIN
    SELECT * INTO s FROM scans WHERE id = p_scan FOR UPDATE;
    IF NOT FOUND OR scan_state_is_final(s.state) THEN
        RETURN;
    END IF;
    -- A job still in flight: nothing to do until it ends. A scan's tasks
    -- are found by their scan_id (worker_tasks_scan_idx), with the
    -- parameter: a lookup no plan can turn into a walk of the table.
    IF EXISTS (SELECT 1 FROM worker_tasks t
               WHERE t.scan_id = p_scan AND t.scan_job_id IS NOT NULL AND NOT task_state_is_final(t.state)) THEN
        RETURN;
    END IF;
    SELECT sj.* INTO j FROM scan_jobs sj
    WHERE sj.scan_id = p_scan AND sj.state = scan_job_state_pending()
        AND NOT EXISTS (SELECT 1 FROM worker_tasks t WHERE t.scan_id = p_scan AND t.scan_job_id = sj.id)
    ORDER BY sj.position LIMIT 1;
    IF FOUND THEN
        INSERT INTO worker_tasks (task_type, organization_id, scan_id, scan_job_id, required_capabilities,
            payload, priority, attempt_timeout_seconds, trigger_kind, trigger_schedule_id,
            trigger_schedule_version, trigger_slot_at, trigger_token_id)
        VALUES ('scanner_plugin', s.organization_id, s.id, j.id, j.required_capabilities,
            jsonb_build_object(
                'plugin', j.plugin_name,
                'input', j.input,
                'targets', s.targets || (SELECT coalesce(jsonb_agg(a.value ORDER BY t.ord), '[]'::jsonb)
                    FROM jsonb_array_elements_text(s.asset_targets) WITH ORDINALITY AS t(id, ord)
                    JOIN assets a ON a.id = t.id::uuid AND a.organization_id = s.organization_id),
                'assets', (SELECT coalesce(jsonb_agg(jsonb_build_object('type', a.type, 'value', a.value, 'details', a.details)
                                ORDER BY a.type, a.normalized_value), '[]'::jsonb)
                           FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id WHERE sa.scan_id = s.id)),
            s.priority, j.timeout_seconds, s.trigger_kind, s.trigger_schedule_id,
            s.trigger_schedule_version, s.trigger_slot_at, s.trigger_token_id)
        RETURNING id INTO task;
        PERFORM gateway_enqueue_task(task);
        PERFORM gateway_wake_organization(s.organization_id, 1);
        RETURN;
    END IF;
    UPDATE scans SET
        state = CASE WHEN EXISTS (SELECT 1 FROM scan_jobs WHERE scan_id = p_scan AND state <> scan_job_state_failed())
                     THEN scan_state_completed() ELSE scan_state_failed() END,
        completed_at = now(), updated_at = now()
    WHERE id = p_scan
    RETURNING state INTO done;
    IF done = scan_state_completed() THEN
        PERFORM record_scan_history(p_scan);
    END IF;
END;
$$;
