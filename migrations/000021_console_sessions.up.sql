-- Sessions of the operators' console (/ui, issue 19).
--
-- An API token is exchanged for a session cookie at sign-in. The cookie holds
-- a random secret; only its SHA-256 is stored, so a copy of this table opens
-- no session. A session acts as its token: it references the token row, and
-- every lookup joins it, so a revoked or expired token (or a revoked
-- ancestor, whose revocation cascades to the token) ends its sessions at
-- once; deleting the token deletes them.

BEGIN;

CREATE TABLE console_sessions (
    secret_hash bytea PRIMARY KEY,
    token_id    uuid NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
-- A token's sessions (deleting its expired ones at the next sign-in).
CREATE INDEX console_sessions_token_idx ON console_sessions (token_id, expires_at);

COMMIT;
