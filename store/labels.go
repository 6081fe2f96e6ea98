package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
)

// Labels are set on workers by operators (never by the worker), so a
// task's label selector may stand for authorization: "only workers labelled
// zone=eu". The rules for keys and values are Kubernetes': a key is at most
// 63 characters of lower-case letters, digits and -_./, starting and ending
// with a letter or digit; a value is at most 63 characters of letters,
// digits and -_., starting and ending with a letter or digit, or empty.

const (
	maxLabelLength    = 63
	maxLabelsOnWorker = 64
	maxSelectorTerms  = 32
	maxSelectorValues = 64
)

var (
	labelKeyPattern   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_./]*[a-z0-9])?$`)
	labelValuePattern = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

// Selector operators.
const (
	LabelIn           = "In"
	LabelNotIn        = "NotIn"
	LabelExists       = "Exists"
	LabelDoesNotExist = "DoesNotExist"
)

// LabelSelector chooses workers by their labels: every MatchLabels pair
// must be present and every expression must hold (Kubernetes semantics;
// NotIn and DoesNotExist also hold when the label is absent).
type LabelSelector struct {
	MatchLabels      map[string]string  `json:"match_labels,omitempty"`
	MatchExpressions []LabelRequirement `json:"match_expressions,omitempty"`
}

// LabelRequirement is one expression of a selector.
type LabelRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// ValidLabelKey reports whether k may name a label.
func ValidLabelKey(k string) bool {
	return len(k) <= maxLabelLength && labelKeyPattern.MatchString(k)
}

// ValidLabelValue reports whether v may be a label's value.
func ValidLabelValue(v string) bool {
	return len(v) <= maxLabelLength && labelValuePattern.MatchString(v)
}

// canonicalSelector validates s (field names the field in messages) and
// returns its canonical JSON — expressions sorted, values sorted and
// distinct — so that tasks selecting alike share a lease class; nil when it
// selects every worker (absent or empty), which is no selector at all.
func canonicalSelector(field string, s *LabelSelector) ([]byte, error) {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return nil, nil
	}
	bad := func(msg string) error { return invalid(problem.Text(field + msg)) }
	if len(s.MatchLabels)+len(s.MatchExpressions) > maxSelectorTerms {
		return nil, bad(": at most 32 terms")
	}
	for k, v := range s.MatchLabels {
		if !ValidLabelKey(k) {
			return nil, bad(".match_labels: invalid label key")
		}
		if !ValidLabelValue(v) {
			return nil, bad(".match_labels: invalid label value")
		}
	}
	c := LabelSelector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		if !ValidLabelKey(r.Key) {
			return nil, bad(".match_expressions.key: invalid label key")
		}
		values := slices.Clone(r.Values)
		slices.Sort(values)
		values = slices.Compact(values)
		switch r.Operator {
		case LabelIn, LabelNotIn:
			if len(values) == 0 || len(values) > maxSelectorValues {
				return nil, bad(".match_expressions.values: In and NotIn take 1 to 64 values")
			}
			for _, v := range values {
				if !ValidLabelValue(v) {
					return nil, bad(".match_expressions.values: invalid label value")
				}
			}
		case LabelExists, LabelDoesNotExist:
			if len(values) > 0 {
				return nil, bad(".match_expressions.values: Exists and DoesNotExist take no values")
			}
		default:
			return nil, bad(".match_expressions.operator: must be In, NotIn, Exists or DoesNotExist")
		}
		c.MatchExpressions = append(c.MatchExpressions, LabelRequirement{Key: r.Key, Operator: r.Operator, Values: values})
	}
	slices.SortFunc(c.MatchExpressions, func(a, b LabelRequirement) int {
		if n := strings.Compare(a.Key, b.Key); n != 0 {
			return n
		}
		if n := strings.Compare(a.Operator, b.Operator); n != 0 {
			return n
		}
		return slices.Compare(a.Values, b.Values)
	})
	c.MatchExpressions = slices.CompactFunc(c.MatchExpressions, func(a, b LabelRequirement) bool {
		return a.Key == b.Key && a.Operator == b.Operator && slices.Equal(a.Values, b.Values)
	})
	// encoding/json writes map keys sorted; jsonb normalizes the rest.
	return json.Marshal(c)
}

// validLabelChange checks an operator's change to a worker's labels: a
// value sets a label, nil removes it.
func validLabelChange(change map[string]*string) error {
	if len(change) > maxLabelsOnWorker {
		return invalid("labels: at most 64 labels")
	}
	for _, k := range slices.Sorted(maps.Keys(change)) {
		if !ValidLabelKey(k) {
			return invalid(problem.Text("labels: invalid label key " + quoteKey(k)))
		}
		if v := change[k]; v != nil && !ValidLabelValue(*v) {
			return invalid(problem.Text("labels: invalid value for label " + quoteKey(k)))
		}
	}
	return nil
}

// quoteKey quotes a caller's own label key for a message, cut short.
func quoteKey(k string) string {
	if len(k) > maxLabelLength+1 {
		k = k[:maxLabelLength+1] + "…"
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// splitLabelChange separates a label change into the labels it sets (a
// JSON object) and the keys it removes.
func splitLabelChange(change map[string]*string) (set []byte, remove []string, err error) {
	sets := map[string]string{}
	remove = []string{}
	for k, v := range change {
		if v == nil {
			remove = append(remove, k)
		} else {
			sets[k] = *v
		}
	}
	slices.Sort(remove)
	set, err = json.Marshal(sets)
	return set, remove, err
}

// checkPinnedWorker refuses a pin (field names it) to a worker org cannot
// see (see "Isolation" in doc.go), which includes one that does not exist:
// a pin must not reveal or reach another organization's workers. A worker
// that org sees but that cannot lease now (offline, disabled, revoked,
// unassigned) may be pinned: its tasks wait, and say so
// (pinned_worker_unavailable).
func checkPinnedWorker(ctx context.Context, ex executor, field string, org uuid.UUID, worker *uuid.UUID) error {
	if worker == nil {
		return nil
	}
	var visible bool
	if err := ex.QueryRow(ctx, `SELECT `+workerVisibleTo("$1::uuid", "$2::uuid"), *worker, org).Scan(&visible); err != nil {
		return fmt.Errorf("check pinned worker: %w", err)
	}
	if !visible {
		return invalid(problem.Text(field + ": no such worker for this organization"))
	}
	return nil
}
