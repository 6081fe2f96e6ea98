-- Who may put a worker to work for an organization.
--
-- A worker runs inside somebody's network: the organization that owns that
-- network decides which organizations' tasks it may run. A worker created
-- by an organization-scoped admin is owned by that organization; a worker
-- created by an unscoped admin belongs to the platform unless it names an
-- owner. An organization may assign a worker it owns, one the owner granted
-- it, or one already assigned to it; everything else takes an unscoped admin.
BEGIN;

ALTER TABLE workers ADD COLUMN owner_organization_id uuid NULL REFERENCES organizations(id) ON DELETE SET NULL;
CREATE INDEX workers_owner_idx ON workers (owner_organization_id, created_at DESC, id DESC)
    WHERE owner_organization_id IS NOT NULL;

-- An owner's explicit permission for another organization to assign its worker.
CREATE TABLE worker_grants (
    worker_id       uuid NOT NULL REFERENCES workers(id) ON DELETE CASCADE,
    organization_id uuid NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    granted_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, organization_id)
);
CREATE INDEX worker_grants_organization_idx ON worker_grants (organization_id, worker_id);

-- An assignment an unscoped admin removed (typically for a security reason)
-- can be restored only by an unscoped admin, whatever grants exist.
ALTER TABLE organization_workers ADD COLUMN removed_by_platform boolean NOT NULL DEFAULT false;

COMMIT;
