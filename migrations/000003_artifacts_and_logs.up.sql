-- Artifact upload sessions that end in files, and capped attempt logs.

BEGIN;

-- Files know the task and attempt whose upload created them.
ALTER TABLE files
    ADD COLUMN task_id    uuid NULL REFERENCES worker_tasks(id) ON DELETE SET NULL,
    ADD COLUMN attempt_id uuid NULL REFERENCES worker_task_attempts(id) ON DELETE SET NULL;
CREATE INDEX files_task_idx ON files (task_id, created_at) WHERE task_id IS NOT NULL;

CREATE INDEX worker_artifact_uploads_attempt_idx ON worker_artifact_uploads (attempt_id);

-- An attempt's log position: log_offset is how many bytes of its stream
-- the worker has sent and the gateway accepted (the offset the next chunk
-- must start at); log_stored is how many bytes are kept, at most the cap
-- plus one truncation marker.
ALTER TABLE worker_task_attempts
    ADD COLUMN log_offset    bigint NOT NULL DEFAULT 0,
    ADD COLUMN log_stored    bigint NOT NULL DEFAULT 0,
    ADD COLUMN log_truncated boolean NOT NULL DEFAULT false;

-- Chunks of an attempt's log, keyed by their byte offset in the stored text.
CREATE TABLE attempt_logs (
    attempt_id  uuid NOT NULL REFERENCES worker_task_attempts(id) ON DELETE CASCADE,
    byte_offset bigint NOT NULL CHECK (byte_offset >= 0),
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, byte_offset)
);

COMMIT;
