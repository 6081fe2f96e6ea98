-- requires: expand 30
-- The contract step of this release: what no replica of the release
-- before it (which ran before 000026) reads any more goes.
BEGIN;

-- worker.revoked is emitted by RevokeWorker alone (store/events.go) once no
-- replica of a release before 000026 serves: its trigger goes.
DROP TRIGGER IF EXISTS workers_webhook_revoked ON workers;
DROP FUNCTION IF EXISTS webhook_worker_revoked();

-- Webhook signing secrets are stored sealed alone (000027, 000029): the
-- plaintext columns, which this release wrote beside the seals for the
-- previous release, are emptied and forbidden. A live target whose secret
-- has no seal (written by the previous release since the last sealing
-- pass) would lose it: the step refuses until it is sealed. The table is
-- locked first so that no write lands between the check and the CHECK.
LOCK TABLE webhook_targets IN ACCESS EXCLUSIVE MODE;

DO $$
DECLARE
    unsealed bigint;
BEGIN
    SELECT count(*) INTO unsealed FROM webhook_targets
    WHERE deleted_at IS NULL
        AND ((secret IS NOT NULL AND secret <> '' AND secret_ciphertext IS NULL)
            OR (previous_secret IS NOT NULL AND previous_secret_ciphertext IS NULL));
    IF unsealed > 0 THEN
        RAISE EXCEPTION 'contract step refused: % webhook target(s) have a signing secret stored in plaintext only, which this step would erase; seal them first (start a replica of this release with the secrets key, -secrets-key-file; or run `gateway migrate up -contract` or `gateway secrets rotate-kek` with it), then run this step again', unsealed;
    END IF;
END $$;

-- Dropped before the plaintext is emptied: it would take that write for a
-- rotation by the previous release and clear the seals.
DROP TRIGGER webhook_targets_plaintext_rotated ON webhook_targets;
DROP FUNCTION webhook_targets_plaintext_rotated();

UPDATE webhook_targets SET secret = NULL, previous_secret = NULL
WHERE secret IS NOT NULL OR previous_secret IS NOT NULL;

-- Writes of this release test for this constraint in the writing statement
-- (store/webhook_secrets.go): one racing this step fails here rather than
-- storing plaintext after it.
ALTER TABLE webhook_targets ADD CONSTRAINT webhook_targets_no_plaintext_secret
    CHECK (secret IS NULL AND previous_secret IS NULL);

COMMIT;
