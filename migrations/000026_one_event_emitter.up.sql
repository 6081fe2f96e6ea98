-- One emitter of webhook events (store/events.go). worker.revoked was
-- written by a trigger that sent it to every organization ever assigned
-- the worker, even after its owner withdrew the grant; this release emits
-- it from RevokeWorker, in its transaction, to the organizations that may
-- see the worker then (store.workerAudience). webhook_emit stays the one
-- writer of the outbox.
--
-- Expand: while replicas of the previous release still serve beside this
-- one, their revocations rely on the trigger. This release marks its own
-- revoking transaction (gateway.worker_revoked_emitted) and the trigger
-- stands aside for it, so each revocation is told exactly once by whichever
-- release made it. The contract step (contract/000030) drops the trigger
-- and its function.

BEGIN;

CREATE OR REPLACE FUNCTION webhook_worker_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('gateway.worker_revoked_emitted', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_emit(o.org, 'worker.revoked', jsonb_build_object(
        'worker_id', NEW.id, 'name', NEW.name, 'reason', NEW.revocation_reason, 'revoked_at', NEW.revoked_at))
    FROM (SELECT NEW.owner_organization_id AS org WHERE NEW.owner_organization_id IS NOT NULL
          UNION SELECT ow.organization_id FROM organization_workers ow WHERE ow.worker_id = NEW.id) o;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION webhook_emit(uuid, text, jsonb, timestamptz) IS
    'The one writer of webhook_events and webhook_deliveries: every event reaches it (store/events.go).';

COMMIT;
