-- Scope policy: whether an organization's scans are held to an allow-list
-- is a property of the organization that operators see and set, instead of
-- scope_enforced, which the first scope entry set for good and which an
-- organization without entries never had (it scanned anything).
--
--   allow_list    targets must be in the organization's scope entries;
--                 with none, nothing may be scanned.
--   unrestricted  any target (no scope entry is consulted).
--
-- Existing organizations keep what they had: those that enforced their
-- scope (scope_enforced, or any entry) become allow_list, the others
-- unrestricted, so no running integration breaks. New organizations get
-- the policy their creator chooses; the API's default is allow_list
-- (store.CreateOrganization always names one). The column's default is
-- unrestricted only for rows a release before this one inserts, which
-- reads scope_enforced alone.
--
-- scope_enforced stays (expand only): this release keeps it equal to
-- "scope_policy = 'allow_list'" whenever it writes either, and reads an
-- organization as allow_list when either says so, so a replica of the
-- previous release that adds an entry (setting scope_enforced) still
-- narrows the scope for every replica.

BEGIN;

ALTER TABLE organizations ADD COLUMN scope_policy text NOT NULL DEFAULT 'unrestricted'
    CONSTRAINT organizations_scope_policy_check CHECK (scope_policy IN ('unrestricted', 'allow_list'));

UPDATE organizations o SET scope_policy = 'allow_list', scope_enforced = true
WHERE o.scope_enforced OR EXISTS (SELECT 1 FROM scope_targets st WHERE st.organization_id = o.id);

COMMIT;
