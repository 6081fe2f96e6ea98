package faults

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireOnly503 requires that the gateways never answered a 5xx but 503,
// and every 503 as problem+json saying when to retry (Retry-After). It
// counts the 503s and the calls that got no answer.
func RequireOnly503(t *testing.T, calls []Call) (unavailable, transportErrors int) {
	t.Helper()
	bad := 0
	for _, c := range calls {
		switch {
		case c.Status == 0:
			transportErrors++
		case c.Status == http.StatusServiceUnavailable && c.RetryAfter != "" && c.ContentType == "application/problem+json":
			unavailable++
		case c.Status >= 500:
			bad++
			t.Errorf("bad 5xx: %s to %s answered %d %q (Retry-After %q, %s)", c.Op, c.Replica, c.Status, c.Code, c.RetryAfter, c.ContentType)
		}
	}
	require.Zero(t, bad, "5xx other than 503 with Retry-After, as problem+json")
	return unavailable, transportErrors
}

// Census counts calls by group (what group says a call belongs to) and
// status, 0 for no answer, as one line per group for the log:
// "previous: 200=812 409=3 0=5".
func Census(calls []Call, group func(Call) string) []string {
	counts := map[string]map[int]int{}
	for _, c := range calls {
		g := group(c)
		if counts[g] == nil {
			counts[g] = map[int]int{}
		}
		counts[g][c.Status]++
	}
	var lines []string
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		var parts []string
		for _, status := range slices.Sorted(maps.Keys(counts[g])) {
			parts = append(parts, fmt.Sprintf("%d=%d", status, counts[g][status]))
		}
		lines = append(lines, g+": "+strings.Join(parts, " "))
	}
	return lines
}
