-- compare_scan_history writes a recorded scan's changes against the latest
-- earlier recorded scan of its scope key, replacing those it had; a scan
-- that is not recorded, or has no earlier scan, has none.
CREATE OR REPLACE FUNCTION compare_scan_history(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s    scans%ROWTYPE;
    prev uuid;
BEGIN
    SELECT * INTO s FROM scans WHERE id = p_scan;
    IF s.history_recorded_at IS NOT NULL AND s.state = scan_state_completed() AND s.scope_key <> '' THEN
        SELECT p.id INTO prev FROM scans p
        WHERE p.organization_id = s.organization_id AND p.scope_key = s.scope_key
            AND p.history_recorded_at IS NOT NULL AND p.state = scan_state_completed()
            AND (p.created_at, p.id) < (s.created_at, s.id)
        ORDER BY p.created_at DESC, p.id DESC LIMIT 1;
    END IF;
    IF prev IS NULL THEN
        DELETE FROM asset_scan_changes WHERE scan_id = p_scan;
        RETURN; -- not comparable, or the first scan of its scope: the baseline
    END IF;

    WITH cur AS (
        SELECT asset_id, asset_type, asset_value, details FROM asset_scan_snapshots WHERE scan_id = p_scan
    ), old AS (
        SELECT asset_id, asset_type, asset_value, details FROM asset_scan_snapshots WHERE scan_id = prev
    ), computed AS (
        SELECT coalesce(c.asset_id, o.asset_id) AS asset_id,
               coalesce(c.asset_type, o.asset_type) AS asset_type,
               coalesce(c.asset_value, o.asset_value) AS asset_value,
               CASE WHEN o.asset_id IS NULL THEN CASE WHEN c.asset_type = 'port' THEN scan_change_port_opened() ELSE scan_change_asset_appeared() END
                    ELSE CASE WHEN o.asset_type = 'port' THEN scan_change_port_closed() ELSE scan_change_asset_disappeared() END
               END AS kind,
               o.details AS before, c.details AS after
        FROM cur c FULL JOIN old o ON o.asset_id = c.asset_id
        WHERE c.asset_id IS NULL OR o.asset_id IS NULL
        UNION ALL
        SELECT c.asset_id, c.asset_type, c.asset_value, scan_change_http_status_changed(),
               jsonb_build_object('status', o.details->'status'), jsonb_build_object('status', c.details->'status')
        FROM cur c JOIN old o ON o.asset_id = c.asset_id
        WHERE c.details ? 'status' AND o.details ? 'status' AND c.details->'status' <> o.details->'status'
        UNION ALL
        SELECT c.asset_id, c.asset_type, c.asset_value, scan_change_certificate_changed(),
               jsonb_build_object('certificate', o.details->'certificate'), jsonb_build_object('certificate', c.details->'certificate')
        FROM cur c JOIN old o ON o.asset_id = c.asset_id
        WHERE c.details ? 'certificate' AND o.details ? 'certificate'
            AND coalesce(c.details->'certificate'->'sha256', c.details->'certificate')
                <> coalesce(o.details->'certificate'->'sha256', o.details->'certificate')
    ), stale AS (
        DELETE FROM asset_scan_changes x
        WHERE x.scan_id = p_scan AND NOT EXISTS (SELECT 1 FROM computed k WHERE k.asset_id = x.asset_id AND k.kind = x.kind)
    )
    INSERT INTO asset_scan_changes AS x (organization_id, scan_id, previous_scan_id, asset_id, asset_type, asset_value, kind, before, after)
        SELECT s.organization_id, p_scan, prev, k.asset_id, k.asset_type, k.asset_value, k.kind, k.before, k.after
        FROM computed k ORDER BY k.asset_type, k.asset_value, k.kind
    ON CONFLICT (scan_id, asset_id, kind) DO UPDATE SET
        previous_scan_id = EXCLUDED.previous_scan_id, before = EXCLUDED.before, after = EXCLUDED.after
        WHERE (x.previous_scan_id, x.before, x.after) IS DISTINCT FROM (EXCLUDED.previous_scan_id, EXCLUDED.before, EXCLUDED.after);
END;
$$;
