-- webhook_body is an event's body, made once when the event is written:
-- {"id","type","timestamp","organization_id","data"} (Standard Webhooks'
-- recommended shape). Every delivery sends these bytes.
CREATE OR REPLACE FUNCTION webhook_body(p_id uuid, p_type text, p_org uuid, p_data jsonb) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT convert_to(jsonb_build_object('id', p_id, 'type', p_type,
        'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'organization_id', p_org, 'data', p_data)::text, 'UTF8')
$$;
