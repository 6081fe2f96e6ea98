-- Lease classes: tasks an identical worker could take alike share a class
-- (their task type and required capabilities). Acquisition walks each class
-- of an organization's pending tasks separately and skips whole classes the
-- worker cannot run, so a backlog of tasks that need a capability no online
-- worker has costs a poll one index probe, not a walk past every such task.
ALTER TABLE worker_tasks
    ADD COLUMN lease_class text NOT NULL
    GENERATED ALWAYS AS (md5(task_type || ':' || required_capabilities::text)) STORED;

-- Replaces worker_tasks_acquire_idx, which ordered an organization's pending
-- tasks without regard to who can run them.
CREATE INDEX worker_tasks_lease_class_idx ON worker_tasks (organization_id, lease_class, priority DESC, created_at, id)
    WHERE state IN ('pending', 'retry_wait');
DROP INDEX worker_tasks_acquire_idx;
