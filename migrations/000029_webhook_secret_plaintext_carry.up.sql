-- Webhook signing secrets across the upgrade from a release before 000027.
-- Until the contract step this release writes each secret twice, sealed
-- and in plaintext (store/webhook_secrets.go), so a replica of the
-- previous release, which signs with the plaintext column, signs right.
-- That release rotates by writing the plaintext alone
-- (secret = new, previous_secret = t.secret): the seals beside it would
-- still hold the replaced secret. This trigger clears them when a write
-- changes the plaintext secret and not the seal, so the plaintext is what
-- this release signs with (it falls back to plaintext where no seal is)
-- until its next sealing pass seals it again. A deletion by the previous
-- release (secret = '') clears them too. The contract step
-- (contract/000030) refuses while a live secret has no seal, then sets
-- the plaintext columns to NULL, forbids them, and drops this trigger.

BEGIN;

CREATE FUNCTION webhook_targets_plaintext_rotated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.secret IS DISTINCT FROM OLD.secret
        AND NEW.secret_ciphertext IS NOT DISTINCT FROM OLD.secret_ciphertext THEN
        NEW.secret_ciphertext := NULL;
        NEW.secret_wrapped_key := NULL;
        NEW.secret_kek_id := NULL;
        NEW.previous_secret_ciphertext := NULL;
        NEW.previous_secret_wrapped_key := NULL;
        NEW.previous_secret_kek_id := NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER webhook_targets_plaintext_rotated BEFORE UPDATE OF secret ON webhook_targets
    FOR EACH ROW EXECUTE FUNCTION webhook_targets_plaintext_rotated();

COMMIT;
