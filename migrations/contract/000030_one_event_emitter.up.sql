-- requires: expand 30
-- worker.revoked is emitted by RevokeWorker alone (store/events.go) once no
-- replica of a release before 000026 serves: its trigger goes.
BEGIN;
DROP TRIGGER IF EXISTS workers_webhook_revoked ON workers;
DROP FUNCTION IF EXISTS webhook_worker_revoked();
COMMIT;
