-- webhook_scan_ended emits scan.completed / scan.failed when a scan ends
-- (trigger scans_webhook_ended, migration 000020): in advance_scan. A
-- cancelled scan sends nothing. Scans end once per scan, far off the hot
-- path, so a trigger catches every way a scan finishes.
CREATE OR REPLACE FUNCTION webhook_scan_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit(NEW.organization_id, 'scan.' || NEW.state, jsonb_build_object(
        'scan_id', NEW.id, 'state', NEW.state, 'targets', NEW.targets, 'completed_at', NEW.completed_at));
    RETURN NULL;
END $$;
