-- Lease tokens are stored only as their SHA-256, so read access to the
-- database (a backup, a replica, a leaked dump) cannot present a worker's
-- token and forge its writes. The gateway hashes the token a worker sends
-- and compares hashes in the fencing predicate; the token itself exists only
-- in the lease answer.
--
-- Existing tokens are hashed the way the gateway hashes (SHA-256 of the
-- token's UTF-8 bytes), so leases live across the upgrade keep working, and
-- finished attempts still recognise a repeated completion. Every fenced
-- statement names the attempt by id, so no index on the hash is needed (as
-- for the token since 000007).

BEGIN;

ALTER TABLE worker_task_attempts ADD COLUMN lease_token_hash bytea;
UPDATE worker_task_attempts SET lease_token_hash = sha256(convert_to(lease_token, 'UTF8'));
ALTER TABLE worker_task_attempts
    ALTER COLUMN lease_token_hash SET NOT NULL,
    ADD CONSTRAINT worker_task_attempts_lease_token_hash_check CHECK (octet_length(lease_token_hash) = 32),
    DROP COLUMN lease_token;

COMMIT;
