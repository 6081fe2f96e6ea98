package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/lease"
)

// The lease engine (store/internal/lease) serves the worker protocol; the
// Store embeds it, so its verbs (AcquireLeases, RenewLeases, StartAttempt,
// CompleteAttempt(s), SweepExpired, VacuumQueue…) are the Store's, and its
// types are named here.
type (
	AcquireParams   = lease.AcquireParams
	AcquireResult   = lease.AcquireResult
	AcquireOutcome  = lease.AcquireOutcome
	Lease           = lease.Lease
	TaskSnapshot    = lease.TaskSnapshot
	AttemptRef      = lease.AttemptRef
	LeaseState      = lease.LeaseState
	LeaseStatus     = lease.LeaseStatus
	RenewParams     = lease.RenewParams
	RenewOutcome    = lease.RenewOutcome
	CompleteParams  = lease.CompleteParams
	CompleteResult  = lease.CompleteResult
	CompleteOutcome = lease.CompleteOutcome
	SweepResult     = lease.SweepResult

	AcquireBatcher    = lease.AcquireBatcher
	HeartbeatBatcher  = lease.HeartbeatBatcher
	CompletionBatcher = lease.CompletionBatcher
)

const (
	LeaseActive          = lease.LeaseActive
	LeaseCancelRequested = lease.LeaseCancelRequested
	LeaseLost            = lease.LeaseLost
)

// WarmConnections makes every new connection of a pool ready for the hot
// paths before it serves a request.
func WarmConnections(cfg *pgxpool.Config) { lease.WarmConnections(cfg) }

// NewCompletionBatcher group-commits completions of s (lease.NewCompletionBatcher).
func NewCompletionBatcher(s *Store, writers, maxGroup int, timeout time.Duration) *CompletionBatcher {
	return lease.NewCompletionBatcher(s.Engine, writers, maxGroup, timeout)
}

// NewHeartbeatBatcher group-commits renewals of s (lease.NewHeartbeatBatcher).
func NewHeartbeatBatcher(s *Store, writers, maxGroup int, timeout time.Duration) *HeartbeatBatcher {
	return lease.NewHeartbeatBatcher(s.Engine, writers, maxGroup, timeout)
}

// NewAcquireBatcher serves concurrent polls of s with one acquisition
// (lease.NewAcquireBatcher).
func NewAcquireBatcher(s *Store, writers, maxGroup int, timeout time.Duration, clock func() uint64,
	release func(n int, err error)) *AcquireBatcher {
	return lease.NewAcquireBatcher(s.Engine, writers, maxGroup, timeout, clock, release)
}
