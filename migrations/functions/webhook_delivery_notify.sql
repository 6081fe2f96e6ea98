-- webhook_delivery_notify wakes the deliverers (store.WakeWebhooks) when
-- deliveries are queued (trigger webhook_deliveries_notify, migration
-- 000020): one notice per organization and statement, not one call per row
-- (a completion group writes hundreds of deliveries in one statement).
CREATE OR REPLACE FUNCTION webhook_delivery_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM gateway_wake_webhooks(o.organization_id)
    FROM (SELECT DISTINCT organization_id FROM new_deliveries) o;
    RETURN NULL;
END $$;
