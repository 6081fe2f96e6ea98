-- threat_exclusion_for is the oldest active exclusion matching a threat:
-- every criterion an exclusion names must match (asset, a glob over the
-- asset's normalized value, external id, a glob over the title, severity),
-- globs case-insensitive.
CREATE OR REPLACE FUNCTION threat_exclusion_for(p_org uuid, p_asset uuid, p_asset_value text, p_external_id text, p_title text, p_severity text)
RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT e.id FROM threat_exclusions e
    WHERE e.organization_id = p_org AND (e.expires_at IS NULL OR e.expires_at > now())
        AND (e.asset_id IS NULL OR e.asset_id = p_asset)
        AND (e.asset_pattern IS NULL OR p_asset_value ILIKE gateway_glob_like(e.asset_pattern))
        AND (e.external_id IS NULL OR e.external_id = p_external_id)
        AND (e.title_pattern IS NULL OR p_title ILIKE gateway_glob_like(e.title_pattern))
        AND (e.severity IS NULL OR e.severity = p_severity)
    ORDER BY e.created_at, e.id LIMIT 1
$$;
