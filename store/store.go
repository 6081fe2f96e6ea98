package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/history"
	"github.com/worker-gateway/gateway/store/internal/lease"
	"github.com/worker-gateway/gateway/store/internal/schedules"
	"github.com/worker-gateway/gateway/store/internal/secrets"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
	"github.com/worker-gateway/gateway/store/internal/webhooks"
)

// Store runs the gateway's domain verbs against PostgreSQL. The worker
// protocol's verbs are the lease engine's (store/internal/lease), and a
// control-plane domain that left this package is embedded the same way
// (store/internal/secrets, store/internal/webhooks,
// store/internal/targetscope, store/internal/history,
// store/internal/schedules), so that their verbs are the Store's; the rest
// of the control plane's are this package's, which creates tasks and scans
// with store/internal/work, as a schedule's fire does.
type Store struct {
	*lease.Engine
	*secrets.Vault
	*webhooks.Hub
	*targetscope.Scopes
	*history.Archive
	*schedules.Calendar
	pool     *pgxpool.Pool
	logReads logReadCounts
}

// New wraps a pool. The pool's lifetime belongs to the caller.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.Engine = lease.New(pool)
	s.Vault = secrets.New(pool)
	s.Hub = webhooks.New(pool)
	s.Scopes = targetscope.New(pool, recheckLiveWork)
	s.Archive = history.New(pool, s.findOrganization)
	s.Calendar = schedules.New(pool)
	return s
}

// Pool exposes the pool for health checks and tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// inTx runs fn in one transaction (InTx).
func (s *Store) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}
