package server

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGroupTaskCountsBoundsOrganizations(t *testing.T) {
	var in []taskCount
	for i := range 25 {
		org := fmt.Sprintf("org-%02d", i)
		in = append(in, taskCount{org, "pending", int64(100 - i)}, taskCount{org, "completed", 1})
	}
	out := groupTaskCounts(in, 20)
	orgs := map[string]bool{}
	other := map[string]int64{}
	var total int64
	for _, c := range out {
		orgs[c.org] = true
		total += c.n
		if c.org == "other" {
			other[c.state] = c.n
		}
	}
	require.Len(t, orgs, 21, "20 named organizations and other")
	require.True(t, orgs["org-00"])
	require.True(t, orgs["org-19"])
	require.False(t, orgs["org-20"], "the smallest organizations are summed")
	require.Equal(t, int64(100-20+100-21+100-22+100-23+100-24), other["pending"])
	require.Equal(t, int64(5), other["completed"])
	var want int64
	for _, c := range in {
		want += c.n
	}
	require.Equal(t, want, total, "nothing is lost")

	require.Empty(t, groupTaskCounts(nil, 20))
	few := groupTaskCounts([]taskCount{{"a", "pending", 1}}, 20)
	require.Equal(t, []taskCount{{"a", "pending", 1}}, few, "no other when all fit")
}

func TestStatusCode(t *testing.T) {
	require.Equal(t, "204", statusCode(204))
	require.Equal(t, "429", statusCode(429))
	require.Equal(t, "other", statusCode(0))
}

func TestGroupQueueAgesBoundsOrganizations(t *testing.T) {
	var in []queueAge
	for i := range 25 {
		in = append(in, queueAge{fmt.Sprintf("org-%02d", i), float64(100 - i)})
	}
	out := groupQueueAges(in, 20)
	require.Len(t, out, 21, "20 named organizations and other")
	require.Equal(t, queueAge{"org-00", 100}, out[0], "the longest wait first")
	require.Equal(t, queueAge{"other", 80}, out[20], "other carries the longest wait among the rest")
	require.Equal(t, []queueAge{{"a", 1}}, groupQueueAges([]queueAge{{"a", 1}}, 20), "no other when all fit")
	require.Empty(t, groupQueueAges(nil, 20))
}
