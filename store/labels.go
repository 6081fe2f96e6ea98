package store

import (
	"github.com/worker-gateway/gateway/internal/labels"
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

// validLabelChange checks an operator's change to a worker's labels
// (labels.ValidChange); a refusal is ErrInvalid.
func validLabelChange(change map[string]*string) error {
	if err := labels.ValidChange(change); err != nil {
		return core.InvalidBecause(err)
	}
	return nil
}
