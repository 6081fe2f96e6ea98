-- Schedules: deletion and per-organization limits (issue 30).
--
-- Additive only (expand): a release that does not know these columns reads
-- and writes schedules as before.

BEGIN;

-- A deleted schedule keeps its row, its versions and its history for as
-- long as its runs are kept (the tasks and scans it created name it), but
-- no path reads it as a schedule again: reads, edits, runs and the claim
-- all skip it (store/schedules.go, DeleteSchedule). Deleting also clears
-- enabled and next_fire_at, so the claim's partial indexes drop it.
ALTER TABLE schedules ADD COLUMN deleted_at timestamptz NULL;

-- The most schedules an organization may have (deleted ones do not
-- count); NULL is the gateway's default (-schedule-quota). Per-organization
-- quotas of other resources are meant to sit beside it.
ALTER TABLE organizations ADD COLUMN max_schedules integer NULL CHECK (max_schedules IS NULL OR max_schedules >= 0);

COMMIT;
