-- One emitter of webhook events (store/events.go). worker.revoked was
-- written by a trigger that sent it to every organization ever assigned
-- the worker, even after its owner withdrew the grant; it is emitted now
-- by RevokeWorker, in its transaction, to the organizations that may see
-- the worker then (store.workerAudience). webhook_emit stays the one
-- writer of the outbox.

BEGIN;

DROP TRIGGER IF EXISTS workers_webhook_revoked ON workers;
DROP FUNCTION IF EXISTS webhook_worker_revoked();

COMMENT ON FUNCTION webhook_emit(uuid, text, jsonb, timestamptz) IS
    'The one writer of webhook_events and webhook_deliveries: every event reaches it (store/events.go).';

COMMIT;
