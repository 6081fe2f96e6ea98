// Package schedules is the store's schedules domain: a schedule's
// versions, its slots and their policies, its history of fires, the claim
// that fires due slots on any replica (fire.go, and its batched fast path
// fire_batch.go), manual runs, and the limits on how often and how many
// (limits.go) — see "Schedules" in store/doc.go. A fire creates its scan or
// task through store/internal/work, the same creation as the API's. It
// stands on store/internal/core and imports neither the fencing
// predicates, nor the lease engine, nor the facade (depguard); the facade
// (package store) embeds a Calendar so that callers keep calling
// store.Store.
package schedules

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Calendar runs the schedules domain's verbs against PostgreSQL.
type Calendar struct {
	pool   *pgxpool.Pool
	limits ScheduleLimits
}

// New returns the calendar of a pool, with DefaultScheduleLimits. The
// pool's lifetime is the caller's.
func New(pool *pgxpool.Pool) *Calendar {
	return &Calendar{pool: pool, limits: DefaultScheduleLimits}
}

func (s *Calendar) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}
