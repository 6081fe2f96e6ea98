package core

import (
	"context"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5"
)

// Every listing pages by keyset: its rows are ordered by (a time, an id),
// and the next page starts after the last row of this one, whatever was
// inserted or deleted in between. ListPage is the one place that does it;
// a listing states only what is its own — columns, tables and joins, its
// tenant predicate and its filters — as a squirrel SELECT, since most
// listings' filters are optional and so change the statement's shape.

// Keyset is a listing's order, described once: by the columns time and id,
// newest first or oldest first, and at, a listed row's position on them.
// ListPage makes the ORDER BY and the predicate that resumes after a cursor
// both from it, so the two cannot disagree.
type Keyset[T any] struct {
	time, id  string
	ascending bool
	at        func(T) Cursor
}

// NewestFirst orders by (time, id) descending: the listings' usual order.
func NewestFirst[T any](time, id string, at func(T) Cursor) Keyset[T] {
	return Keyset[T]{time: time, id: id, at: at}
}

// OldestFirst orders by (time, id) ascending.
func OldestFirst[T any](time, id string, at func(T) Cursor) Keyset[T] {
	return Keyset[T]{time: time, id: id, ascending: true, at: at}
}

func (k Keyset[T]) orderBy() []string {
	dir := " DESC"
	if k.ascending {
		dir = " ASC"
	}
	return []string{k.time + dir, k.id + dir}
}

// past keeps the rows after c in the keyset's order. It compares the pair
// as a row, which an index on (time, id) in that order serves.
func (k Keyset[T]) past(c Cursor) sq.Sqlizer {
	op := " < "
	if k.ascending {
		op = " > "
	}
	return sq.Expr("("+k.time+", "+k.id+")"+op+"(?::timestamptz, ?::uuid)", c.Time, c.ID)
}

// ListPage runs one page of a listing: q, the listing's own SELECT, with
// the rows past after (none: from the start), in order, and at most limit
// of them. One row more than limit is read, so that its presence says a
// next page exists; the cursor returned is then the position of the last
// row kept, and nil on the last page. scan reads one row of q's columns.
func ListPage[T any](ctx context.Context, ex Executor, q sq.SelectBuilder, order Keyset[T], after *Cursor, limit int,
	scan func(pgx.Row) (T, error),
) ([]T, *Cursor, error) {
	if limit < 1 {
		return nil, nil, Invalid("limit must be at least 1")
	}
	if after != nil {
		q = q.Where(order.past(*after))
	}
	sqlText, args, err := q.OrderBy(order.orderBy()...).Limit(uint64(limit) + 1).PlaceholderFormat(sq.Dollar).ToSql()
	if err != nil {
		return nil, nil, err
	}
	rows, err := ex.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, nil, err
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, nil, err
	}
	list, next := page(list, limit, order.at)
	return list, next, nil
}

// page trims a listing fetched with limit+1 rows to limit and returns the
// cursor of the next page, or nil when this was the last.
func page[T any](rows []T, limit int, position func(T) Cursor) ([]T, *Cursor) {
	if len(rows) <= limit {
		return rows, nil
	}
	rows = rows[:limit]
	next := position(rows[limit-1])
	return rows, &next
}
