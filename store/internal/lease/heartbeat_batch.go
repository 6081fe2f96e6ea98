package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// RenewOutcome is one worker's heartbeat answer within a group: the status
// of each of its leases, or the error its heartbeat alone would have got.
type RenewOutcome struct {
	Statuses []LeaseStatus
	Err      error
}

// RenewLeasesMany renews the leases of many workers' heartbeats in one
// transaction, answering each as RenewLeases would: every worker is touched
// (in one round trip, in worker id order — workers come first in the lock
// order of doc.go, and two groups must take them in the same order), then
// one statement renews all their leases. A worker that is unknown or
// revoked gets its error; the others are renewed all the same.
func (s *Engine) RenewLeasesMany(ctx context.Context, ps []RenewParams) []RenewOutcome {
	out := make([]RenewOutcome, len(ps))
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return core.CompareWorkers(ps[a].WorkerID, ps[b].WorkerID) })
	capsChanged := make([]bool, len(ps))
	queue := func(b *pgx.Batch) {
		for _, i := range order {
			b.Queue(touchWorkerSQL, ps[i].WorkerID, core.NullJSON(ps[i].Capabilities), ps[i].SoftwareVersion, nil)
		}
	}
	read := func(br pgx.BatchResults) error {
		for _, i := range order {
			out[i], capsChanged[i] = RenewOutcome{}, false
			var (
				workerType       string
				caps             []byte
				maxTasks         int
				enabled, revoked bool
				labels           []byte
			)
			err := br.QueryRow().Scan(&workerType, &caps, &maxTasks, &enabled, &revoked, &capsChanged[i], &labels)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				out[i].Err = core.ErrNotFound
			case err != nil:
				return fmt.Errorf("touch worker: %w", err)
			case revoked:
				out[i].Err = core.ErrWorkerRevoked
			}
		}
		return nil
	}
	finish := func(ex core.Executor) error {
		var refs []AttemptRef
		for _, i := range order {
			if out[i].Err != nil {
				continue
			}
			if capsChanged[i] {
				// Before renewing, so a lease whose critical capability is
				// gone answers lost.
				if _, err := releaseAttemptsLackingCritical(ctx, ex, ps[i].WorkerID, ps[i].Capabilities); err != nil {
					return err
				}
			}
			for _, l := range ps[i].Leases {
				l.WorkerID = ps[i].WorkerID
				refs = append(refs, l)
			}
		}
		if len(refs) == 0 {
			return nil
		}
		statuses, err := renew(ctx, ex, refs)
		if err != nil {
			return err
		}
		for _, i := range order {
			if out[i].Err == nil {
				n := len(ps[i].Leases)
				out[i].Statuses, statuses = statuses[:n:n], statuses[n:]
			}
		}
		return nil
	}
	if err := s.inPipelinedTx(ctx, "renew leases", queue, read, finish); err != nil {
		for i := range out {
			out[i] = RenewOutcome{Err: err}
		}
		return out
	}
	for i := range out {
		if out[i].Err == nil && out[i].Statuses == nil {
			out[i].Statuses = []LeaseStatus{}
		}
	}
	return out
}
