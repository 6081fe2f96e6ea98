-- Physical settings for a queue leased in the order it was filled. Nothing
-- a reader sees changes; existing rows and pages stay as they are.
--
-- 1. Time-ordered ids. New tasks, attempts and result batches get UUID
--    version 7 ids (48 bits of milliseconds since the epoch, then random
--    bits) instead of random ones (version 4). A random id lands on a random
--    leaf of its primary key: every insert dirtied another leaf, leaves
--    split all over the index, and the first change to a page after a
--    checkpoint writes the whole page to the WAL. Time-ordered ids append at
--    the right edge, and the attempts a completion looks up (leased a moment
--    ago) sit on neighbouring leaves. Ids made within one millisecond are not
--    ordered among themselves; nothing reads order from ids.
--
-- 2. Room for a whole page of leases. Acquisition walks the queue by
--    priority and age, which for tasks created over time is the order they
--    were written in: one lease statement takes every task on a page at
--    once, and each needs room on that page for its new version (the old
--    ones are still visible until the statement commits) to stay a HOT
--    update. With the 30 % left by 000012's fillfactor, about half of the
--    task updates of a drained backlog were not HOT (measured: 105,000 of
--    200,000 with tasks leased in the order they were written) and wrote an
--    entry into every index of worker_tasks. Half of each page free holds a
--    new version of every row on it; the lease's old versions are pruned
--    before the completion needs the room again (193,000 of 200,000 HOT).
--    The price is a task table twice as large on disk.
--
-- gateway_uuid_v7 is a SQL function of one expression (PostgreSQL 15 has no
-- uuidv7()): the planner inlines it into the INSERT, so it costs a few
-- builtin calls per row and no function call.
CREATE FUNCTION gateway_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT encode(
        -- version 7: bits 52 and 53 turn the random id's version 4 (0100)
        -- into 0111; the variant bits stay as gen_random_uuid set them.
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

ALTER TABLE worker_tasks ALTER COLUMN id SET DEFAULT gateway_uuid_v7();
ALTER TABLE worker_task_attempts ALTER COLUMN id SET DEFAULT gateway_uuid_v7();
ALTER TABLE worker_result_batches ALTER COLUMN id SET DEFAULT gateway_uuid_v7();

-- Applies to pages written from now on.
ALTER TABLE worker_tasks SET (fillfactor = 50);
