-- The leasable tasks get a narrow table of their own, so a task's state
-- changes stop rewriting index entries.
--
-- Before: acquisition walked a partial index of worker_tasks on
-- "state IN ('pending', 'retry_wait')", and two more partial indexes and
-- an (organization_id, state) index named the state too. An UPDATE that
-- changes a column any index names (predicates included) cannot be HOT, so
-- every lease, start, completion and retry wrote a new entry into every
-- index of worker_tasks — six to eight per change, three changes per task.
--
-- After: worker_task_queue holds one row per leasable task (pending or
-- retry_wait), inserted by the statement that makes the task leasable and
-- deleted by the one that leases, cancels or dead-letters it (store/queue.go
-- says who, and the randomized test checks the rule after every step). The
-- acquisition walk, the retry timer and the deadline sweep read only this
-- table. No index of worker_tasks names a column a state change writes, so
-- those updates are HOT when the page has room: the fillfactor leaves it.
--
-- Existing leasable tasks are moved across, with the table locked against
-- writers so that none is missed; leased and running tasks and their
-- attempts do not change.

BEGIN;

LOCK TABLE worker_tasks IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE worker_task_queue (
    task_id               uuid PRIMARY KEY REFERENCES worker_tasks(id) ON DELETE CASCADE,
    organization_id       uuid NOT NULL,
    lease_class           text NOT NULL,
    task_type             text NOT NULL,
    required_capabilities jsonb NOT NULL,
    priority              integer NOT NULL,
    created_at            timestamptz NOT NULL,
    available_at          timestamptz NOT NULL,
    execution_deadline_at timestamptz NULL
);

INSERT INTO worker_task_queue (task_id, organization_id, lease_class, task_type, required_capabilities,
        priority, created_at, available_at, execution_deadline_at)
    SELECT id, organization_id, lease_class, task_type, required_capabilities,
        priority, created_at, available_at, execution_deadline_at
    FROM worker_tasks
    WHERE state IN ('pending', 'retry_wait');

-- The walk: one organization, one lease class, priority then age.
CREATE INDEX worker_task_queue_walk_idx ON worker_task_queue (organization_id, lease_class, priority DESC, created_at, task_id);
-- Retry wake-ups and scheduled tasks: the earliest future available_at.
CREATE INDEX worker_task_queue_available_idx ON worker_task_queue (available_at);
CREATE INDEX worker_task_queue_deadline_idx ON worker_task_queue (execution_deadline_at)
    WHERE execution_deadline_at IS NOT NULL;

-- Rows live seconds: vacuum it often, so the walk's index stays short.
ALTER TABLE worker_task_queue SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01
);

DROP INDEX worker_tasks_lease_class_idx;
DROP INDEX worker_tasks_available_idx;
DROP INDEX worker_tasks_deadline_idx;
-- Listing by state walks worker_tasks_org_created_idx and filters; the
-- metrics scrape counts by state over the whole table either way.
DROP INDEX worker_tasks_org_state_idx;

-- advance_scan (000002) creates a scan's next job's task; it now queues it
-- in the same statement, as the gateway's task creation does.
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
    IF EXISTS (SELECT 1 FROM scan_jobs sj JOIN worker_tasks t ON t.scan_job_id = sj.id
               WHERE sj.scan_id = p_scan AND t.state NOT IN ('completed', 'failed_terminal', 'cancelled')) THEN
        RETURN;
    END IF;
    SELECT sj.* INTO j FROM scan_jobs sj
    WHERE sj.scan_id = p_scan AND sj.state = 'pending'
        AND NOT EXISTS (SELECT 1 FROM worker_tasks t WHERE t.scan_job_id = sj.id)
    ORDER BY sj.position LIMIT 1;
    IF FOUND THEN
        WITH created AS (
            INSERT INTO worker_tasks (task_type, organization_id, scan_id, scan_job_id, required_capabilities,
                payload, priority, attempt_timeout_seconds)
            VALUES ('scanner_plugin', s.organization_id, s.id, j.id, j.required_capabilities,
                jsonb_build_object(
                    'plugin', j.plugin_name,
                    'input', j.input,
                    'targets', s.targets,
                    'assets', (SELECT coalesce(jsonb_agg(jsonb_build_object('type', a.type, 'value', a.value, 'details', a.details)
                                    ORDER BY a.type, a.normalized_value), '[]'::jsonb)
                               FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id WHERE sa.scan_id = s.id)),
                s.priority, j.timeout_seconds)
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

-- Room on each page for the new versions of a task's rows (lease, start,
-- completion), so they stay HOT. Applies to pages written from now on.
ALTER TABLE worker_tasks SET (fillfactor = 70);

COMMIT;
