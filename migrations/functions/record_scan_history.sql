-- record_scan_history snapshots what a completed scan observed, records
-- it when its every job completed, compares it, and compares again the
-- next recorded scan of its scope key (scans compare in creation order,
-- whatever order they complete in). advance_scan calls it in the
-- transaction that completes the scan. The scans of one scope key record
-- their history one at a time (a transaction-scoped advisory lock of class
-- 1800 keyed by organization and scope key, taken before anything is read).
CREATE OR REPLACE FUNCTION record_scan_history(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s   scans%ROWTYPE;
    nxt uuid;
BEGIN
    SELECT * INTO s FROM scans WHERE id = p_scan;
    -- One scope key at a time; the statements after the lock read what the
    -- transaction that held it committed (READ COMMITTED).
    PERFORM pg_advisory_xact_lock(1800, hashtext(s.organization_id::text || '/' || s.scope_key));
    INSERT INTO asset_scan_snapshots (scan_id, asset_id, organization_id, asset_type, asset_value, details, observed_at)
        SELECT sa.scan_id, a.id, a.organization_id, a.type, a.value, sa.details, sa.found_at
        FROM scan_assets sa JOIN assets a ON a.id = sa.asset_id
        WHERE sa.scan_id = p_scan
    ON CONFLICT (scan_id, asset_id) DO UPDATE SET details = EXCLUDED.details;
    UPDATE scans SET history_recorded_at = CASE
            WHEN NOT EXISTS (SELECT 1 FROM scan_jobs j WHERE j.scan_id = p_scan AND j.state <> scan_job_state_completed()) THEN now() END
    WHERE id = p_scan;
    IF s.scope_key = '' THEN
        RETURN; -- created before scope keys: compared with nothing
    END IF;
    PERFORM compare_scan_history(p_scan);

    SELECT n.id INTO nxt FROM scans n
    WHERE n.organization_id = s.organization_id AND n.scope_key = s.scope_key
        AND n.history_recorded_at IS NOT NULL AND n.state = scan_state_completed()
        AND (n.created_at, n.id) > (s.created_at, s.id)
    ORDER BY n.created_at, n.id LIMIT 1;
    IF nxt IS NOT NULL THEN
        PERFORM compare_scan_history(nxt);
    END IF;
END;
$$;
