-- Token lineage: which API token minted each token. NULL for tokens created
-- without one (`gateway admin create-token`, `gateway dev`). A minted token
-- never expires later than, nor carries wider scopes or another organization
-- than, its parent (checked when it is created), and revoking a token
-- revokes its descendants in the same transaction. A token row deleted with
-- its organization takes its descendants with it: none may outlive it.
BEGIN;
ALTER TABLE api_tokens ADD COLUMN parent_token_id uuid NULL REFERENCES api_tokens(id) ON DELETE CASCADE;
-- The revocation cascade walks children by parent.
CREATE INDEX api_tokens_parent_idx ON api_tokens (parent_token_id) WHERE parent_token_id IS NOT NULL;
COMMIT;
