package store

import (
	"context"
	"time"

	"github.com/worker-gateway/gateway/store/internal/lease"
)

// FireDueSchedulesAt is FireDueSchedules deciding at now instead of the
// database's clock, so tests walk a schedule through many slots without
// sleeping.
func (s *Store) FireDueSchedulesAt(ctx context.Context, now time.Time, limit int) ([]ScheduleFire, error) {
	return s.fireDueSchedules(ctx, &now, limit)
}

// LeaseCandidatesSQL and GenericPlanSQL let a test explain a poll's walk
// under the plan settings it runs with.
var (
	LeaseCandidatesSQL = lease.LeaseCandidatesSQL
	GenericPlanSQL     = genericPlanSQL
)

// LockAssignmentsSQL and ReplayLeasesSQL let a test explain the other
// statements of a poll that read the worker's live attempts.
var (
	LockAssignmentsSQL = lease.LockAssignmentsSQL
	ReplayLeasesSQL    = lease.ReplayLeasesSQL
)

// ScopeReadLockSQL lets a test stand for a decider that read an
// organization's scan scope and has not committed yet.
var ScopeReadLockSQL = scopeReadLockSQL
