// Package webhooks is the store's webhook domain: an organization's
// targets (targets.go), their signing secrets, sealed (secrets.go), the
// watcher of the events computed from time (watch.go) and the delivery of
// the outbox by any replica (delivery.go); see "Webhooks" and "Secrets" in
// store/doc.go. Events are written to the outbox by the core's one
// emitter (core.EmitEvent). It stands on store/internal/core, acts for a
// core.Tenant, and imports neither the fencing predicates nor the lease
// engine (depguard); the facade (package store) embeds a Hub so that
// callers keep calling store.Store.
package webhooks

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Hub runs the webhook domain's verbs against PostgreSQL.
type Hub struct {
	pool *pgxpool.Pool
}

// New returns the hub of a pool; the pool's lifetime is the caller's.
func New(pool *pgxpool.Pool) *Hub { return &Hub{pool: pool} }

func (s *Hub) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}

func (s *Hub) inBatches(ctx context.Context, name, auditKey string, batch func(tx pgx.Tx) (int, error)) (int, error) {
	return core.InBatches(ctx, s.pool, name, auditKey, batch)
}
