-- webhook_fire_skipped emits schedule.fire_skipped for a slot recorded as
-- skipped, or a run the database refused (its fire turned to skipped):
-- triggers schedule_fires_webhook_skipped(_later), migration 000020.
CREATE OR REPLACE FUNCTION webhook_fire_skipped() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit(NEW.organization_id, 'schedule.fire_skipped', jsonb_build_object(
        'schedule_id', NEW.schedule_id, 'fire_id', NEW.id, 'version', NEW.version, 'slot_at', NEW.slot_at,
        'skip_reason', NEW.skip_reason, 'missed_slots', NEW.missed_slots));
    RETURN NULL;
END $$;
