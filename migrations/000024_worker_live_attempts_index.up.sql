-- A worker's live attempts are found by finished_at IS NULL, not by status.
--
-- Three partial indexes hold exactly the live attempts (status leased or
-- running): one per task (the one-live-attempt rule), one by lease expiry
-- (the sweep) and one per worker (its capacity count and its repeated
-- polls, on every poll). When statistics are taken while no lease is held —
-- ANALYZE after a quiet spell — the planner believes all three are empty and
-- therefore equally cheap, and a poll's "this worker's live attempts" could
-- be planned as a read of every live lease of every worker through the
-- expiry index (seen: 1,700 entries per poll with 64 workers, 1 ms each).
--
-- So the worker index gets a predicate of its own. An attempt is live
-- exactly while it has no finished_at: every write that ends one sets both
-- (store: completions, the expiry sweep, releases by policy), and the CHECK
-- below makes the database hold every row to it. Statements about one
-- worker's live attempts state finished_at IS NULL and never the status, so
-- this index is the only partial one they can use; statements that state the
-- status (the sweep, per-task lookups) cannot use this one.

-- Rows that break the rule (none are expected) are brought to it: an ended
-- attempt without finished_at takes its last update's time.
UPDATE worker_task_attempts SET finished_at = updated_at
WHERE finished_at IS NULL AND status NOT IN ('leased', 'running');
UPDATE worker_task_attempts SET finished_at = NULL
WHERE finished_at IS NOT NULL AND status IN ('leased', 'running');

ALTER TABLE worker_task_attempts ADD CONSTRAINT worker_task_attempts_live_unfinished
    CHECK ((finished_at IS NULL) = (status IN ('leased', 'running')));

CREATE INDEX worker_task_attempts_worker_unfinished_idx
    ON worker_task_attempts (worker_id, lease_request_key)
    WHERE finished_at IS NULL;
DROP INDEX worker_task_attempts_worker_live_idx;
