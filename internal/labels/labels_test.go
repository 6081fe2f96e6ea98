package labels

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
)

// TestValidChange: keys and values follow Kubernetes' rules; a refusal
// names the key in a text a client may read.
func TestValidChange(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidChange(map[string]*string{"zone": new("eu-west"), "example.com/team": new(""), "tier": nil}))
	for _, change := range []map[string]*string{
		{"Zone": new("eu")},                    // upper case key
		{"-zone": new("eu")},                   // must start with a letter or digit
		{"zone-": new("eu")},                   // nor end with anything else
		{"": new("eu")},                        // empty key
		{strings.Repeat("a", 64): nil},         // key too long
		{"zone": new("eu west")},               // space in value
		{"zone": new("-eu")},                   // value must start with a letter or digit
		{"zone": new(strings.Repeat("a", 64))}, // value too long
	} {
		err := ValidChange(change)
		require.Error(t, err, "%v", change)
		text, ok := problem.PublicText(err)
		require.True(t, ok)
		require.True(t, strings.HasPrefix(string(text), "labels: "), text)
	}
	many := map[string]*string{}
	for i := range MaxOnWorker + 1 {
		many[strings.Repeat("k", i+1)] = nil
	}
	require.Error(t, ValidChange(many))
}

// TestSplitChange: a change sets the labels given a value and removes the
// keys given nil, sorted.
func TestSplitChange(t *testing.T) {
	t.Parallel()
	set, remove, err := SplitChange(map[string]*string{"zone": new("eu"), "tier": nil, "absent": nil})
	require.NoError(t, err)
	require.JSONEq(t, `{"zone": "eu"}`, string(set))
	require.Equal(t, []string{"absent", "tier"}, remove)
}

// TestCanonicalSelector: selectors spelled differently but meaning the
// same have one canonical form (so they share a lease class); an empty one
// is none at all; an invalid one is refused naming the field.
func TestCanonicalSelector(t *testing.T) {
	t.Parallel()
	a, err := Canonical("label_selector", &Selector{MatchExpressions: []Requirement{
		{Key: "zone", Operator: In, Values: []string{"eu", "us", "eu"}},
		{Key: "gpu", Operator: Exists},
		{Key: "gpu", Operator: Exists},
	}})
	require.NoError(t, err)
	b, err := Canonical("label_selector", &Selector{MatchExpressions: []Requirement{
		{Key: "gpu", Operator: Exists},
		{Key: "zone", Operator: In, Values: []string{"us", "eu"}},
	}})
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.JSONEq(t, `{"match_expressions": [{"key": "gpu", "operator": "Exists"},
		{"key": "zone", "operator": "In", "values": ["eu", "us"]}]}`, string(a))

	for _, none := range []*Selector{nil, {}, {MatchLabels: map[string]string{}}} {
		c, err := Canonical("label_selector", none)
		require.NoError(t, err)
		require.Nil(t, c)
	}

	for _, bad := range []*Selector{
		{MatchLabels: map[string]string{"Zone": "eu"}},
		{MatchLabels: map[string]string{"zone": "e u"}},
		{MatchExpressions: []Requirement{{Key: "zone", Operator: In}}},
		{MatchExpressions: []Requirement{{Key: "zone", Operator: Exists, Values: []string{"eu"}}}},
		{MatchExpressions: []Requirement{{Key: "zone", Operator: "Gt", Values: []string{"1"}}}},
	} {
		_, err := Canonical("definition.task.label_selector", bad)
		require.Error(t, err, "%+v", bad)
		text, ok := problem.PublicText(err)
		require.True(t, ok)
		require.True(t, strings.HasPrefix(string(text), "definition.task.label_selector"), text)
	}
}
