package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/lease"
	"github.com/worker-gateway/gateway/store/internal/schedules"
	"github.com/worker-gateway/gateway/store/internal/targetscope"
)

// FireDueSchedulesAt is FireDueSchedules deciding at now instead of the
// database's clock, so tests walk a schedule through many slots without
// sleeping.
func (s *Store) FireDueSchedulesAt(ctx context.Context, now time.Time, limit int) ([]ScheduleFire, error) {
	return schedules.FireDueAt(ctx, s.Calendar, now, limit)
}

// LeaseCandidatesSQL and GenericPlanSQL let a test explain a poll's walk
// under the plan settings it runs with.
var (
	LeaseCandidatesSQL = lease.LeaseCandidatesSQL
	GenericPlanSQL     = core.GenericPlanSQL
)

// LockAssignmentsSQL and ReplayLeasesSQL let a test explain the other
// statements of a poll that read the worker's live attempts.
var (
	LockAssignmentsSQL = lease.LockAssignmentsSQL
	ReplayLeasesSQL    = lease.ReplayLeasesSQL
)

// ScopeReadLockSQL lets a test stand for a decider that read an
// organization's scan scope and has not committed yet.
var ScopeReadLockSQL = targetscope.ReadLockSQL

// PageRow is a row of a table a test pages through with core.ListPage.
type PageRow struct {
	ID uuid.UUID
	At time.Time
}

// ListPageRows pages a test's table (id uuid, at timestamptz) through
// core.ListPage by (at, id): newest first, or oldest first with ascending.
func ListPageRows(ctx context.Context, pool *pgxpool.Pool, table string, ascending bool, after *Cursor, limit int) ([]PageRow, *Cursor, error) {
	at := func(r PageRow) Cursor { return Cursor{Time: r.At, ID: r.ID} }
	order := core.NewestFirst("r.at", "r.id", at)
	if ascending {
		order = core.OldestFirst("r.at", "r.id", at)
	}
	return core.ListPage(ctx, pool, core.Psql.Select("r.id, r.at").From(table+" r"), order, after, limit, func(row pgx.Row) (PageRow, error) {
		var r PageRow
		err := row.Scan(&r.ID, &r.At)
		return r, err
	})
}
