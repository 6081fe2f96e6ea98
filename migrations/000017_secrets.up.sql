-- Secrets: named, per organization, write-only through the API. The
-- database holds ciphertext only: each value is sealed with AES-256-GCM
-- under a data key of its own, and the data key is wrapped by a
-- key-encryption key the gateway reads from a file or its environment
-- (internal/secretbox). kek_id names the key that wrapped it, so a gateway
-- holding another key says so instead of failing obscurely; the seals'
-- associated data is (organization, id, name, version), so a row copied
-- elsewhere does not open.

BEGIN;

CREATE TABLE secrets (
    id              uuid PRIMARY KEY DEFAULT gateway_uuid_v7(),
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    -- Every replace adds one, and the seals bind it.
    version         integer NOT NULL DEFAULT 1 CHECK (version > 0),
    ciphertext      bytea NOT NULL,
    wrapped_key     bytea NOT NULL,
    kek_id          text NOT NULL,
    -- Limits: the task types that may receive it (NULL: every type), and a
    -- label selector a worker must match (NULL: every worker).
    task_types      text[] NULL,
    worker_labels   jsonb NULL CHECK (worker_labels IS NULL OR jsonb_typeof(worker_labels) = 'object'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organization_id, name)
);

-- A task's references, by name; resolved when it is leased. NULL for the
-- tasks that have none, so adding the column writes no row.
ALTER TABLE worker_tasks ADD COLUMN secret_refs text[] NULL;

COMMIT;
