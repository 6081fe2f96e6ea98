-- Worker Gateway schema, version 1.
--
-- The RFC's six worker tables (workers, organization_workers, worker_tasks,
-- worker_task_attempts, worker_result_batches, worker_artifact_uploads), small
-- but real versions of the platform tables they reference, and the sibling
-- control plane's enrollment tokens, API tokens and audit log.
--
-- Every time is timestamptz and every comparison that decides a lease uses the
-- database clock (now()), never an application clock.
--
-- The explicit transaction makes the migration all-or-nothing.

BEGIN;

-- Platform tables ---------------------------------------------------------

CREATE TABLE organizations (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email      text NOT NULL UNIQUE,
    name       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE scans (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    state           text NOT NULL DEFAULT 'pending',
    targets         jsonb NOT NULL DEFAULT '[]'::jsonb,
    plugins         jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_by      uuid NULL REFERENCES users(id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz NULL,
    CONSTRAINT scans_state_check CHECK (state IN ('pending', 'running', 'completed', 'failed', 'cancelled'))
);
CREATE INDEX scans_org_created_idx ON scans (organization_id, created_at DESC, id DESC);

CREATE TABLE scan_jobs (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scan_id         uuid NOT NULL REFERENCES scans(id) ON DELETE CASCADE,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    position        integer NOT NULL CHECK (position >= 0),
    plugin_name     text NOT NULL,
    input           jsonb NOT NULL DEFAULT '{}'::jsonb,
    output          jsonb NOT NULL DEFAULT '{}'::jsonb,
    state           text NOT NULL DEFAULT 'pending',
    error           text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz NULL,
    completed_at    timestamptz NULL,
    CONSTRAINT scan_jobs_state_check CHECK (state IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    UNIQUE (scan_id, position)
);

CREATE TABLE files (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            text NOT NULL,
    content_type    text NOT NULL DEFAULT 'application/octet-stream',
    size_bytes      bigint NOT NULL CHECK (size_bytes >= 0),
    sha256          text NOT NULL,
    object_key      text NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX files_org_idx ON files (organization_id, created_at DESC);

CREATE TABLE assets (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    type             text NOT NULL,
    value            text NOT NULL,
    normalized_value text NOT NULL,
    details          jsonb NOT NULL DEFAULT '{}'::jsonb,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organization_id, type, normalized_value)
);

CREATE TABLE threats (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    asset_id        uuid NOT NULL REFERENCES assets(id) ON DELETE CASCADE,
    external_id     text NOT NULL DEFAULT '',
    title           text NOT NULL,
    severity        text NOT NULL DEFAULT 'info',
    details         jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT threats_severity_check CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical'))
);
-- The RFC's natural key: threats deduplicate by external id when they have one.
CREATE UNIQUE INDEX threats_natural_key ON threats (organization_id, asset_id, external_id) WHERE external_id <> '';

CREATE TABLE threat_detections (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    threat_id   uuid NOT NULL REFERENCES threats(id) ON DELETE CASCADE,
    scan_job_id uuid NOT NULL REFERENCES scan_jobs(id) ON DELETE CASCADE,
    detected_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (threat_id, scan_job_id)
);

-- Control-plane identity (from the sibling control plane) -------------------

CREATE TABLE api_tokens (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL,
    -- SHA-256 of the token; the token itself is shown once and never stored.
    token_hash      bytea NOT NULL UNIQUE,
    scopes          text[] NOT NULL,
    organization_id uuid NULL REFERENCES organizations(id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NULL,
    revoked_at      timestamptz NULL,
    last_used_at    timestamptz NULL,
    CONSTRAINT api_tokens_scopes_check CHECK (scopes <@ ARRAY['admin', 'producer', 'reader']::text[] AND cardinality(scopes) > 0)
);

CREATE TABLE audit_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    actor_type      text NOT NULL,
    actor_id        text NOT NULL DEFAULT '',
    action          text NOT NULL,
    target_type     text NOT NULL DEFAULT '',
    target_id       text NOT NULL DEFAULT '',
    organization_id uuid NULL,
    request_id      text NOT NULL DEFAULT '',
    details         jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_events_occurred_idx ON audit_events (occurred_at DESC, id DESC);
CREATE INDEX audit_events_org_idx ON audit_events (organization_id, id DESC) WHERE organization_id IS NOT NULL;

-- Worker identity (RFC) ------------------------------------------------------

CREATE TABLE workers (
    id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                    text NOT NULL CHECK (name <> ''),
    worker_type             text NOT NULL,
    enabled                 boolean NOT NULL DEFAULT true,
    revoked_at              timestamptz NULL,
    revocation_reason       text NOT NULL DEFAULT '',
    certificate_subject     text NOT NULL DEFAULT '',
    certificate_fingerprint text NOT NULL DEFAULT '',
    software_version        text NOT NULL DEFAULT '',
    protocol_version        text NOT NULL DEFAULT '',
    capabilities            jsonb NOT NULL DEFAULT '{}'::jsonb,
    max_concurrent_tasks    integer NOT NULL DEFAULT 1,
    last_seen_at            timestamptz NULL,
    metadata                jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_by              uuid NULL REFERENCES users(id) ON DELETE SET NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workers_type_check CHECK (worker_type IN ('scanner', 'ai')),
    CONSTRAINT workers_capacity_positive CHECK (max_concurrent_tasks > 0),
    CONSTRAINT workers_capabilities_object CHECK (jsonb_typeof(capabilities) = 'object')
);
CREATE UNIQUE INDEX workers_certificate_fingerprint_unique ON workers (certificate_fingerprint) WHERE certificate_fingerprint <> '';
CREATE INDEX workers_enabled_type_idx ON workers (worker_type, enabled) WHERE revoked_at IS NULL;
CREATE INDEX workers_last_seen_idx ON workers (last_seen_at DESC);

CREATE TABLE enrollment_tokens (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    worker_id  uuid NOT NULL REFERENCES workers(id) ON DELETE CASCADE,
    token_hash bytea NOT NULL UNIQUE,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE organization_workers (
    organization_id   uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    worker_id         uuid NOT NULL REFERENCES workers(id) ON DELETE CASCADE,
    enabled           boolean NOT NULL DEFAULT true,
    assigned_by       uuid NULL REFERENCES users(id) ON DELETE SET NULL,
    assigned_at       timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    revoked_at        timestamptz NULL,
    revoked_by        uuid NULL REFERENCES users(id) ON DELETE SET NULL,
    revocation_reason text NOT NULL DEFAULT '',
    -- When this worker last leased a task of this organization: acquisition
    -- serves the least recently served organization first among equal
    -- priorities, so organizations take turns on a shared worker.
    last_leased_at    timestamptz NULL,
    PRIMARY KEY (organization_id, worker_id)
);
CREATE INDEX organization_workers_worker_enabled_idx ON organization_workers (worker_id, enabled, organization_id) WHERE revoked_at IS NULL;
CREATE INDEX organization_workers_org_enabled_idx ON organization_workers (organization_id, enabled, worker_id) WHERE revoked_at IS NULL;

-- Tasks, attempts, results, artifacts (RFC) ------------------------------------

CREATE TABLE worker_tasks (
    id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_type               text NOT NULL,
    organization_id         uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    scan_id                 uuid NULL REFERENCES scans(id) ON DELETE CASCADE,
    scan_job_id             uuid NULL REFERENCES scan_jobs(id) ON DELETE CASCADE,
    required_capabilities   jsonb NOT NULL DEFAULT '{}'::jsonb,
    payload                 jsonb NOT NULL DEFAULT '{}'::jsonb,
    state                   text NOT NULL DEFAULT 'pending',
    priority                integer NOT NULL DEFAULT 0,
    available_at            timestamptz NOT NULL DEFAULT now(),
    execution_deadline_at   timestamptz NULL,
    attempt_count           integer NOT NULL DEFAULT 0,
    max_attempts            integer NOT NULL DEFAULT 3,
    -- Number of attempts ever created (attempt_count leaves out attempts that
    -- were ended by policy, which do not use up max_attempts).
    attempts_started        integer NOT NULL DEFAULT 0,
    lease_duration_seconds  integer NOT NULL DEFAULT 30,
    attempt_timeout_seconds integer NULL,
    retry_base_seconds      double precision NOT NULL DEFAULT 1,
    retry_max_seconds       double precision NOT NULL DEFAULT 300,
    idempotency_key         text NULL,
    request_sha256          text NOT NULL DEFAULT '',
    cancel_requested_at     timestamptz NULL,
    completed_at            timestamptz NULL,
    last_error              text NOT NULL DEFAULT '',
    last_error_code         text NOT NULL DEFAULT '',
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT worker_tasks_state_check CHECK (
        state IN ('pending', 'leased', 'running', 'cancelling', 'cancelled', 'completed', 'retry_wait', 'failed_terminal')
    ),
    CONSTRAINT worker_tasks_type_check CHECK (task_type IN ('scanner_plugin', 'ai')),
    CONSTRAINT worker_tasks_attempts_nonnegative CHECK (attempt_count >= 0),
    CONSTRAINT worker_tasks_max_attempts_positive CHECK (max_attempts > 0),
    CONSTRAINT worker_tasks_lease_duration_positive CHECK (lease_duration_seconds > 0),
    CONSTRAINT worker_tasks_attempt_timeout_positive CHECK (attempt_timeout_seconds IS NULL OR attempt_timeout_seconds > 0),
    CONSTRAINT worker_tasks_retry_policy CHECK (retry_base_seconds >= 0 AND retry_max_seconds >= retry_base_seconds),
    CONSTRAINT worker_tasks_capabilities_object CHECK (jsonb_typeof(required_capabilities) = 'object')
);
CREATE UNIQUE INDEX worker_tasks_scan_job_unique ON worker_tasks (scan_job_id) WHERE scan_job_id IS NOT NULL AND task_type = 'scanner_plugin';
CREATE UNIQUE INDEX worker_tasks_idempotency_unique ON worker_tasks (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Acquisition walks one organization at a time (the worker's assignments), so
-- the cost of a lease never depends on other organizations' backlog.
CREATE INDEX worker_tasks_acquire_idx ON worker_tasks (organization_id, priority DESC, created_at, id)
    WHERE state IN ('pending', 'retry_wait');
-- Retry wake-ups and scheduled tasks: the earliest future available_at.
CREATE INDEX worker_tasks_available_idx ON worker_tasks (available_at) WHERE state IN ('pending', 'retry_wait');
CREATE INDEX worker_tasks_deadline_idx ON worker_tasks (execution_deadline_at)
    WHERE state IN ('pending', 'retry_wait') AND execution_deadline_at IS NOT NULL;
CREATE INDEX worker_tasks_org_state_idx ON worker_tasks (organization_id, state);
CREATE INDEX worker_tasks_org_created_idx ON worker_tasks (organization_id, created_at DESC, id DESC);
CREATE INDEX worker_tasks_created_idx ON worker_tasks (created_at DESC, id DESC);
CREATE INDEX worker_tasks_scan_idx ON worker_tasks (scan_id) WHERE scan_id IS NOT NULL;

CREATE TABLE worker_task_attempts (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id           uuid NOT NULL REFERENCES worker_tasks(id) ON DELETE CASCADE,
    worker_id         uuid NOT NULL REFERENCES workers(id) ON DELETE RESTRICT,
    organization_id   uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    attempt_number    integer NOT NULL,
    lease_token       text NOT NULL,
    status            text NOT NULL DEFAULT 'leased',
    lease_expires_at  timestamptz NOT NULL,
    -- Hard end of this attempt: the attempt timeout or the task's execution
    -- deadline, whichever is first. Renewals never move the lease past it.
    deadline_at       timestamptz NULL,
    -- Idempotency-Key of the poll that created this lease, so a repeated poll
    -- returns the same leases instead of stranding them.
    lease_request_key text NULL,
    started_at        timestamptz NOT NULL DEFAULT now(),
    running_at        timestamptz NULL,
    finished_at       timestamptz NULL,
    error_code        text NOT NULL DEFAULT '',
    error_message     text NOT NULL DEFAULT '',
    error_retryable   boolean NULL,
    -- The task state the attempt's completion produced, so a repeated
    -- completion returns the original answer.
    result_task_state text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT worker_task_attempts_status_check CHECK (
        status IN ('leased', 'running', 'succeeded', 'failed', 'cancelled', 'expired', 'superseded')
    ),
    UNIQUE (task_id, attempt_number),
    UNIQUE (lease_token)
);
-- At most one active attempt per task, enforced by the database itself.
CREATE UNIQUE INDEX worker_task_attempts_one_active ON worker_task_attempts (task_id) WHERE status IN ('leased', 'running');
CREATE INDEX worker_task_attempts_active_idx ON worker_task_attempts (lease_expires_at) WHERE status IN ('leased', 'running');
CREATE INDEX worker_task_attempts_deadline_idx ON worker_task_attempts (deadline_at) WHERE status IN ('leased', 'running') AND deadline_at IS NOT NULL;
CREATE INDEX worker_task_attempts_worker_active_idx ON worker_task_attempts (worker_id, status) WHERE status IN ('leased', 'running');
CREATE INDEX worker_task_attempts_lease_request_idx ON worker_task_attempts (worker_id, lease_request_key) WHERE lease_request_key IS NOT NULL;
CREATE INDEX worker_task_attempts_task_idx ON worker_task_attempts (task_id, attempt_number);

CREATE TABLE worker_result_batches (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id         uuid NOT NULL REFERENCES worker_tasks(id) ON DELETE CASCADE,
    attempt_id      uuid NOT NULL REFERENCES worker_task_attempts(id) ON DELETE CASCADE,
    sequence_number integer NOT NULL,
    idempotency_key text NOT NULL,
    payload_sha256  text NOT NULL,
    status          text NOT NULL DEFAULT 'accepted',
    record_count    integer NOT NULL DEFAULT 0,
    -- Records of generic (non-scanner) tasks, kept for producers to page through.
    payload         jsonb NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    persisted_at    timestamptz NULL,
    error           text NOT NULL DEFAULT '',
    UNIQUE (task_id, idempotency_key),
    UNIQUE (attempt_id, sequence_number),
    CONSTRAINT worker_result_batches_status_check CHECK (status IN ('accepted', 'persisted', 'duplicate', 'failed'))
);
CREATE INDEX worker_result_batches_task_idx ON worker_result_batches (task_id, sequence_number);

CREATE TABLE worker_artifact_uploads (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task_id         uuid NOT NULL REFERENCES worker_tasks(id) ON DELETE CASCADE,
    attempt_id      uuid NOT NULL REFERENCES worker_task_attempts(id) ON DELETE CASCADE,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    scan_id         uuid NULL REFERENCES scans(id) ON DELETE CASCADE,
    scan_job_id     uuid NULL REFERENCES scan_jobs(id) ON DELETE CASCADE,
    object_key      text NOT NULL UNIQUE,
    original_name   text NOT NULL,
    content_type    text NOT NULL DEFAULT 'application/octet-stream',
    size_bytes      bigint NULL,
    sha256          text NOT NULL DEFAULT '',
    status          text NOT NULL DEFAULT 'prepared',
    expires_at      timestamptz NOT NULL,
    committed_at    timestamptz NULL,
    file_id         uuid NULL REFERENCES files(id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT worker_artifact_uploads_status_check CHECK (status IN ('prepared', 'uploaded', 'committed', 'expired', 'failed'))
);
CREATE INDEX worker_artifact_uploads_task_idx ON worker_artifact_uploads (task_id);
CREATE INDEX worker_artifact_uploads_expiry_idx ON worker_artifact_uploads (expires_at) WHERE status IN ('prepared', 'uploaded');

-- scan_jobs mirror their task's state. A trigger keeps the mirror in one place
-- so no code path that changes a task's state can forget it; generic tasks
-- (no scan job) never fire it.
CREATE FUNCTION mirror_task_state_to_scan_job() RETURNS trigger LANGUAGE plpgsql AS $$
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
    RETURN NULL;
END;
$$;

CREATE TRIGGER worker_tasks_mirror_scan_job
    AFTER UPDATE OF state ON worker_tasks
    FOR EACH ROW
    WHEN (NEW.scan_job_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION mirror_task_state_to_scan_job();

COMMIT;
