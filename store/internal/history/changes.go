package history

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	sq "github.com/Masterminds/squirrel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// Asset history. Ingestion records what each scan observed of each asset
// (scan_assets.details, merged over the scan's batches). When a scan
// completes, record_scan_history (migration 000023) snapshots that into
// asset_scan_snapshots and, when every job of the scan completed, compares
// it with the latest earlier-created such scan of the same scope key
// (compare_scan_history), writing asset_scan_changes — in the transaction
// that completes the scan, keyed (scan, asset, kind), so a retried batch, a
// second attempt or a scan completed again never adds a change twice. It
// then compares the next scan of the scope key again, whose earlier scan
// may now be this one (scans can complete out of order), and it holds a
// per-scope-key advisory lock so two scans completing at once see each
// other. A scan with a failed or cancelled job saw only part of its scope:
// it is neither compared nor compared with, until a redrive completes it.
// The first scan of a scope key is the baseline and has no changes (no
// flood of "appeared"). exposure_changes is the organization's timeline of
// them all.

// Change kinds.
const (
	ChangeAssetAppeared      = "asset_appeared"
	ChangeAssetDisappeared   = "asset_disappeared"
	ChangePortOpened         = "port_opened"
	ChangePortClosed         = "port_closed"
	ChangeCertificateChanged = "certificate_changed"
	ChangeHTTPStatusChanged  = "http_status_changed"
)

// ChangeKinds lists every change kind.
var ChangeKinds = []string{ChangeAssetAppeared, ChangeAssetDisappeared, ChangePortOpened, ChangePortClosed,
	ChangeCertificateChanged, ChangeHTTPStatusChanged}

// AssetChange is one change between two completed scans.
type AssetChange struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	ScanID         uuid.UUID
	PreviousScanID *uuid.UUID
	AssetID        *uuid.UUID
	AssetType      string
	AssetValue     string
	Kind           string
	Before         json.RawMessage
	After          json.RawMessage
	DetectedAt     time.Time
}

// ChangeFilter narrows a page of changes: by kinds, and to those detected
// at or after Since and before Until.
type ChangeFilter struct {
	Kinds []string
	Since *time.Time
	Until *time.Time
	After *core.Cursor
	Limit int
}

func (f ChangeFilter) check() error {
	for _, k := range f.Kinds {
		if !slices.Contains(ChangeKinds, k) {
			return problem.Wrap(core.ErrInvalid, problem.Text("unknown change kind "+k))
		}
	}
	return nil
}

// ListScanChanges pages a scan's changes against the scan before it, newest
// first.
func (s *Archive) ListScanChanges(ctx context.Context, tenant core.Tenant, scanID uuid.UUID, f ChangeFilter) ([]AssetChange, *core.Cursor, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM scans s WHERE s.id = $1 AND `+core.InTenant("s.organization_id", "$2")+`)`,
		scanID, tenant.Arg()).Scan(&exists); err != nil {
		return nil, nil, fmt.Errorf("list scan changes: %w", err)
	}
	if !exists {
		return nil, nil, core.ErrNotFound
	}
	return s.listChanges(ctx, tenant, sq.Eq{"c.scan_id": scanID}, f)
}

// ListExposureChanges pages an organization's exposure-change timeline,
// newest first.
func (s *Archive) ListExposureChanges(ctx context.Context, tenant core.Tenant, org uuid.UUID, f ChangeFilter) ([]AssetChange, *core.Cursor, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	if err := s.findOrganization(ctx, tenant, org); err != nil {
		return nil, nil, err
	}
	return s.listChanges(ctx, tenant, sq.Eq{"c.organization_id": org}, f)
}

// listChanges pages the changes of one scan or organization (of, which the
// caller has found in the tenant), newest first.
func (s *Archive) listChanges(ctx context.Context, tenant core.Tenant, of sq.Sqlizer, f ChangeFilter) ([]AssetChange, *core.Cursor, error) {
	q := core.Psql.Select(`c.id, c.organization_id, c.scan_id, c.previous_scan_id, c.asset_id, c.asset_type, c.asset_value,
			c.kind, c.before, c.after, c.detected_at`).
		From("exposure_changes c").Where(tenant.Where("c.organization_id")).Where(of)
	if len(f.Kinds) > 0 {
		q = q.Where("c.kind = ANY(?)", f.Kinds)
	}
	if f.Since != nil {
		q = q.Where("c.detected_at >= ?", *f.Since)
	}
	if f.Until != nil {
		q = q.Where("c.detected_at < ?", *f.Until)
	}
	changes, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("c.detected_at", "c.id", func(c AssetChange) core.Cursor { return core.Cursor{Time: c.DetectedAt, ID: c.ID} }),
		f.After, f.Limit, func(r pgx.Row) (AssetChange, error) {
			var c AssetChange
			err := r.Scan(&c.ID, &c.OrganizationID, &c.ScanID, &c.PreviousScanID, &c.AssetID, &c.AssetType, &c.AssetValue,
				&c.Kind, &c.Before, &c.After, &c.DetectedAt)
			return c, err
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list changes: %w", err)
	}
	return changes, next, nil
}
