-- scan_job_output is a job's summary: records by kind over its task's
-- persisted batches (of every attempt), and the artifacts its attempts
-- committed.
CREATE OR REPLACE FUNCTION scan_job_output(p_task uuid) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'records', (SELECT coalesce(jsonb_object_agg(k.key, k.n), '{}'::jsonb) FROM (
            SELECT e.key, sum(e.value::bigint) AS n
            FROM worker_result_batches b CROSS JOIN LATERAL jsonb_each_text(b.record_kinds) e
            WHERE b.task_id = p_task AND b.status = 'persisted' AND b.record_kinds IS NOT NULL
            GROUP BY e.key) k),
        'artifact_ids', (SELECT coalesce(jsonb_agg(u.file_id ORDER BY u.committed_at, u.file_id), '[]'::jsonb)
            FROM worker_artifact_uploads u WHERE u.task_id = p_task AND u.file_id IS NOT NULL))
$$;
