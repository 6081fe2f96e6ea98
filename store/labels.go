package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/labels"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// Labels are set on workers by operators (never by the worker), so a
// task's label selector may stand for authorization: "only workers labelled
// zone=eu". Their rules — valid keys and values, a selector's canonical
// form — are internal/labels', tested there without a database; matching
// is the database function worker_labels_match, inside the lease.

// Selector operators.
const (
	LabelIn           = labels.In
	LabelNotIn        = labels.NotIn
	LabelExists       = labels.Exists
	LabelDoesNotExist = labels.DoesNotExist
)

// LabelSelector chooses workers by their labels (labels.Selector).
type LabelSelector = labels.Selector

// LabelRequirement is one expression of a selector.
type LabelRequirement = labels.Requirement

// ValidLabelKey reports whether k may name a label.
func ValidLabelKey(k string) bool { return labels.ValidKey(k) }

// ValidLabelValue reports whether v may be a label's value.
func ValidLabelValue(v string) bool { return labels.ValidValue(v) }

// canonicalSelector is s in canonical form (labels.Canonical), nil for no
// selector; a refusal is ErrInvalid naming field.
func canonicalSelector(field string, s *LabelSelector) ([]byte, error) {
	c, err := labels.Canonical(field, s)
	if err != nil {
		return nil, core.InvalidBecause(err)
	}
	return c, nil
}

// validLabelChange checks an operator's change to a worker's labels
// (labels.ValidChange); a refusal is ErrInvalid.
func validLabelChange(change map[string]*string) error {
	if err := labels.ValidChange(change); err != nil {
		return core.InvalidBecause(err)
	}
	return nil
}

// checkPinnedWorker refuses a pin (field names it) to a worker org cannot
// see (see "Isolation" in doc.go), which includes one that does not exist:
// a pin must not reveal or reach another organization's workers. A worker
// that org sees but that cannot lease now (offline, disabled, revoked,
// unassigned) may be pinned: its tasks wait, and say so
// (pinned_worker_unavailable).
func checkPinnedWorker(ctx context.Context, ex core.Executor, field string, org uuid.UUID, worker *uuid.UUID) error {
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
