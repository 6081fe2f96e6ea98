-- Webhooks: per-organization targets, an outbox of events written in the
-- transaction of the change each describes, and one delivery row per
-- (event, target) that any replica may claim. See store/webhook_outbox.go.

BEGIN;

CREATE TABLE webhook_targets (
    id                         uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    organization_id            uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    url                        text NOT NULL,
    description                text NOT NULL DEFAULT '',
    event_types                text[] NOT NULL,
    enabled                    boolean NOT NULL DEFAULT true,
    -- The HMAC key (32 random bytes). It must be readable to sign; it is
    -- never logged and only answered once, at creation or rotation.
    secret                     bytea NOT NULL,
    -- The key before the last rotation, still signing until it expires.
    previous_secret            bytea NULL,
    previous_secret_expires_at timestamptz NULL,
    -- The circuit breaker, shared by every replica.
    consecutive_failures       integer NOT NULL DEFAULT 0,
    circuit_open_until         timestamptz NULL,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    -- A deleted target is kept (disabled, its secret wiped, its deliveries
    -- gone) so that deleting it again answers as the first time did.
    deleted_at                 timestamptz NULL,
    CHECK (deleted_at IS NULL OR NOT enabled)
);
CREATE INDEX webhook_targets_org_idx ON webhook_targets (organization_id, created_at DESC, id DESC);
-- The hot paths ask "does any enabled target listen?" per statement, with
-- sequential scans off (store.orderedScansSQL): this index answers that.
CREATE INDEX webhook_targets_enabled_idx ON webhook_targets (organization_id) WHERE enabled;

-- The outbox: the exact bytes every delivery of the event sends.
CREATE TABLE webhook_events (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    event_type      text NOT NULL,
    body            bytea NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_events_created_idx ON webhook_events (created_at);

CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    event_id         uuid NOT NULL REFERENCES webhook_events(id) ON DELETE CASCADE,
    target_id        uuid NOT NULL REFERENCES webhook_targets(id) ON DELETE CASCADE,
    organization_id  uuid NOT NULL,
    state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    -- When pending: the next try, or, while a replica holds it, the end of
    -- its claim (a replica killed mid-delivery leaves it due again then).
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_attempt_at  timestamptz NULL,
    last_status_code integer NULL,
    last_latency_ms  integer NULL,
    last_error       text NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz NULL,
    UNIQUE (event_id, target_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_target_idx ON webhook_deliveries (target_id, created_at DESC, id DESC);

-- A new delivery wakes the deliverers (store.WakeWebhooks). NOTIFY folds
-- identical payloads within a transaction: one notice per organization.
CREATE FUNCTION webhook_delivery_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('worker_gateway_wakeup', 'h:' || NEW.organization_id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER webhook_deliveries_notify AFTER INSERT ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION webhook_delivery_notify();

-- webhook_body is an event's body, made once when the event is written:
-- {"id","type","timestamp","organization_id","data"} (Standard Webhooks'
-- recommended shape). Every delivery sends these bytes.
CREATE FUNCTION webhook_body(p_id uuid, p_type text, p_org uuid, p_data jsonb) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT convert_to(jsonb_build_object('id', p_id, 'type', p_type,
        'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'organization_id', p_org, 'data', p_data)::text, 'UTF8')
$$;

-- webhook_emit writes an event to the outbox, with one delivery per enabled
-- target of the organization subscribed to its type that existed when it
-- happened (p_at), and nothing at all when there is none. The task paths,
-- which are hot, write the same rows from their own statements
-- (store.taskWebhookSQL) rather than call this per row.
CREATE FUNCTION webhook_emit(p_org uuid, p_type text, p_data jsonb, p_at timestamptz DEFAULT now())
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_targets t WHERE t.organization_id = p_org AND t.enabled
            AND t.event_types @> ARRAY[p_type] AND t.created_at <= p_at) THEN
        RETURN 0;
    END IF;
    v_id := gateway_uuid_v7();
    INSERT INTO webhook_events (id, organization_id, event_type, body)
    VALUES (v_id, p_org, p_type, webhook_body(v_id, p_type, p_org, p_data));
    INSERT INTO webhook_deliveries (event_id, target_id, organization_id)
    SELECT v_id, t.id, p_org FROM webhook_targets t
    WHERE t.organization_id = p_org AND t.enabled AND t.event_types @> ARRAY[p_type] AND t.created_at <= p_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- scan.completed / scan.failed: a scan ends in advance_scan (or is
-- cancelled, which sends nothing). Scans end once per scan, far off the hot
-- path, so a trigger catches every way a scan finishes.
CREATE FUNCTION webhook_scan_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit(NEW.organization_id, 'scan.' || NEW.state, jsonb_build_object(
        'scan_id', NEW.id, 'state', NEW.state, 'targets', NEW.targets, 'completed_at', NEW.completed_at));
    RETURN NULL;
END $$;
CREATE TRIGGER scans_webhook_ended AFTER UPDATE OF state ON scans
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ('completed', 'failed'))
    EXECUTE FUNCTION webhook_scan_ended();

-- worker.revoked: to the owner and every organization assigned the worker.
CREATE FUNCTION webhook_worker_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit(o.org, 'worker.revoked', jsonb_build_object(
        'worker_id', NEW.id, 'name', NEW.name, 'reason', NEW.revocation_reason, 'revoked_at', NEW.revoked_at))
    FROM (SELECT NEW.owner_organization_id AS org WHERE NEW.owner_organization_id IS NOT NULL
          UNION SELECT ow.organization_id FROM organization_workers ow WHERE ow.worker_id = NEW.id) o;
    RETURN NULL;
END $$;
CREATE TRIGGER workers_webhook_revoked AFTER UPDATE OF revoked_at ON workers
    FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION webhook_worker_revoked();

-- schedule.fire_skipped: a slot recorded as skipped, or a run the database
-- refused (its fire turned to skipped).
CREATE FUNCTION webhook_fire_skipped() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit(NEW.organization_id, 'schedule.fire_skipped', jsonb_build_object(
        'schedule_id', NEW.schedule_id, 'fire_id', NEW.id, 'version', NEW.version, 'slot_at', NEW.slot_at,
        'skip_reason', NEW.skip_reason, 'missed_slots', NEW.missed_slots));
    RETURN NULL;
END $$;
CREATE TRIGGER schedule_fires_webhook_skipped AFTER INSERT ON schedule_fires
    FOR EACH ROW WHEN (NEW.outcome = 'skipped')
    EXECUTE FUNCTION webhook_fire_skipped();
CREATE TRIGGER schedule_fires_webhook_skipped_later AFTER UPDATE OF outcome ON schedule_fires
    FOR EACH ROW WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome AND NEW.outcome = 'skipped')
    EXECUTE FUNCTION webhook_fire_skipped();

-- worker.offline: online is computed from last_seen_at, so the webhook
-- watcher's pass notices a worker's going offline and records here that it
-- reported it; it reports again only after the worker was seen since.
ALTER TABLE workers ADD COLUMN offline_reported_at timestamptz NULL;

-- Conditions already reported per organization (organization.no_eligible_worker),
-- so a condition that lasts is reported once; the row goes when it clears.
CREATE TABLE webhook_conditions (
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    condition       text NOT NULL,
    since           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, condition)
);

COMMIT;
