// Package labels holds the rules of worker labels and of the label
// selectors tasks carry, without a database: which keys and values are
// valid, a selector's canonical form, and how an operator's change to a
// worker's labels splits into what it sets and what it removes.
//
// Labels are set on workers by operators (never by the worker), so a
// task's label selector may stand for authorization: "only workers labelled
// zone=eu". The rules for keys and values are Kubernetes': a key is at most
// 63 characters of lower-case letters, digits and -_./, starting and ending
// with a letter or digit; a value is at most 63 characters of letters,
// digits and -_., starting and ending with a letter or digit, or empty.
//
// Matching a selector against a worker's labels is done in SQL, by the
// database function worker_labels_match, inside the lease; the store
// (store/labels.go) stores the canonical form this package makes.
package labels

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/worker-gateway/gateway/problem"
)

const (
	maxLength         = 63
	maxSelectorTerms  = 32
	maxSelectorValues = 64
	// MaxOnWorker is how many labels a worker may carry.
	MaxOnWorker = 64
)

var (
	keyPattern   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_./]*[a-z0-9])?$`)
	valuePattern = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

// Selector operators.
const (
	In           = "In"
	NotIn        = "NotIn"
	Exists       = "Exists"
	DoesNotExist = "DoesNotExist"
)

// Selector chooses workers by their labels: every MatchLabels pair must be
// present and every expression must hold (Kubernetes semantics; NotIn and
// DoesNotExist also hold when the label is absent).
type Selector struct {
	MatchLabels      map[string]string `json:"match_labels,omitempty"`
	MatchExpressions []Requirement     `json:"match_expressions,omitempty"`
}

// Requirement is one expression of a selector.
type Requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// ValidKey reports whether k may name a label.
func ValidKey(k string) bool {
	return len(k) <= maxLength && keyPattern.MatchString(k)
}

// ValidValue reports whether v may be a label's value.
func ValidValue(v string) bool {
	return len(v) <= maxLength && valuePattern.MatchString(v)
}

// Canonical validates s (field names the field in messages) and returns
// its canonical JSON — expressions sorted, values sorted and distinct — so
// that tasks selecting alike share a lease class; nil when it selects every
// worker (absent or empty), which is no selector at all. A refusal is a
// problem.Public error naming the field.
func Canonical(field string, s *Selector) ([]byte, error) {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return nil, nil
	}
	bad := func(msg string) error { return problem.Public(problem.Text(field + msg)) }
	if len(s.MatchLabels)+len(s.MatchExpressions) > maxSelectorTerms {
		return nil, bad(": at most 32 terms")
	}
	for k, v := range s.MatchLabels {
		if !ValidKey(k) {
			return nil, bad(".match_labels: invalid label key")
		}
		if !ValidValue(v) {
			return nil, bad(".match_labels: invalid label value")
		}
	}
	c := Selector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		if !ValidKey(r.Key) {
			return nil, bad(".match_expressions.key: invalid label key")
		}
		values := slices.Clone(r.Values)
		slices.Sort(values)
		values = slices.Compact(values)
		switch r.Operator {
		case In, NotIn:
			if len(values) == 0 || len(values) > maxSelectorValues {
				return nil, bad(".match_expressions.values: In and NotIn take 1 to 64 values")
			}
			for _, v := range values {
				if !ValidValue(v) {
					return nil, bad(".match_expressions.values: invalid label value")
				}
			}
		case Exists, DoesNotExist:
			if len(values) > 0 {
				return nil, bad(".match_expressions.values: Exists and DoesNotExist take no values")
			}
		default:
			return nil, bad(".match_expressions.operator: must be In, NotIn, Exists or DoesNotExist")
		}
		c.MatchExpressions = append(c.MatchExpressions, Requirement{Key: r.Key, Operator: r.Operator, Values: values})
	}
	slices.SortFunc(c.MatchExpressions, func(a, b Requirement) int {
		if n := strings.Compare(a.Key, b.Key); n != 0 {
			return n
		}
		if n := strings.Compare(a.Operator, b.Operator); n != 0 {
			return n
		}
		return slices.Compare(a.Values, b.Values)
	})
	c.MatchExpressions = slices.CompactFunc(c.MatchExpressions, func(a, b Requirement) bool {
		return a.Key == b.Key && a.Operator == b.Operator && slices.Equal(a.Values, b.Values)
	})
	// encoding/json writes map keys sorted; jsonb normalizes the rest.
	return json.Marshal(c)
}

// ValidChange checks an operator's change to a worker's labels: a value
// sets a label, nil removes it. A refusal is a problem.Public error.
func ValidChange(change map[string]*string) error {
	if len(change) > MaxOnWorker {
		return problem.Public("labels: at most 64 labels")
	}
	for _, k := range slices.Sorted(maps.Keys(change)) {
		if !ValidKey(k) {
			return problem.Public(problem.Text("labels: invalid label key " + quoteKey(k)))
		}
		if v := change[k]; v != nil && !ValidValue(*v) {
			return problem.Public(problem.Text("labels: invalid value for label " + quoteKey(k)))
		}
	}
	return nil
}

// quoteKey quotes a caller's own label key for a message, cut short.
func quoteKey(k string) string {
	if len(k) > maxLength+1 {
		k = k[:maxLength+1] + "…"
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// SplitChange separates a label change into the labels it sets (a JSON
// object) and the keys it removes, sorted.
func SplitChange(change map[string]*string) (set []byte, remove []string, err error) {
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
