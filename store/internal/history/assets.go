package history

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Asset is an organization's asset.
type Asset struct {
	ID              uuid.UUID
	OrganizationID  uuid.UUID
	Type            string
	Value           string
	NormalizedValue string
	Details         json.RawMessage
	FirstSeenAt     time.Time
	LastSeenAt      time.Time
}

// ListAssets pages an organization's assets, newest first.
func (s *Archive) ListAssets(ctx context.Context, tenant core.Tenant, org uuid.UUID, after *core.Cursor, limit int) ([]Asset, *core.Cursor, error) {
	if err := s.findOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select("a.id, a.organization_id, a.type, a.value, a.normalized_value, a.details, a.first_seen_at, a.last_seen_at").
		From("assets a").Where(tenant.Where("a.organization_id")).Where(sq.Eq{"a.organization_id": org})
	assets, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("a.first_seen_at", "a.id", func(a Asset) core.Cursor { return core.Cursor{Time: a.FirstSeenAt, ID: a.ID} }),
		after, limit, func(r pgx.Row) (Asset, error) {
			var a Asset
			err := r.Scan(&a.ID, &a.OrganizationID, &a.Type, &a.Value, &a.NormalizedValue, &a.Details, &a.FirstSeenAt, &a.LastSeenAt)
			return a, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list assets: %w", err)
	}
	return assets, next, nil
}

// Threat is an organization's threat with its asset and detection count.
type Threat struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	AssetType      string
	AssetValue     string
	ExternalID     string
	Title          string
	Severity       string
	Details        json.RawMessage
	Detections     int
	CreatedAt      time.Time
	// ExclusionID is the active exclusion that hides the threat, if any.
	ExclusionID   *uuid.UUID
	Vulnerability *Vulnerability
}

// ListThreats pages an organization's threats, newest first. Threats an
// active exclusion matches are left out unless includeExcluded.
func (s *Archive) ListThreats(ctx context.Context, tenant core.Tenant, org uuid.UUID, includeExcluded bool, after *core.Cursor, limit int) ([]Threat, *core.Cursor, error) {
	if err := s.findOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select(`th.id, th.organization_id, a.type, a.value, th.external_id, th.title, th.severity, th.details,
			(SELECT count(*) FROM threat_detections d WHERE d.threat_id = th.id), th.created_at, x.e,
			v.threat_id IS NOT NULL, v.cve_ids, v.cvss_vector, v.cvss_score::float8, v.cwe_ids, v.reference_urls, v.remediation`).
		From("threats th").Join("assets a ON a.id = th.asset_id").
		JoinClause(`CROSS JOIN LATERAL (SELECT threat_exclusion_for(th.organization_id, th.asset_id, a.normalized_value,
			th.external_id, th.title, th.severity) AS e) x`).
		LeftJoin("vulnerability_details v ON v.threat_id = th.id").
		Where(tenant.Where("th.organization_id")).Where(sq.Eq{"th.organization_id": org})
	if !includeExcluded {
		q = q.Where("x.e IS NULL")
	}
	threats, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("th.created_at", "th.id", func(t Threat) core.Cursor { return core.Cursor{Time: t.CreatedAt, ID: t.ID} }),
		after, limit, scanThreat)
	if err != nil {
		return nil, nil, fmt.Errorf("list threats: %w", err)
	}
	return threats, next, nil
}

// scanThreat reads a row of ListThreats.
func scanThreat(r pgx.Row) (Threat, error) {
	var t Threat
	var hasVuln bool
	var cves, cwes, refs []string
	var vector, remediation *string
	var score *float64
	err := r.Scan(&t.ID, &t.OrganizationID, &t.AssetType, &t.AssetValue, &t.ExternalID, &t.Title, &t.Severity, &t.Details,
		&t.Detections, &t.CreatedAt, &t.ExclusionID, &hasVuln, &cves, &vector, &score, &cwes, &refs, &remediation)
	if hasVuln {
		t.Vulnerability = &Vulnerability{CVEIDs: cves, CVSSScore: score, CWEIDs: cwes, References: refs}
		if vector != nil {
			t.Vulnerability.CVSSVector = *vector
		}
		if remediation != nil {
			t.Vulnerability.Remediation = *remediation
		}
	}
	return t, err
}

// Vulnerability is what a threat record says of a vulnerability
// (vulnerability_details).
type Vulnerability struct {
	CVEIDs      []string `json:"cve_ids,omitempty"`
	CVSSVector  string   `json:"cvss_vector,omitempty"`
	CVSSScore   *float64 `json:"cvss_score,omitempty"`
	CWEIDs      []string `json:"cwe_ids,omitempty"`
	References  []string `json:"references,omitempty"`
	Remediation string   `json:"remediation,omitempty"`
}

// AssetEdge is a relation between two of an organization's assets.
type AssetEdge struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	From, To       AssetRef
	Relation       string
	FirstSeenAt    time.Time
	LastSeenAt     time.Time
}

// AssetRef names an asset.
type AssetRef struct {
	ID          uuid.UUID
	Type, Value string
}

// ListAssetEdges pages an organization's asset graph, newest first: every
// edge, or those from or to one asset.
func (s *Archive) ListAssetEdges(ctx context.Context, tenant core.Tenant, org uuid.UUID, asset *uuid.UUID, after *core.Cursor, limit int) ([]AssetEdge, *core.Cursor, error) {
	if err := s.findOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select("e.id, e.organization_id, f.id, f.type, f.value, e.relation, t.id, t.type, t.value, e.first_seen_at, e.last_seen_at").
		From("asset_edges e").Join("assets f ON f.id = e.from_asset_id").Join("assets t ON t.id = e.to_asset_id").
		Where(tenant.Where("e.organization_id")).Where(sq.Eq{"e.organization_id": org})
	if asset != nil {
		q = q.Where(sq.Or{sq.Eq{"e.from_asset_id": *asset}, sq.Eq{"e.to_asset_id": *asset}})
	}
	edges, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("e.first_seen_at", "e.id", func(e AssetEdge) core.Cursor { return core.Cursor{Time: e.FirstSeenAt, ID: e.ID} }),
		after, limit, func(r pgx.Row) (AssetEdge, error) {
			var e AssetEdge
			err := r.Scan(&e.ID, &e.OrganizationID, &e.From.ID, &e.From.Type, &e.From.Value, &e.Relation,
				&e.To.ID, &e.To.Type, &e.To.Value, &e.FirstSeenAt, &e.LastSeenAt)
			return e, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list asset edges: %w", err)
	}
	return edges, next, nil
}
