-- Scanner history: per-organization scope, asset observation history and
-- the exposure-change timeline, threat exclusions, vulnerability details,
-- the asset graph, and scan job summaries (issue 18).

BEGIN;

-- 1. Scope: what an organization may scan.
--
-- Enforcement starts with the organization's first scope entry and never
-- stops by itself: removing every entry afterwards refuses every scan
-- instead of allowing any. An organization that never had one scans freely,
-- as before this migration (scope_enforced false).
ALTER TABLE organizations ADD COLUMN scope_enforced boolean NOT NULL DEFAULT false;

CREATE TABLE scope_targets (
    id                 uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    organization_id    uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    kind               text NOT NULL CHECK (kind IN ('domain', 'cidr', 'ip', 'url_prefix')),
    -- The canonical form (store.ParseScopeTarget).
    value              text NOT NULL CHECK (value <> ''),
    include_subdomains boolean NOT NULL DEFAULT false,
    note               text NOT NULL DEFAULT '',
    created_by_token_id uuid NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organization_id, kind, value, include_subdomains)
);

-- The assets a scan names as targets (ids), and the key that says which
-- earlier scans it is compared with: the same targets, asset targets and
-- plugins (store.scanScopeKey). history_recorded_at is when its snapshot was
-- last taken; only a scan with one can be an earlier scan to compare with.
ALTER TABLE scans
    ADD COLUMN asset_targets       jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN scope_key           text NOT NULL DEFAULT '',
    ADD COLUMN history_recorded_at timestamptz NULL;
CREATE INDEX scans_history_idx ON scans (organization_id, scope_key, created_at DESC, id DESC)
    WHERE history_recorded_at IS NOT NULL;

-- 2. Asset history.
--
-- What each scan observed of each asset, merged over its batches: the
-- assets table keeps only the latest merge of everything.
ALTER TABLE scan_assets ADD COLUMN details jsonb NOT NULL DEFAULT '{}'::jsonb;

CREATE TABLE asset_scan_snapshots (
    scan_id         uuid NOT NULL REFERENCES scans(id) ON DELETE CASCADE,
    asset_id        uuid NOT NULL REFERENCES assets(id) ON DELETE CASCADE,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    asset_type      text NOT NULL,
    asset_value     text NOT NULL,
    details         jsonb NOT NULL DEFAULT '{}'::jsonb,
    observed_at     timestamptz NOT NULL,
    PRIMARY KEY (scan_id, asset_id)
);

CREATE TABLE asset_scan_changes (
    id               uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    organization_id  uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    scan_id          uuid NOT NULL REFERENCES scans(id) ON DELETE CASCADE,
    previous_scan_id uuid NULL REFERENCES scans(id) ON DELETE SET NULL,
    asset_id         uuid NULL REFERENCES assets(id) ON DELETE SET NULL,
    asset_type       text NOT NULL,
    asset_value      text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('asset_appeared', 'asset_disappeared', 'port_opened', 'port_closed',
                                                   'certificate_changed', 'http_status_changed')),
    before           jsonb NULL,
    after            jsonb NULL,
    detected_at      timestamptz NOT NULL DEFAULT now(),
    -- A scan records one change of a kind per asset, however often its
    -- completion runs.
    UNIQUE (scan_id, asset_id, kind)
);
CREATE INDEX asset_scan_changes_org_idx ON asset_scan_changes (organization_id, detected_at DESC, id DESC);
CREATE INDEX asset_scan_changes_scan_idx ON asset_scan_changes (scan_id, detected_at DESC, id DESC);

-- The organization's exposure-change timeline is every scan's changes.
CREATE VIEW exposure_changes AS
    SELECT id, organization_id, scan_id, previous_scan_id, asset_id, asset_type, asset_value, kind, before, after, detected_at
    FROM asset_scan_changes;

