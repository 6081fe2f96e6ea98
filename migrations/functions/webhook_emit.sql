-- webhook_emit is the one writer of the outbox (store/events.go): an event,
-- with one delivery per enabled target of the organization subscribed to
-- its type that existed when it happened (p_at), and nothing at all when
-- there is none. The task paths, which are hot, write the same rows from
-- their own statements (store.taskWebhookSQL) rather than call this per row.
CREATE OR REPLACE FUNCTION webhook_emit(p_org uuid, p_type text, p_data jsonb, p_at timestamptz DEFAULT now())
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
