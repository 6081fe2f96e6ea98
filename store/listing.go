package store

import (
	"context"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// Every listing pages by keyset through one helper, the core's ListPage
// (core/listing.go), so that the domains outside this package page the
// same way; these are the names this package's listings use.

type keyset[T any] = core.Keyset[T]

// newestFirst orders by (time, id) descending: the listings' usual order.
func newestFirst[T any](time, id string, at func(T) Cursor) keyset[T] {
	return core.NewestFirst(time, id, at)
}

// oldestFirst orders by (time, id) ascending.
func oldestFirst[T any](time, id string, at func(T) Cursor) keyset[T] {
	return core.OldestFirst(time, id, at)
}

// listPage runs one page of a listing (core.ListPage).
func listPage[T any](ctx context.Context, ex executor, q sq.SelectBuilder, order keyset[T], after *Cursor, limit int,
	scan func(pgx.Row) (T, error),
) ([]T, *Cursor, error) {
	return core.ListPage(ctx, ex, q, order, after, limit, scan)
}
