-- Webhook signing secrets sealed under the key-encryption key, as task
-- secrets are (000017, internal/secretbox): each secret is encrypted under a
-- data key of its own, wrapped by the KEK the gateway holds outside the
-- database; the seals' associated data is (organization, target), so a
-- secret copied onto another target does not open.
--
-- Expand only. The plaintext columns stay, now nullable: the KEK is not in
-- the database, so existing secrets are sealed by the gateway (store
-- SealWebhookSecrets, run at start-up, by `gateway migrate up` and by
-- `gateway secrets rotate-kek` when a key is configured), in resumable
-- batches, after which secret and previous_secret are NULL on every row.
-- Until then deliveries read the plaintext, so old rows keep working.
-- A replica of an older release signs with the plaintext column only: once
-- a row is sealed, its deliveries are refused by receivers and retried, so
-- older replicas stop delivering before new ones start with the key (README,
-- Upgrading).

BEGIN;

SET LOCAL lock_timeout = '5s';

ALTER TABLE webhook_targets
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_ciphertext           bytea NULL,
    ADD COLUMN secret_wrapped_key          bytea NULL,
    ADD COLUMN secret_kek_id               text NULL,
    ADD COLUMN previous_secret_ciphertext  bytea NULL,
    ADD COLUMN previous_secret_wrapped_key bytea NULL,
    ADD COLUMN previous_secret_kek_id      text NULL,
    -- A seal is whole or absent.
    ADD CONSTRAINT webhook_targets_secret_sealed_whole CHECK (
        (secret_ciphertext IS NULL) = (secret_wrapped_key IS NULL) AND (secret_ciphertext IS NULL) = (secret_kek_id IS NULL)),
    ADD CONSTRAINT webhook_targets_previous_secret_sealed_whole CHECK (
        (previous_secret_ciphertext IS NULL) = (previous_secret_wrapped_key IS NULL)
        AND (previous_secret_ciphertext IS NULL) = (previous_secret_kek_id IS NULL));

COMMIT;
