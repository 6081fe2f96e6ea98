-- Labels and pinning (issue 17).
--
-- Operators label workers (key=value); workers cannot set labels, so unlike
-- the capabilities a worker advertises they may carry authorization. A task
-- may carry a label selector (which workers' labels it needs) and a pin (the
-- one worker that may run it).
--
-- Both join the lease class: tasks an identical worker could take alike
-- still share a class, and a worker skips a whole class whose selector its
-- labels fail, or which is pinned to another worker, with one index probe —
-- so a backlog it cannot run costs it O(classes), never O(backlog). A task
-- with neither keeps exactly the class it had (the coalesces below add
-- nothing), so existing queue rows stay right.

BEGIN;

ALTER TABLE workers ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;

-- The selector is stored canonical (store/labels.go): match_labels, then
-- match_expressions sorted, each with sorted distinct values; NULL when it
-- selects every worker.
ALTER TABLE worker_tasks
    ADD COLUMN label_selector jsonb NULL,
    ADD COLUMN pinned_worker_id uuid NULL;

-- A generated column's expression cannot be altered in PostgreSQL 15: it is
-- dropped and added again (this rewrites worker_tasks once). No index or
-- view names worker_tasks.lease_class since 000012.
ALTER TABLE worker_tasks DROP COLUMN lease_class;
ALTER TABLE worker_tasks
    ADD COLUMN lease_class text NOT NULL
    GENERATED ALWAYS AS (md5(task_type || ':' || required_capabilities::text
        || coalesce(':s' || label_selector::text, '')
        || coalesce(':p' || pinned_worker_id::text, ''))) STORED;

-- The queue copies them (store/queue.go copiedColumns): the walk reads a
-- class's selector and pin from the first row of the class it probes.
-- Functions that insert queue rows without naming them (advance_scan) leave
-- them NULL, which is what their tasks have.
ALTER TABLE worker_task_queue
    ADD COLUMN label_selector jsonb NULL,
    ADD COLUMN pinned_worker_id uuid NULL;

-- worker_labels_match says whether a worker's labels satisfy a selector:
-- every match_labels pair is present, and every expression holds — In: the
-- label is present with one of the values; NotIn: absent or none of them;
-- Exists; DoesNotExist (Kubernetes semantics).
CREATE FUNCTION worker_labels_match(labels jsonb, selector jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT labels @> coalesce(selector -> 'match_labels', '{}'::jsonb)
        AND NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(coalesce(selector -> 'match_expressions', '[]'::jsonb)) e
            WHERE NOT CASE e ->> 'operator'
                WHEN 'In' THEN coalesce((e -> 'values') @> jsonb_build_array(labels -> (e ->> 'key')), false)
                WHEN 'NotIn' THEN NOT coalesce((e -> 'values') @> jsonb_build_array(labels -> (e ->> 'key')), false)
                WHEN 'Exists' THEN labels ? (e ->> 'key')
                WHEN 'DoesNotExist' THEN NOT (labels ? (e ->> 'key'))
                ELSE false
            END)
$$;

COMMIT;