-- record_scan_history snapshots what a completed scan observed and
-- compares it with the latest earlier completed scan of the same scope key:
-- assets (ports) that appeared or disappeared, and assets seen by both whose
-- HTTP status or certificate differs. It runs in the transaction that
-- completes the scan; a scan completed again (a job redriven) is
-- re-snapshotted and its changes recomputed, keeping those that still hold.
CREATE FUNCTION record_scan_history(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s    scans%ROWTYPE;
    prev uuid;
BEGIN
    SELECT * INTO s FROM scans WHERE id = p_scan;
    INSERT INTO asset_scan_snapshots (scan_id, asset_id, organization_id, asset_type, asset_value, details, observed_at)
        SELECT sa.scan_id, a.id, a.organization_id, a.type, a.value, sa.details, sa.found_at
        FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id
        WHERE sa.scan_id = p_scan
    ON CONFLICT (scan_id, asset_id) DO UPDATE SET details = EXCLUDED.details;
    UPDATE scans SET history_recorded_at = now() WHERE id = p_scan;
    IF s.scope_key = '' THEN
        RETURN; -- created before scope keys: compared with nothing
    END IF;

    SELECT p.id INTO prev FROM scans p
    WHERE p.organization_id = s.organization_id AND p.scope_key = s.scope_key
        AND p.history_recorded_at IS NOT NULL AND p.state = 'completed'
        AND (p.created_at, p.id) < (s.created_at, s.id)
    ORDER BY p.created_at DESC, p.id DESC LIMIT 1;
    IF prev IS NULL THEN
        RETURN; -- the first scan of its scope is the baseline
    END IF;

    WITH cur AS (
        SELECT asset_id, asset_type, asset_value, details FROM asset_scan_snapshots WHERE scan_id = p_scan
    ), old AS (
        SELECT asset_id, asset_type, asset_value, details FROM asset_scan_snapshots WHERE scan_id = prev
    ), computed AS (
        SELECT coalesce(c.asset_id, o.asset_id) AS asset_id,
               coalesce(c.asset_type, o.asset_type) AS asset_type,
               coalesce(c.asset_value, o.asset_value) AS asset_value,
               CASE WHEN o.asset_id IS NULL THEN CASE WHEN c.asset_type = 'port' THEN 'port_opened' ELSE 'asset_appeared' END
                    ELSE CASE WHEN o.asset_type = 'port' THEN 'port_closed' ELSE 'asset_disappeared' END
               END AS kind,
               o.details AS before, c.details AS after
        FROM cur c FULL JOIN old o ON o.asset_id = c.asset_id
        WHERE c.asset_id IS NULL OR o.asset_id IS NULL
        UNION ALL
        SELECT c.asset_id, c.asset_type, c.asset_value, 'http_status_changed',
               jsonb_build_object('status', o.details->'status'), jsonb_build_object('status', c.details->'status')
        FROM cur c JOIN old o ON o.asset_id = c.asset_id
        WHERE c.details ? 'status' AND o.details ? 'status' AND c.details->'status' <> o.details->'status'
        UNION ALL
        SELECT c.asset_id, c.asset_type, c.asset_value, 'certificate_changed',
               jsonb_build_object('certificate', o.details->'certificate'), jsonb_build_object('certificate', c.details->'certificate')
        FROM cur c JOIN old o ON o.asset_id = c.asset_id
        WHERE c.details ? 'certificate' AND o.details ? 'certificate' AND c.details->'certificate' <> o.details->'certificate'
    ), stale AS (
        DELETE FROM asset_scan_changes x
        WHERE x.scan_id = p_scan AND NOT EXISTS (SELECT 1 FROM computed k WHERE k.asset_id = x.asset_id AND k.kind = x.kind)
    )
    INSERT INTO asset_scan_changes (organization_id, scan_id, previous_scan_id, asset_id, asset_type, asset_value, kind, before, after)
        SELECT s.organization_id, p_scan, prev, k.asset_id, k.asset_type, k.asset_value, k.kind, k.before, k.after
        FROM computed k ORDER BY k.asset_type, k.asset_value, k.kind
    ON CONFLICT (scan_id, asset_id, kind) DO NOTHING;
END;
$$;

-- advance_scan (000016) now gives jobs the scan's asset targets with its
-- free targets, and records the scan's history when it completes.
CREATE OR REPLACE FUNCTION advance_scan(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s    scans%ROWTYPE;
    j    scan_jobs%ROWTYPE;
    done text;
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
                    'targets', s.targets || (SELECT coalesce(jsonb_agg(a.value ORDER BY t.ord), '[]'::jsonb)
                        FROM jsonb_array_elements_text(s.asset_targets) WITH ORDINALITY AS t(id, ord)
                        JOIN assets a ON a.id = t.id::uuid AND a.organization_id = s.organization_id),
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
    WHERE id = p_scan
    RETURNING state INTO done;
    IF done = 'completed' THEN
        PERFORM record_scan_history(p_scan);
    END IF;
END;
$$;

-- 3. Threats.
--
-- An exclusion hides the threats it matches: every criterion it names must
-- match (asset, a glob over the asset's normalized value, external id, a
-- glob over the title, severity). Globs: * any run, ? one character,
-- case-insensitive.
CREATE TABLE threat_exclusions (
    id                  uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    organization_id     uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    asset_id            uuid NULL REFERENCES assets(id) ON DELETE CASCADE,
    asset_pattern       text NULL CHECK (asset_pattern <> ''),
    external_id         text NULL CHECK (external_id <> ''),
    title_pattern       text NULL CHECK (title_pattern <> ''),
    severity            text NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    reason              text NOT NULL CHECK (reason <> ''),
    expires_at          timestamptz NULL,
    created_by_token_id uuid NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT threat_exclusions_criteria CHECK (num_nonnulls(asset_id, asset_pattern, external_id, title_pattern, severity) > 0)
);
CREATE INDEX threat_exclusions_org_idx ON threat_exclusions (organization_id, created_at DESC, id DESC);

-- gateway_glob_like turns a glob into a LIKE pattern.
CREATE FUNCTION gateway_glob_like(p text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT replace(replace(replace(replace(replace(p, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%'), '?', '_')
$$;

-- threat_exclusion_for is the oldest active exclusion matching a threat.
CREATE FUNCTION threat_exclusion_for(p_org uuid, p_asset uuid, p_asset_value text, p_external_id text, p_title text, p_severity text)
RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT e.id FROM threat_exclusions e
    WHERE e.organization_id = p_org AND (e.expires_at IS NULL OR e.expires_at > now())
        AND (e.asset_id IS NULL OR e.asset_id = p_asset)
        AND (e.asset_pattern IS NULL OR p_asset_value ILIKE gateway_glob_like(e.asset_pattern))
        AND (e.external_id IS NULL OR e.external_id = p_external_id)
        AND (e.title_pattern IS NULL OR p_title ILIKE gateway_glob_like(e.title_pattern))
        AND (e.severity IS NULL OR e.severity = p_severity)
    ORDER BY e.created_at, e.id LIMIT 1
$$;

-- A detection records the exclusion that matched it when it was made; it
-- stays flagged after the exclusion is deleted.
ALTER TABLE threat_detections
    ADD COLUMN excluded     boolean NOT NULL DEFAULT false,
    ADD COLUMN exclusion_id uuid NULL REFERENCES threat_exclusions(id) ON DELETE SET NULL;

CREATE TABLE vulnerability_details (
    threat_id      uuid PRIMARY KEY REFERENCES threats(id) ON DELETE CASCADE,
    cve_ids        text[] NOT NULL DEFAULT '{}',
    cvss_vector    text NOT NULL DEFAULT '',
    cvss_score     numeric(3, 1) NULL CHECK (cvss_score >= 0 AND cvss_score <= 10),
    cwe_ids        text[] NOT NULL DEFAULT '{}',
    reference_urls text[] NOT NULL DEFAULT '{}',
    remediation    text NOT NULL DEFAULT '',
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The asset graph: hostname resolves_to ip, ip (or hostname) has_port port,
-- url served_by port, certificate covers hostname.
CREATE TABLE asset_edges (
    id              uuid NOT NULL DEFAULT gateway_uuid_v7() UNIQUE,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    from_asset_id   uuid NOT NULL REFERENCES assets(id) ON DELETE CASCADE,
    relation        text NOT NULL CHECK (relation IN ('resolves_to', 'has_port', 'served_by', 'covers')),
    to_asset_id     uuid NOT NULL REFERENCES assets(id) ON DELETE CASCADE,
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_asset_id, relation, to_asset_id)
);
CREATE INDEX asset_edges_to_idx ON asset_edges (to_asset_id);
CREATE INDEX asset_edges_org_idx ON asset_edges (organization_id, first_seen_at DESC, id DESC);

-- 4. Scan job summaries.
--
-- Each batch keeps how many records of each kind it held (and how many were
-- out of scope), so a job's summary is a sum over its batches' counts.
ALTER TABLE worker_result_batches ADD COLUMN record_kinds jsonb NULL;

-- scan_job_output is a job's summary: records by kind over its task's
-- persisted batches (of every attempt), and the artifacts its attempts
-- committed.
CREATE FUNCTION scan_job_output(p_task uuid) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'records', (SELECT coalesce(jsonb_object_agg(k.key, k.n), '{}'::jsonb) FROM (
            SELECT e.key, sum(e.value::bigint) AS n
            FROM worker_result_batches b CROSS JOIN LATERAL jsonb_each_text(b.record_kinds) e
            WHERE b.task_id = p_task AND b.status = 'persisted' AND b.record_kinds IS NOT NULL
            GROUP BY e.key) k),
        'artifact_ids', (SELECT coalesce(jsonb_agg(u.file_id ORDER BY u.committed_at, u.file_id), '[]'::jsonb)
            FROM worker_artifact_uploads u WHERE u.task_id = p_task AND u.file_id IS NOT NULL))
$$;

-- The mirror trigger (000002) also writes the job's summary when its task
-- ends.
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
        output = CASE WHEN NEW.state IN ('completed', 'failed_terminal', 'cancelled') THEN scan_job_output(NEW.id) ELSE output END,
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
