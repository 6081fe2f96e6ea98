-- worker_labels_match says whether a worker's labels satisfy a selector:
-- every match_labels pair is present, and every expression holds — In: the
-- label is present with one of the values; NotIn: absent or none of them;
-- Exists; DoesNotExist (Kubernetes semantics).
CREATE OR REPLACE FUNCTION worker_labels_match(labels jsonb, selector jsonb) RETURNS boolean
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
