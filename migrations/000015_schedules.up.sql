-- Schedules: per organization, a cron expression or a fixed interval that
-- creates a scan or a task. The definition is immutable and versioned; every
-- fire is recorded, keyed by (schedule, slot), in the transaction that
-- creates its run and advances the schedule (store/schedules.go, "Schedules"
-- in store/doc.go).

BEGIN;

CREATE TABLE schedules (
    id               uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name             text NOT NULL DEFAULT '',
    current_version  integer NOT NULL DEFAULT 1,
    enabled          boolean NOT NULL DEFAULT true,
    -- Exactly one of cron_expr and interval_seconds.
    cron_expr        text NULL,
    interval_seconds integer NULL CHECK (interval_seconds IS NULL OR interval_seconds > 0),
    -- Interval slots are anchor + k * interval.
    interval_anchor  timestamptz NOT NULL DEFAULT now(),
    time_zone        text NOT NULL DEFAULT 'UTC',
    jitter_seconds   integer NOT NULL DEFAULT 0 CHECK (jitter_seconds >= 0),
    start_at         timestamptz NULL,
    end_at           timestamptz NULL,
    overlap_policy   text NOT NULL DEFAULT 'skip' CHECK (overlap_policy IN ('skip', 'allow', 'queue_one')),
    catch_up_policy  text NOT NULL DEFAULT 'once' CHECK (catch_up_policy IN ('once', 'skip')),
    -- The next slot (nominal time) and when it fires (slot + jitter); NULL
    -- once the schedule has ended.
    next_slot_at     timestamptz NULL,
    next_fire_at     timestamptz NULL,
    last_slot_at     timestamptz NULL,
    -- A slot waiting for the previous run to end (overlap queue_one).
    queued_slot_at   timestamptz NULL,
    -- The latest run created, for the overlap policy. No foreign keys here
    -- or in schedule_fires: retention prunes tasks and scans in batches,
    -- and a pruned run simply reads as ended.
    last_task_id     uuid NULL,
    last_scan_id     uuid NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_one_timing CHECK ((cron_expr IS NULL) <> (interval_seconds IS NULL)),
    CONSTRAINT schedules_window CHECK (end_at IS NULL OR start_at IS NULL OR end_at > start_at)
);
-- The claim's walk: due schedules only.
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE enabled AND next_fire_at IS NOT NULL;
CREATE INDEX schedules_queued_idx ON schedules (id) WHERE enabled AND queued_slot_at IS NOT NULL;
CREATE INDEX schedules_org_created_idx ON schedules (organization_id, created_at DESC, id DESC);

-- Immutable: an edit inserts the next version.
CREATE TABLE schedule_versions (
    schedule_id  uuid NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    version      integer NOT NULL CHECK (version > 0),
    kind         text NOT NULL CHECK (kind IN ('scan', 'task')),
    definition   jsonb NOT NULL,
    -- The timing and policies this version was created with, for history.
    timing       jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_by_token_id uuid NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, version)
);

CREATE TABLE schedule_fires (
    id              uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    schedule_id     uuid NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    version         integer NOT NULL,
    slot_at         timestamptz NOT NULL,
    trigger_kind    text NOT NULL CHECK (trigger_kind IN ('schedule', 'manual')),
    token_id        uuid NULL,
    outcome         text NOT NULL CHECK (outcome IN ('created', 'skipped', 'queued')),
    skip_reason     text NOT NULL DEFAULT '',
    -- Slots this row stands for besides its own (catch-up after downtime).
    missed_slots    integer NOT NULL DEFAULT 0,
    task_id         uuid NULL,
    scan_id         uuid NULL,
    fired_at        timestamptz NOT NULL DEFAULT now()
);
-- The idempotency key of a scheduled fire: one row per (schedule, slot).
-- Manual runs are keyed by nothing but their own id.
CREATE UNIQUE INDEX schedule_fires_slot_unique ON schedule_fires (schedule_id, slot_at) WHERE trigger_kind = 'schedule';
CREATE INDEX schedule_fires_history_idx ON schedule_fires (schedule_id, slot_at DESC, id DESC);

-- What caused each task and scan. NULL on rows made before this migration.
-- No index on worker_tasks (see "Shape" in store/doc.go): history is read
-- from schedule_fires.
ALTER TABLE worker_tasks
    ADD COLUMN trigger_kind             text NULL CHECK (trigger_kind IN ('schedule', 'manual', 'api')),
    ADD COLUMN trigger_schedule_id      uuid NULL,
    ADD COLUMN trigger_schedule_version integer NULL,
    ADD COLUMN trigger_slot_at          timestamptz NULL,
    ADD COLUMN trigger_token_id         uuid NULL;
ALTER TABLE scans
    ADD COLUMN trigger_kind             text NULL CHECK (trigger_kind IN ('schedule', 'manual', 'api')),
    ADD COLUMN trigger_schedule_id      uuid NULL,
    ADD COLUMN trigger_schedule_version integer NULL,
    ADD COLUMN trigger_slot_at          timestamptz NULL,
    ADD COLUMN trigger_token_id         uuid NULL;

-- advance_scan (000012) creates a scan's job tasks; they now carry their
-- scan's trigger. Otherwise unchanged.
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
