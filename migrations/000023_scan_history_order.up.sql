-- Scanner history, reviewed (issue 18): which scans are compared, and in
-- what order, when scans of one scope complete out of order, concurrently,
-- or only in part.
--
-- record_scan_history (000022) compared a scan with the latest earlier
-- completed scan of its scope key as it completed, once. Now:
--   - only a scan whose every job completed is compared, or compared with:
--     a scan with a failed or cancelled job observed only part of its scope,
--     and comparing it would report all the rest as gone. Its snapshot is
--     kept all the same; a redrive that completes the job completes the
--     scan again, and then it is compared;
--   - recording a scan also recomputes the next recorded scan of its scope
--     key: its earlier scan may now be this one (scans compare in creation
--     order, whatever order they complete in);
--   - the scans of one scope key record their history one at a time (a
--     transaction-scoped advisory lock of class 1800 keyed by organization
--     and scope key, taken before anything is read), so two completing at
--     once see each other;
--   - a change recomputed with another earlier scan or other values is
--     updated in place (its key stays (scan, asset, kind): never twice);
--   - a certificate is compared by its sha256 fingerprint when it has one.

BEGIN;

-- compare_scan_history writes a recorded scan's changes against the latest
-- earlier recorded scan of its scope key, replacing those it had; a scan
-- that is not recorded, or has no earlier scan, has none.
CREATE FUNCTION compare_scan_history(p_scan uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s    scans%ROWTYPE;
    prev uuid;
BEGIN
    SELECT * INTO s FROM scans WHERE id = p_scan;
    IF s.history_recorded_at IS NOT NULL AND s.state = 'completed' AND s.scope_key <> '' THEN
        SELECT p.id INTO prev FROM scans p
        WHERE p.organization_id = s.organization_id AND p.scope_key = s.scope_key
            AND p.history_recorded_at IS NOT NULL AND p.state = 'completed'
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

-- record_scan_history (000022) snapshots what a completed scan observed,
-- records it when its every job completed, compares it, and compares again
-- the next recorded scan of its scope key. advance_scan (000022) calls it
-- in the transaction that completes the scan.
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
            WHEN NOT EXISTS (SELECT 1 FROM scan_jobs j WHERE j.scan_id = p_scan AND j.state <> 'completed') THEN now() END
    WHERE id = p_scan;
    IF s.scope_key = '' THEN
        RETURN; -- created before scope keys: compared with nothing
    END IF;
    PERFORM compare_scan_history(p_scan);

    SELECT n.id INTO nxt FROM scans n
    WHERE n.organization_id = s.organization_id AND n.scope_key = s.scope_key
        AND n.history_recorded_at IS NOT NULL AND n.state = 'completed'
        AND (n.created_at, n.id) > (s.created_at, s.id)
    ORDER BY n.created_at, n.id LIMIT 1;
    IF nxt IS NOT NULL THEN
        PERFORM compare_scan_history(nxt);
    END IF;
END;
$$;

-- Scans recorded under 000022 that had a job not completed are partial:
-- no longer a scan to compare with, and without changes of their own.
DELETE FROM asset_scan_changes c USING scans s
WHERE c.scan_id = s.id AND s.history_recorded_at IS NOT NULL
    AND EXISTS (SELECT 1 FROM scan_jobs j WHERE j.scan_id = s.id AND j.state <> 'completed');
UPDATE scans s SET history_recorded_at = NULL
WHERE s.history_recorded_at IS NOT NULL
    AND EXISTS (SELECT 1 FROM scan_jobs j WHERE j.scan_id = s.id AND j.state <> 'completed');

COMMIT;
