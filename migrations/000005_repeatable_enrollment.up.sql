-- Enrollment can be repeated after a lost answer: the token remembers which
-- key it was used for and the certificate it produced, and answers the same
-- CSR key with the same certificate while the token has not expired.

BEGIN;

ALTER TABLE enrollment_tokens
    ADD COLUMN public_key_sha256 text NULL,
    ADD COLUMN certificate_pem   text NULL;

COMMIT;
