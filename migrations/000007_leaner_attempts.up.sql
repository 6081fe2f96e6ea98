-- Every attempt row is inserted once and updated twice on the hot path, and
-- each index is one more entry to write each time.
--
-- Lease tokens are 244 random bits and every statement that checks one
-- names the attempt too (WHERE id = $1 AND lease_token = $2): a unique
-- index on the token alone is never used and guarantees nothing randomness
-- does not.
ALTER TABLE worker_task_attempts DROP CONSTRAINT worker_task_attempts_lease_token_key;
-- The same columns as the unique constraint worker_task_attempts_task_id_attempt_number_key.
DROP INDEX worker_task_attempts_task_idx;

-- An attempt's organization is its task's (copied when the lease is granted,
-- in the same statement), and the task's own foreign key already ties it to
-- the organization and deletes it with it. Checking it again on every
-- insert took a KEY SHARE lock on the organization's row from every
-- concurrent lease of that organization: a multixact per busy row.
ALTER TABLE worker_task_attempts DROP CONSTRAINT worker_task_attempts_organization_id_fkey;
