-- Worker identity lifecycle: certificate renewal with a grace period, and
-- capabilities whose loss cancels an active attempt.

BEGIN;

-- After a renewal the previous certificate keeps working until the new one
-- is first used or the grace period ends, whichever is first.
ALTER TABLE workers
    ADD COLUMN previous_certificate_fingerprint text NULL,
    ADD COLUMN previous_certificate_valid_until timestamptz NULL,
    ADD COLUMN certificate_expires_at timestamptz NULL;
CREATE UNIQUE INDEX workers_previous_fingerprint_unique ON workers (previous_certificate_fingerprint)
    WHERE previous_certificate_fingerprint IS NOT NULL;

-- Capabilities a task cannot lose mid-run: when its worker stops
-- advertising any of them, the attempt is ended by policy.
ALTER TABLE worker_tasks ADD COLUMN critical_capabilities jsonb NOT NULL DEFAULT '{}'::jsonb;

CREATE INDEX enrollment_tokens_worker_idx ON enrollment_tokens (worker_id);
CREATE INDEX audit_events_action_idx ON audit_events (action, id DESC);

COMMIT;
