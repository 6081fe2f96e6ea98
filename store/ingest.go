package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/scanscope"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// NormalizeAssetValue is the canonical form assets deduplicate by
// (scanscope.NormalizeAssetValue).
func NormalizeAssetValue(assetType, value string) string {
	return scanscope.NormalizeAssetValue(assetType, value)
}

// threatKey is how a threat without an external id still deduplicates: by
// its title, so a second attempt of the same job reporting the same finding
// updates one row instead of adding another.
func threatKey(r ResultRecord) string {
	if r.ExternalID != "" {
		return r.ExternalID
	}
	sum := sha256.Sum256([]byte(r.Title))
	return "title:" + hex.EncodeToString(sum[:8])
}

type assetKey struct{ typ, normalized string }

// ingestCounts is what a batch's ingestion took, by kind.
type ingestCounts struct {
	assets, threats, edges, outOfScope int
}

// outOfScopeRecords marks the records about something outside the
// organization's scan scope (an edge when either end is): they are kept in
// the batch, flagged, and never become assets. nil when none is.
func outOfScopeRecords(ts targetscope.Scope, records []ResultRecord) []bool {
	if !ts.Enforced() {
		return nil
	}
	var out []bool
	for i, r := range records {
		var in bool
		switch r.Kind {
		case "asset", "threat":
			in = ts.AllowsAsset(r.AssetType, r.AssetValue)
		case "edge":
			in = ts.AllowsAsset(r.AssetType, r.AssetValue) && ts.AllowsAsset(r.TargetType, r.TargetValue)
		default:
			continue
		}
		if !in {
			if out == nil {
				out = make([]bool, len(records))
			}
			out[i] = true
		}
	}
	return out
}

// ingest upserts a batch's assets, edges and threats through their natural
// keys, records which scan found each asset (with what the scan saw of it)
// and which scan job detected each threat (flagged when an exclusion
// matches it). Records marked in skip are out of scope and left out. Rows
// are written in sorted key order, so concurrent batches lock them in the
// same order; each table takes one statement per batch.
func ingest(ctx context.Context, tx pgx.Tx, target ingestTarget, records []ResultRecord, skip []bool) (n ingestCounts, err error) {
	type assetRow struct {
		key     assetKey
		value   string
		details json.RawMessage
	}
	assets := map[assetKey]*assetRow{}
	addAsset := func(typ, value string, details json.RawMessage) assetKey {
		k := assetKey{typ, NormalizeAssetValue(typ, value)}
		row, ok := assets[k]
		if !ok {
			row = &assetRow{key: k, value: value, details: json.RawMessage(`{}`)}
			assets[k] = row
		}
		if len(details) > 0 {
			row.details = mergeObjects(row.details, details)
		}
		return k
	}
	for i, r := range records {
		if skip != nil && skip[i] {
			n.outOfScope++
			continue
		}
		switch r.Kind {
		case "asset":
			addAsset(r.AssetType, r.AssetValue, r.Details)
			n.assets++
		case "threat":
			addAsset(r.AssetType, r.AssetValue, nil)
			n.threats++
		case "edge":
			addAsset(r.AssetType, r.AssetValue, nil)
			addAsset(r.TargetType, r.TargetValue, nil)
			n.edges++
		}
	}
	if len(assets) == 0 {
		return n, nil
	}

	rows := make([]*assetRow, 0, len(assets))
	for _, r := range assets {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *assetRow) int {
		return cmp.Or(cmp.Compare(a.key.typ, b.key.typ), cmp.Compare(a.key.normalized, b.key.normalized))
	})
	var types, values, normalized []string
	var details []string
	for _, r := range rows {
		types, values, normalized = append(types, r.key.typ), append(values, r.value), append(normalized, r.key.normalized)
		details = append(details, string(r.details))
	}
	assetRows, err := tx.Query(ctx, `
		INSERT INTO assets AS a (organization_id, type, value, normalized_value, details)
		SELECT $1, x.t, x.v, x.n, x.d FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[]) AS x(t, v, n, d)
		ON CONFLICT (organization_id, type, normalized_value) DO UPDATE SET
			last_seen_at = now(), details = a.details || EXCLUDED.details
		RETURNING id, type, normalized_value`,
		target.organizationID, types, values, normalized, details)
	if err != nil {
		return n, fmt.Errorf("upsert assets: %w", err)
	}
	assetIDs := map[assetKey]uuid.UUID{}
	for assetRows.Next() {
		var id uuid.UUID
		var k assetKey
		if err := assetRows.Scan(&id, &k.typ, &k.normalized); err != nil {
			assetRows.Close()
			return n, err
		}
		assetIDs[k] = id
	}
	assetRows.Close()
	if err := assetRows.Err(); err != nil {
		return n, fmt.Errorf("upsert assets: %w", err)
	}
	if target.scanID != nil {
		// What this scan saw of each asset, for its history; rows in the
		// same (sorted) order as the assets.
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = assetIDs[r.key]
		}
		if _, err := tx.Exec(ctx, `INSERT INTO scan_assets AS sa (scan_id, asset_id, details)
			SELECT $1, x.a, x.d FROM unnest($2::uuid[], $3::jsonb[]) AS x(a, d)
			ON CONFLICT (scan_id, asset_id) DO UPDATE SET details = sa.details || EXCLUDED.details
				WHERE NOT sa.details @> EXCLUDED.details`,
			*target.scanID, ids, details); err != nil {
			return n, fmt.Errorf("record scan assets: %w", err)
		}
	}
	if n.edges > 0 {
		if err := ingestEdges(ctx, tx, target, records, skip, assetIDs); err != nil {
			return n, err
		}
	}
	if n.threats == 0 {
		return n, nil
	}
	return n, ingestThreats(ctx, tx, target, records, skip, assetIDs)
}

