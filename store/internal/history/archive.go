// Package history is the store's history domain: what scans found and
// how it changed — an organization's assets and their graph, its threats
// with their vulnerability details, the changes between scans, and the
// threat exclusions that hide threats (see "Scan history" in
// store/doc.go). It only reads what ingestion and record_scan_history
// wrote, and keeps the exclusions: ingestion itself is worker-facing and
// stays beside the result batches (store/ingest.go), as the redrive that
// reopens a scan (reopenScanForRedrive) stays with RetryTask. It stands on
// store/internal/core and imports neither the fencing predicates nor the
// lease engine (depguard); the facade (package store) embeds an Archive so
// that callers keep calling store.Store.
package history

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// FindOrganization answers nil when the tenant sees the organization, else
// its error (the facade's GetOrganization, so a listing of a missing
// organization is refused as it was).
type FindOrganization func(ctx context.Context, tenant core.Tenant, org uuid.UUID) error

// Archive runs the history domain's verbs against PostgreSQL.
type Archive struct {
	pool             *pgxpool.Pool
	findOrganization FindOrganization
}

// New returns the archive of a pool; find checks an organization a
// listing names. The pool's lifetime is the caller's.
func New(pool *pgxpool.Pool, find FindOrganization) *Archive {
	return &Archive{pool: pool, findOrganization: find}
}

func (s *Archive) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}
