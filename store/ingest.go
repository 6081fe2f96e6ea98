package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// NormalizeAssetValue is the canonical form assets deduplicate by:
// hostnames lowercased without a trailing dot, IP addresses in their
// canonical text form, URLs with lowercased scheme and host, host:port pairs
// with a normalised host; anything else trimmed.
func NormalizeAssetValue(assetType, value string) string {
	value = strings.TrimSpace(value)
	switch assetType {
	case "hostname", "domain":
		return strings.TrimSuffix(strings.ToLower(value), ".")
	case "ip":
		if ip := net.ParseIP(value); ip != nil {
			return ip.String()
		}
	case "port":
		if host, port, err := net.SplitHostPort(value); err == nil {
			if ip := net.ParseIP(host); ip != nil {
				host = ip.String()
			} else {
				host = strings.TrimSuffix(strings.ToLower(host), ".")
			}
			return net.JoinHostPort(host, port)
		}
	case "url":
		if u, err := url.Parse(value); err == nil && u.Host != "" {
			u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
			if u.Path == "" {
				u.Path = "/"
			}
			return u.String()
		}
	}
	return value
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

// ingest upserts a batch's assets and threats through their natural keys,
// records which scan found each asset and which scan job detected each
// threat. Rows are written in sorted key order, so concurrent batches lock
// them in the same order. Returns how many asset and threat records it took.
func ingest(ctx context.Context, tx pgx.Tx, target ingestTarget, records []ResultRecord) (assetCount, threatCount int, err error) {
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
	for _, r := range records {
		switch r.Kind {
		case "asset":
			addAsset(r.AssetType, r.AssetValue, r.Details)
			assetCount++
		case "threat":
			addAsset(r.AssetType, r.AssetValue, nil)
			threatCount++
		}
	}
	if len(assets) == 0 {
		return assetCount, threatCount, nil
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
		return 0, 0, fmt.Errorf("upsert assets: %w", err)
	}
	assetIDs := map[assetKey]uuid.UUID{}
	var ids []uuid.UUID
	for assetRows.Next() {
		var id uuid.UUID
		var k assetKey
		if err := assetRows.Scan(&id, &k.typ, &k.normalized); err != nil {
			assetRows.Close()
			return 0, 0, err
		}
		assetIDs[k] = id
		ids = append(ids, id)
	}
	assetRows.Close()
	if err := assetRows.Err(); err != nil {
		return 0, 0, fmt.Errorf("upsert assets: %w", err)
	}
	if target.scanID != nil {
		if _, err := tx.Exec(ctx, `INSERT INTO scan_assets (scan_id, asset_id) SELECT $1, unnest($2::uuid[]) ON CONFLICT DO NOTHING`,
			*target.scanID, ids); err != nil {
			return 0, 0, fmt.Errorf("record scan assets: %w", err)
		}
	}
	if threatCount == 0 {
		return assetCount, threatCount, nil
	}
	return assetCount, threatCount, ingestThreats(ctx, tx, target, records, assetIDs)
}

func ingestThreats(ctx context.Context, tx pgx.Tx, target ingestTarget, records []ResultRecord, assetIDs map[assetKey]uuid.UUID) error {
	type threatRow struct {
		assetID                     uuid.UUID
		externalID, title, severity string
		details                     json.RawMessage
	}
	byKey := map[[2]string]*threatRow{}
	for _, r := range records {
		if r.Kind != "threat" {
			continue
		}
		assetID := assetIDs[assetKey{r.AssetType, NormalizeAssetValue(r.AssetType, r.AssetValue)}]
		key := [2]string{assetID.String(), threatKey(r)}
		severity := cmp.Or(r.Severity, "info")
		details := r.Details
		if len(details) == 0 {
			details = json.RawMessage(`{}`)
		}
		byKey[key] = &threatRow{assetID: assetID, externalID: key[1], title: r.Title, severity: severity, details: details}
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
		RETURNING id`,
		target.organizationID, assetCol, externalCol, titleCol, severityCol, detailsCol)
	if err != nil {
		return fmt.Errorf("upsert threats: %w", err)
	}
	threatIDs, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("upsert threats: %w", err)
	}
	if target.scanJobID == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO threat_detections (threat_id, scan_job_id)
		SELECT unnest($1::uuid[]), $2 ON CONFLICT DO NOTHING`, threatIDs, *target.scanJobID); err != nil {
		return fmt.Errorf("record detections: %w", err)
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