// ingestEdges writes a batch's edges, once each (a repeat moves its
// last_seen_at).
func ingestEdges(ctx context.Context, tx pgx.Tx, target ingestTarget, records []ResultRecord, skip []bool, assetIDs map[assetKey]uuid.UUID) error {
	type edge struct {
		from, to uuid.UUID
		relation string
	}
	seen := map[edge]bool{}
	var edges []edge
	for i, r := range records {
		if r.Kind != "edge" || skip != nil && skip[i] {
			continue
		}
		e := edge{
			from:     assetIDs[assetKey{r.AssetType, NormalizeAssetValue(r.AssetType, r.AssetValue)}],
			to:       assetIDs[assetKey{r.TargetType, NormalizeAssetValue(r.TargetType, r.TargetValue)}],
			relation: r.Relation,
		}
		if !seen[e] {
			seen[e] = true
			edges = append(edges, e)
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.from.String(), b.from.String()), cmp.Compare(a.relation, b.relation), cmp.Compare(a.to.String(), b.to.String()))
	})
	from, to, relation := make([]uuid.UUID, len(edges)), make([]uuid.UUID, len(edges)), make([]string, len(edges))
	for i, e := range edges {
		from[i], to[i], relation[i] = e.from, e.to, e.relation
	}
	if _, err := tx.Exec(ctx, `INSERT INTO asset_edges AS e (organization_id, from_asset_id, relation, to_asset_id)
		SELECT $1, x.f, x.r, x.t FROM unnest($2::uuid[], $3::text[], $4::uuid[]) AS x(f, r, t)
		ON CONFLICT (from_asset_id, relation, to_asset_id) DO UPDATE SET last_seen_at = now()`,
		target.organizationID, from, relation, to); err != nil {
		return fmt.Errorf("upsert asset edges: %w", err)
	}
	return nil
}

