-- Every attempt row gets one entry per index when it is inserted (a lease)
-- and, because its status is in partial-index predicates, one per
-- non-partial index when it ends (a completion). Two of its indexes served
-- nothing the others could not:
--
-- The attempt deadline index: no statement looks attempts up by deadline.
-- A lease never outlives its attempt's deadline (renewals stop at it), so
-- the expiry sweep, walking live leases by lease_expires_at, reaches an
-- attempt past its deadline by that index and fails it with a timeout.
DROP INDEX worker_task_attempts_deadline_idx;

-- A worker's live attempts (its capacity count) and a poll's live leases by
-- its idempotency key (a repeated poll) in one index of live attempts only.
-- The key index held every attempt ever leased with a key, and took a new
-- entry at every completion.
CREATE INDEX worker_task_attempts_worker_live_idx
    ON worker_task_attempts (worker_id, lease_request_key)
    WHERE status IN ('leased', 'running');
DROP INDEX worker_task_attempts_worker_active_idx;
DROP INDEX worker_task_attempts_lease_request_idx;
