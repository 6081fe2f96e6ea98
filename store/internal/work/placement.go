package work

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/labels"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// Where a task may run: the workers its label selector chooses, or the one
// it is pinned to (matching is the lease's, worker_labels_match).

// CanonicalSelector is s in canonical form (labels.Canonical), nil for no
// selector; a refusal is ErrInvalid naming field.
func CanonicalSelector(field string, s *labels.Selector) ([]byte, error) {
	c, err := labels.Canonical(field, s)
	if err != nil {
		return nil, core.InvalidBecause(err)
	}
	return c, nil
}

// CheckPinnedWorker refuses a pin (field names it) to a worker org cannot
// see (see "Isolation" in store/doc.go), which includes one that does not
// exist: a pin must not reveal or reach another organization's workers. A
// worker that org sees but that cannot lease now (offline, disabled,
// revoked, unassigned) may be pinned: its tasks wait, and say so
// (pinned_worker_unavailable).
func CheckPinnedWorker(ctx context.Context, ex core.Executor, field string, org uuid.UUID, worker *uuid.UUID) error {
	if worker == nil {
		return nil
	}
	var visible bool
	if err := ex.QueryRow(ctx, `SELECT `+core.WorkerVisibleTo("$1::uuid", "$2::uuid"), *worker, org).Scan(&visible); err != nil {
		return fmt.Errorf("check pinned worker: %w", err)
	}
	if !visible {
		return core.Invalid(problem.Text(field + ": no such worker for this organization"))
	}
	return nil
}