func ingestThreats(ctx context.Context, tx pgx.Tx, target ingestTarget, records []ResultRecord, skip []bool, assetIDs map[assetKey]uuid.UUID) error {
	type threatRow struct {
		assetID                     uuid.UUID
		externalID, title, severity string
		details                     json.RawMessage
		vulnerability               *Vulnerability
	}
	byKey := map[[2]string]*threatRow{}
	for i, r := range records {
		if r.Kind != "threat" || skip != nil && skip[i] {
			continue
		}
		assetID := assetIDs[assetKey{r.AssetType, NormalizeAssetValue(r.AssetType, r.AssetValue)}]
		key := [2]string{assetID.String(), threatKey(r)}
		severity := cmp.Or(r.Severity, "info")
		details := r.Details
		if len(details) == 0 {
			details = json.RawMessage(`{}`)
		}
		byKey[key] = &threatRow{assetID: assetID, externalID: key[1], title: r.Title, severity: severity, details: details,
			vulnerability: r.Vulnerability}
	}
	threats := make([]*threatRow, 0, len(byKey))
	for _, t := range byKey {
		threats = append(threats, t)
	}
	slices.SortFunc(threats, func(a, b *threatRow) int {
		return cmp.Or(cmp.Compare(a.assetID.String(), b.assetID.String()), cmp.Compare(a.externalID, b.externalID))
	})
	var assetCol []uuid.UUID
	var externalCol, titleCol, severityCol, detailsCol []string
	for _, t := range threats {
		assetCol = append(assetCol, t.assetID)
		externalCol, titleCol = append(externalCol, t.externalID), append(titleCol, t.title)
		severityCol, detailsCol = append(severityCol, t.severity), append(detailsCol, string(t.details))
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO threats AS th (organization_id, asset_id, external_id, title, severity, details)
		SELECT $1, x.a, x.e, x.t, x.s, x.d
		FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::jsonb[]) AS x(a, e, t, s, d)
		ON CONFLICT (organization_id, asset_id, external_id) WHERE external_id <> '' DO UPDATE SET
			title = EXCLUDED.title, severity = EXCLUDED.severity, details = th.details || EXCLUDED.details, updated_at = now()
		RETURNING id, asset_id, external_id`,
		target.organizationID, assetCol, externalCol, titleCol, severityCol, detailsCol)
	if err != nil {
		return fmt.Errorf("upsert threats: %w", err)
	}
	var threatIDs []uuid.UUID
	var vulnIDs []uuid.UUID
	var vulns []*Vulnerability
	var id, assetID uuid.UUID
	var externalID string
	if _, err := pgx.ForEachRow(rows, []any{&id, &assetID, &externalID}, func() error {
		threatIDs = append(threatIDs, id)
		if t := byKey[[2]string{assetID.String(), externalID}]; t != nil && t.vulnerability != nil {
			vulnIDs, vulns = append(vulnIDs, id), append(vulns, t.vulnerability)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("upsert threats: %w", err)
	}
	if err := ingestVulnerabilities(ctx, tx, vulnIDs, vulns); err != nil {
		return err
	}
	if target.scanJobID == nil {
		return nil
	}
	// A detection is flagged with the exclusion that matches its threat as
	// it is detected; it is recorded all the same.
	if _, err := tx.Exec(ctx, `INSERT INTO threat_detections (threat_id, scan_job_id, excluded, exclusion_id)
		SELECT th.id, $2, x.e IS NOT NULL, x.e
		FROM threats th JOIN assets a ON a.id = th.asset_id
		CROSS JOIN LATERAL (SELECT threat_exclusion_for(th.organization_id, th.asset_id, a.normalized_value,
			th.external_id, th.title, th.severity) AS e) x
		WHERE th.id = ANY($1::uuid[])
		ORDER BY th.id
		ON CONFLICT DO NOTHING`, threatIDs, *target.scanJobID); err != nil {
		return fmt.Errorf("record detections: %w", err)
	}
	return nil
}

// ingestVulnerabilities upserts vulnerability details (vulns[i] of
// threat ids[i]), in threat id order.
func ingestVulnerabilities(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, vulns []*Vulnerability) error {
	if len(ids) == 0 {
		return nil
	}
	docs := make([]string, len(ids))
	for i, v := range vulns {
		doc, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("vulnerability details: %w", err)
		}
		docs[i] = string(doc)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO vulnerability_details AS v (threat_id, cve_ids, cvss_vector, cvss_score, cwe_ids, reference_urls, remediation)
		SELECT x.t,
			ARRAY(SELECT jsonb_array_elements_text(coalesce(x.d->'cve_ids', '[]'::jsonb))),
			coalesce(x.d->>'cvss_vector', ''), (x.d->>'cvss_score')::numeric,
			ARRAY(SELECT jsonb_array_elements_text(coalesce(x.d->'cwe_ids', '[]'::jsonb))),
			ARRAY(SELECT jsonb_array_elements_text(coalesce(x.d->'references', '[]'::jsonb))),
			coalesce(x.d->>'remediation', '')
		FROM unnest($1::uuid[], $2::jsonb[]) AS x(t, d)
		ORDER BY x.t
		ON CONFLICT (threat_id) DO UPDATE SET cve_ids = EXCLUDED.cve_ids, cvss_vector = EXCLUDED.cvss_vector,
			cvss_score = EXCLUDED.cvss_score, cwe_ids = EXCLUDED.cwe_ids, reference_urls = EXCLUDED.reference_urls,
			remediation = EXCLUDED.remediation, updated_at = now()`, ids, docs); err != nil {
		return fmt.Errorf("upsert vulnerability details: %w", err)
	}
	return nil
}

// mergeObjects overlays JSON object b on a (both objects; a non-object b
// replaces a).
func mergeObjects(a, b json.RawMessage) json.RawMessage {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return b
	}
	for k, v := range mb {
		ma[k] = v
	}
	out, err := json.Marshal(ma)
	if err != nil {
		return b
	}
	return out
}
