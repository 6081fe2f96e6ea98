-- The database's functions have one current definition each, in
-- migrations/functions/*.sql, applied after the numbered migrations
-- (migrations/functions.go); the definitions in the migrations before this
-- one are history. Bodies the functions step writes spell no wake-up format
-- or state of their own: they call functions generated from Go
-- (migrations/functions/00_from_go.gen.sql, store/sqlfromgo.go).
--
-- This migration only says where each function lives, and moves the expand
-- version on, so that the previous release's replicas, restarting during
-- the upgrade, see a newer schema and leave the new bodies alone.

BEGIN;
COMMENT ON FUNCTION advance_scan(uuid) IS 'Current definition: migrations/functions/advance_scan.sql.';
COMMENT ON FUNCTION record_scan_history(uuid) IS 'Current definition: migrations/functions/record_scan_history.sql.';
COMMENT ON FUNCTION compare_scan_history(uuid) IS 'Current definition: migrations/functions/compare_scan_history.sql.';
COMMENT ON FUNCTION mirror_task_state_to_scan_job() IS 'Current definition: migrations/functions/mirror_task_state_to_scan_job.sql.';
COMMENT ON FUNCTION scan_job_output(uuid) IS 'Current definition: migrations/functions/scan_job_output.sql.';
COMMENT ON FUNCTION wake_schedule_of_ended_run() IS 'Current definition: migrations/functions/wake_schedule_of_ended_run.sql.';
COMMENT ON FUNCTION webhook_delivery_notify() IS 'Current definition: migrations/functions/webhook_delivery_notify.sql.';
COMMENT ON FUNCTION webhook_body(uuid, text, uuid, jsonb) IS 'Current definition: migrations/functions/webhook_body.sql.';
COMMENT ON FUNCTION webhook_scan_ended() IS 'Current definition: migrations/functions/webhook_scan_ended.sql.';
COMMENT ON FUNCTION webhook_fire_skipped() IS 'Current definition: migrations/functions/webhook_fire_skipped.sql.';
COMMENT ON FUNCTION gateway_glob_like(text) IS 'Current definition: migrations/functions/gateway_glob_like.sql.';
COMMENT ON FUNCTION threat_exclusion_for(uuid, uuid, text, text, text, text) IS 'Current definition: migrations/functions/threat_exclusion_for.sql.';
COMMENT ON FUNCTION worker_labels_match(jsonb, jsonb) IS 'Current definition: migrations/functions/worker_labels_match.sql.';
COMMENT ON FUNCTION gateway_uuid_v7() IS 'Current definition: migrations/functions/gateway_uuid_v7.sql.';
COMMENT ON FUNCTION webhook_emit(uuid, text, jsonb, timestamptz) IS
    'The one writer of webhook_events and webhook_deliveries: every event reaches it (store/events.go). Current definition: migrations/functions/webhook_emit.sql.';

COMMIT;
