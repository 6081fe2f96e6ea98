-- gateway_uuid_v7 is a time-ordered id (UUID version 7) in one SQL
-- expression (PostgreSQL 15 has no uuidv7()): the planner inlines it into
-- the INSERT, so it costs a few builtin calls per row and no function call.
CREATE OR REPLACE FUNCTION gateway_uuid_v7() RETURNS uuid
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
