package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// A threat exclusion suppresses the threats it matches: every criterion it
// names must match — the asset, a glob over the asset's normalized value,
// the external id, a glob over the title, the severity (globs: * any run, ?
// one character, case-insensitive). Until it expires, the threats it
// matches are hidden from the threat list (shown, flagged, on request), and
// detections are still recorded, flagged with the exclusion that matched
// them (threat_exclusion_for, migration 000022).

// ThreatExclusion is one suppression rule.
type ThreatExclusion struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	AssetID        *uuid.UUID
	AssetPattern   *string
	ExternalID     *string
	TitlePattern   *string
	Severity       *string
	Reason         string
	ExpiresAt      *time.Time
	CreatedBy      *uuid.UUID
	CreatedAt      time.Time
}

// ThreatExclusionParams is a new exclusion; at least one criterion.
type ThreatExclusionParams struct {
	AssetID      *uuid.UUID
	AssetPattern *string
	ExternalID   *string
	TitlePattern *string
	Severity     *string
	Reason       string
	ExpiresAt    *time.Time
	// TokenID is the API token that creates it (its creator).
	TokenID *uuid.UUID
}

var severities = []string{"info", "low", "medium", "high", "critical"}

func (p ThreatExclusionParams) check() error {
	bad := func(why problem.Text) error { return problem.Wrap(core.ErrInvalid, why) }
	for _, s := range []*string{p.AssetPattern, p.ExternalID, p.TitlePattern} {
		if s != nil && *s == "" {
			return bad("an exclusion's patterns and external id must not be empty")
		}
	}
	switch {
	case p.AssetID == nil && p.AssetPattern == nil && p.ExternalID == nil && p.TitlePattern == nil && p.Severity == nil:
		return bad("an exclusion needs at least one of asset_id, asset_pattern, external_id, title_pattern and severity")
	case strings.TrimSpace(p.Reason) == "":
		return bad("an exclusion needs a reason")
	case p.Severity != nil && !slices.Contains(severities, *p.Severity):
		return bad("severity must be info, low, medium, high or critical")
	}
	return nil
}

const exclusionColumns = `e.id, e.organization_id, e.asset_id, e.asset_pattern, e.external_id, e.title_pattern, e.severity,
	e.reason, e.expires_at, e.created_by_token_id, e.created_at`

func scanExclusion(r pgx.Row) (ThreatExclusion, error) {
	var e ThreatExclusion
	err := r.Scan(&e.ID, &e.OrganizationID, &e.AssetID, &e.AssetPattern, &e.ExternalID, &e.TitlePattern, &e.Severity,
		&e.Reason, &e.ExpiresAt, &e.CreatedBy, &e.CreatedAt)
	return e, err
}

// CreateThreatExclusion adds an exclusion to an organization. Its asset,
// when named, must be the organization's.
func (s *Archive) CreateThreatExclusion(ctx context.Context, tenant core.Tenant, org uuid.UUID, p ThreatExclusionParams) (ThreatExclusion, error) {
	if !tenant.Allows(org) {
		return ThreatExclusion{}, core.ErrNotFound
	}
	if err := p.check(); err != nil {
		return ThreatExclusion{}, err
	}
	var e ThreatExclusion
	err := s.inTx(ctx, "create threat exclusion", func(tx pgx.Tx) error {
		var err error
		e, err = scanExclusion(tx.QueryRow(ctx, `
			INSERT INTO threat_exclusions AS e (organization_id, asset_id, asset_pattern, external_id, title_pattern, severity,
				reason, expires_at, created_by_token_id)
			SELECT o.id, $2, $3, $4, $5, $6, $7, $8, $9 FROM organizations o
			WHERE o.id = $1 AND ($2::uuid IS NULL OR EXISTS (SELECT 1 FROM assets a WHERE a.id = $2 AND a.organization_id = o.id))
			RETURNING `+exclusionColumns,
			org, p.AssetID, p.AssetPattern, p.ExternalID, p.TitlePattern, p.Severity, p.Reason, p.ExpiresAt, p.TokenID))
		if errors.Is(err, pgx.ErrNoRows) {
			if err := s.findOrganization(ctx, tenant, org); err != nil {
				return err
			}
			return problem.Wrap(core.ErrInvalid, "asset_id: the organization has no such asset")
		}
		if err != nil {
			return fmt.Errorf("create threat exclusion: %w", err)
		}
		core.AuditTarget(ctx, e.ID, &e.OrganizationID)
		return nil
	})
	if err != nil {
		return ThreatExclusion{}, err
	}
	return e, nil
}

// ListThreatExclusions pages an organization's exclusions, newest first,
// expired ones included.
func (s *Archive) ListThreatExclusions(ctx context.Context, tenant core.Tenant, org uuid.UUID, after *core.Cursor, limit int) ([]ThreatExclusion, *core.Cursor, error) {
	if err := s.findOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	q := core.Psql.Select(exclusionColumns).From("threat_exclusions e").
		Where(tenant.Where("e.organization_id")).Where(sq.Eq{"e.organization_id": org})
	list, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("e.created_at", "e.id", func(e ThreatExclusion) core.Cursor { return core.Cursor{Time: e.CreatedAt, ID: e.ID} }),
		after, limit, scanExclusion)
	if err != nil {
		return nil, nil, fmt.Errorf("list threat exclusions: %w", err)
	}
	return list, next, nil
}

// DeleteThreatExclusion removes an exclusion: the threats it hid show
// again; detections it flagged stay flagged.
func (s *Archive) DeleteThreatExclusion(ctx context.Context, tenant core.Tenant, org, id uuid.UUID) (ThreatExclusion, error) {
	var e ThreatExclusion
	err := s.inTx(ctx, "delete threat exclusion", func(tx pgx.Tx) error {
		var err error
		e, err = scanExclusion(tx.QueryRow(ctx, `DELETE FROM threat_exclusions e
			WHERE e.id = $1 AND e.organization_id = $2 AND `+core.InTenant("e.organization_id", "$3")+`
			RETURNING `+exclusionColumns, id, org, tenant.Arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete threat exclusion: %w", err)
		}
		core.AuditTarget(ctx, e.ID, &e.OrganizationID)
		return nil
	})
	if err != nil {
		return ThreatExclusion{}, err
	}
	return e, nil
}
