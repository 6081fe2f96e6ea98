-- Code generated from Go by store.SQLFromGo (store/sqlfromgo.go); DO NOT EDIT.
-- Regenerate: UPDATE_SQL_FROM_GO=1 go test ./store -run TestSQLFromGo

-- p_count tasks of p_org became leasable now (store.Wakeup)
CREATE OR REPLACE FUNCTION gateway_wake_organization(p_org uuid, p_count integer) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('worker_gateway_wakeup', 'o:' || p_org::text || ':' || p_count::text)
$$;

-- a schedule of p_org may fire (store.Wakeup)
CREATE OR REPLACE FUNCTION gateway_wake_schedules(p_org uuid) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('worker_gateway_wakeup', 's:' || p_org::text)
$$;

-- a webhook delivery of p_org was queued (store.Wakeup)
CREATE OR REPLACE FUNCTION gateway_wake_webhooks(p_org uuid) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_notify('worker_gateway_wakeup', 'h:' || p_org::text)
$$;

-- the queue row of task p_task, when it is leasable (store.EnqueueSQL)
CREATE OR REPLACE FUNCTION gateway_enqueue_task(p_task uuid) RETURNS void
LANGUAGE sql VOLATILE AS $$
    INSERT INTO worker_task_queue (task_id, organization_id, lease_class, task_type, required_capabilities, priority, created_at, available_at, execution_deadline_at, label_selector, pinned_worker_id)
		SELECT id, organization_id, lease_class, task_type, required_capabilities, priority, created_at, available_at, execution_deadline_at, label_selector, pinned_worker_id FROM (SELECT * FROM worker_tasks WHERE id = p_task) t WHERE state IN ('pending', 'retry_wait')
$$;

-- a task state is final (store.TaskState.IsFinal)
CREATE OR REPLACE FUNCTION task_state_is_final(p_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_state IN ('completed', 'cancelled', 'failed_terminal')
$$;

-- the state of a scan job whose task is in p_task_state (store.ScanJobStateOf)
CREATE OR REPLACE FUNCTION scan_job_state_of(p_task_state text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_task_state WHEN 'pending' THEN 'pending' WHEN 'leased' THEN 'running' WHEN 'running' THEN 'running' WHEN 'cancelling' THEN 'running' WHEN 'cancelled' THEN 'cancelled' WHEN 'completed' THEN 'completed' WHEN 'retry_wait' THEN 'pending' WHEN 'failed_terminal' THEN 'failed' END
$$;

-- a task in p_task_state starts its scan job and its scan (core.ScanStartedBy)
CREATE OR REPLACE FUNCTION scan_started_by(p_task_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_task_state IN ('leased', 'running')
$$;

-- a scan state is final (core.FinalScanStates)
CREATE OR REPLACE FUNCTION scan_state_is_final(p_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_state IN ('completed', 'failed', 'cancelled')
$$;

-- store.ScanState
CREATE OR REPLACE FUNCTION scan_state_pending() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'pending'
$$;

-- store.ScanState
CREATE OR REPLACE FUNCTION scan_state_running() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'running'
$$;

-- store.ScanState
CREATE OR REPLACE FUNCTION scan_state_completed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'completed'
$$;

-- store.ScanState
CREATE OR REPLACE FUNCTION scan_state_failed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'failed'
$$;

-- store.ScanState
CREATE OR REPLACE FUNCTION scan_state_cancelled() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'cancelled'
$$;

-- store.ScanJobState
CREATE OR REPLACE FUNCTION scan_job_state_pending() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'pending'
$$;

-- store.ScanJobState
CREATE OR REPLACE FUNCTION scan_job_state_running() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'running'
$$;

-- store.ScanJobState
CREATE OR REPLACE FUNCTION scan_job_state_completed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'completed'
$$;

-- store.ScanJobState
CREATE OR REPLACE FUNCTION scan_job_state_failed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'failed'
$$;

-- store.ScanJobState
CREATE OR REPLACE FUNCTION scan_job_state_cancelled() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'cancelled'
$$;

-- store.ChangeKinds
CREATE OR REPLACE FUNCTION scan_change_asset_appeared() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'asset_appeared'
$$;

-- store.ChangeKinds
CREATE OR REPLACE FUNCTION scan_change_asset_disappeared() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'asset_disappeared'
$$;

-- store.ChangeKinds
CREATE OR REPLACE FUNCTION scan_change_port_opened() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'port_opened'
$$;

-- store.ChangeKinds
CREATE OR REPLACE FUNCTION scan_change_port_closed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'port_closed'
$$;

-- store.ChangeKinds
CREATE OR REPLACE FUNCTION scan_change_certificate_changed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'certificate_changed'
$$;

-- store.ChangeKinds
CREATE OR REPLACE FUNCTION scan_change_http_status_changed() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'http_status_changed'
$$;
