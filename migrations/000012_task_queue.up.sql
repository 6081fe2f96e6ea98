-- The leasable tasks get a narrow table of their own, so a task's state
-- changes stop rewriting index entries.
--
-- Before: acquisition walked a partial index of worker_tasks on
-- "state IN ('pending', 'retry_wait')", and two more partial indexes and
-- an (organization_id, state) index named the state too. An UPDATE that
-- changes a column any index names (predicates included) cannot be HOT, so
-- every lease, start, completion and retry wrote a new entry into every
-- index of worker_tasks — six to eight per change, three changes per task.
--
-- After: worker_task_queue holds one row per leasable task (pending or
-- retry_wait), inserted by the statement that makes the task leasable and
-- deleted by the one that leases, cancels or dead-letters it (store/queue.go
-- says who, and the randomized test checks the rule after every step). The
-- acquisition walk, the retry timer and the deadline sweep read only this
-- table. No index of worker_tasks names a column a state change writes, so
-- those updates are HOT when the page has room: the fillfactor leaves it.
--
-- Existing leasable tasks are moved across, with the table locked against
-- writers so that none is missed; leased and running tasks and their
-- attempts do not change.

BEGIN;

LOCK TABLE worker_tasks IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE worker_task_queue (
    task_id               uuid PRIMARY KEY REFERENCES worker_tasks(id) ON DELETE CASCADE,
    organization_id       uuid NOT NULL,
    lease_class           text NOT NULL,
    task_type             text NOT NULL,
    required_capabilities jsonb NOT NULL,
    priority              integer NOT NULL,
    created_at            timestamptz NOT NULL,
    available_at          timestamptz NOT NULL,
    execution_deadline_at timestamptz NULL
);

INSERT INTO worker_task_queue (task_id, organization_id, lease_class, task_type, required_capabilities,
        priority, created_at, available_at, execution_deadline_at)
    SELECT id, organization_id, lease_class, task_type, required_capabilities,
        priority, created_at, available_at, execution_deadline_at
    FROM worker_tasks
    WHERE state IN ('pending', 'retry_wait');

-- The walk: one organization, one lease class, priority then age.
CREATE INDEX worker_task_queue_walk_idx ON worker_task_queue (organization_id, lease_class, priority DESC, created_at, task_id);
-- Retry wake-ups and scheduled tasks: the earliest future available_at.
CREATE INDEX worker_task_queue_available_idx ON worker_task_queue (available_at);
CREATE INDEX worker_task_queue_deadline_idx ON worker_task_queue (execution_deadline_at)
    WHERE execution_deadline_at IS NOT NULL;

-- Rows live seconds: vacuum it often, so the walk's index stays short.
ALTER TABLE worker_task_queue SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01
);

DROP INDEX worker_tasks_lease_class_idx;
DROP INDEX worker_tasks_available_idx;
DROP INDEX worker_tasks_deadline_idx;
-- Listing by state walks worker_tasks_org_created_idx and filters; the
-- metrics scrape counts by state over the whole table either way.
DROP INDEX worker_tasks_org_state_idx;

-- Room on each page for the new versions of a task's rows (lease, start,
-- completion), so they stay HOT. Applies to pages written from now on.
ALTER TABLE worker_tasks SET (fillfactor = 70);

COMMIT;
