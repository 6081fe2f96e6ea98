-- Results that take effect exactly once, and scans run as lazy sequential
-- plugin jobs.

BEGIN;

-- The acknowledgement a result batch was answered with, byte for byte, so a
-- replay answers identically (jsonb would reorder it).
ALTER TABLE worker_result_batches ADD COLUMN ack text NULL;

ALTER TABLE scans
    ADD COLUMN priority        integer NOT NULL DEFAULT 0,
    ADD COLUMN idempotency_key text NULL,
    ADD COLUMN request_sha256  text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX scans_idempotency_unique ON scans (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX scans_created_idx ON scans (created_at DESC, id DESC);

ALTER TABLE scan_jobs
    ADD COLUMN timeout_seconds       integer NULL CHECK (timeout_seconds IS NULL OR timeout_seconds > 0),
    ADD COLUMN required_capabilities jsonb NOT NULL DEFAULT '{}'::jsonb;

-- The assets a scan has found so far; later jobs' payloads are enriched
-- with them (the RFC's runtime scope enrichment).
CREATE TABLE scan_assets (
    scan_id    uuid NOT NULL REFERENCES scans(id) ON DELETE CASCADE,
    asset_id   uuid NOT NULL REFERENCES assets(id) ON DELETE CASCADE,
    found_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scan_id, asset_id)
);

CREATE INDEX threats_org_created_idx ON threats (organization_id, created_at DESC, id DESC);
CREATE INDEX assets_org_first_seen_idx ON assets (organization_id, first_seen_at DESC, id DESC);

-- advance_scan creates the scan's next job's task when no job is in flight,
-- or finishes the scan when every job has ended. It runs in the transaction
-- that ended the previous job's task (through the trigger below) or that
-- created the scan, so a scan can never stall between jobs nor run two jobs
-- at once: the scan row is locked while deciding.
CREATE FUNCTION advance_scan(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
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
            s.priority, j.timeout_seconds);
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

-- The mirror trigger now also starts a scan when its first job starts and
-- advances it when a job's task ends.
CREATE OR REPLACE FUNCTION mirror_task_state_to_scan_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scan_jobs SET
        state = CASE NEW.state
            WHEN 'pending' THEN 'pending'
            WHEN 'retry_wait' THEN 'pending'
            WHEN 'leased' THEN 'running'
            WHEN 'running' THEN 'running'
            WHEN 'cancelling' THEN 'running'
            WHEN 'completed' THEN 'completed'
            WHEN 'failed_terminal' THEN 'failed'
            WHEN 'cancelled' THEN 'cancelled'
        END,
        error = NEW.last_error,
        started_at = CASE WHEN NEW.state IN ('leased', 'running') THEN coalesce(started_at, now()) ELSE started_at END,
        completed_at = CASE WHEN NEW.state IN ('completed', 'failed_terminal', 'cancelled') THEN now() ELSE NULL END,
        updated_at = now()
    WHERE id = NEW.scan_job_id;
    IF NEW.scan_id IS NOT NULL THEN
        IF NEW.state IN ('leased', 'running') THEN
            UPDATE scans SET state = 'running', updated_at = now() WHERE id = NEW.scan_id AND state = 'pending';
        ELSIF NEW.state IN ('completed', 'failed_terminal', 'cancelled') THEN
            PERFORM advance_scan(NEW.scan_id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

COMMIT;
