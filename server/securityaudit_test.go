package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// auditSink keeps the rows a throttle writes.
type auditSink struct {
	mu   sync.Mutex
	rows []securityEvent
}

func (s *auditSink) write(_ context.Context, e securityEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, e)
}

// counts sums the count of the rows per source address.
func (s *auditSink) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, r := range s.rows {
		out[r.details["source_address"].(string)] += r.details["count"].(int)
	}
	return out
}

func refusal(source string) securityEvent {
	return securityEvent{action: actionTokenRefused, source: source, actorType: "anonymous", actorID: source}
}

func TestSecurityAuditThrottleCountsPerSourceAndKind(t *testing.T) {
	sink := &auditSink{}
	th := newSecurityThrottle(time.Minute, 100, sink.write)
	t0 := time.Unix(1_000_000, 0)

	for range 30 {
		first, _, ended := th.note(refusal("192.0.2.1"), t0)
		if first {
			sink.write(t.Context(), securityEvent{details: withCount(refusal("192.0.2.1"), 1)})
		}
		require.Empty(t, ended)
	}
	first, _, _ := th.note(securityEvent{action: actionEnrollmentRefused, source: "192.0.2.1"}, t0)
	require.True(t, first, "another kind from the same address has its own window")
	require.Len(t, sink.rows, 1, "one row at once for thirty refusals")

	// Nothing is due before the window ends; at its end the count is, and
	// the key stays open for the next window.
	rows, next := th.due(t0.Add(30 * time.Second))
	require.Empty(t, rows)
	require.Equal(t, 30*time.Second, next)
	rows, _ = th.due(t0.Add(time.Minute))
	require.Len(t, rows, 1, "the enrollment window counted nothing after its first row")
	require.Equal(t, 29, rows[0].details["count"])
	require.Equal(t, "192.0.2.1", rows[0].details["source_address"])
	require.Equal(t, "token_refused", rows[0].details["kind"])
	require.Len(t, th.windows, 1)

	// A window that counted nothing ends the key; the next refusal is
	// written at once again.
	rows, next = th.due(t0.Add(2 * time.Minute))
	require.Empty(t, rows)
	require.Zero(t, next, "nothing open: run sleeps")
	require.Empty(t, th.windows)
	first, _, _ = th.note(refusal("192.0.2.1"), t0.Add(3*time.Minute))
	require.True(t, first)

	// A refusal after the window ended but before run closed it closes it.
	first, _, _ = th.note(refusal("192.0.2.1"), t0.Add(3*time.Minute+time.Second))
	require.False(t, first)
	first, _, ended := th.note(refusal("192.0.2.1"), t0.Add(5*time.Minute))
	require.False(t, first, "the window rolled over with a count, so this one is counted")
	require.Len(t, ended, 1)
	require.Equal(t, 1, ended[0].details["count"])

	// Shutdown writes what is pending; after it every refusal is a row.
	rows = th.close(t0.Add(5 * time.Minute))
	require.Len(t, rows, 1)
	require.Equal(t, 1, rows[0].details["count"])
	first, _, _ = th.note(refusal("192.0.2.1"), t0.Add(5*time.Minute))
	require.True(t, first)
}

func TestSecurityAuditThrottleIsBounded(t *testing.T) {
	sink := &auditSink{}
	th := newSecurityThrottle(time.Minute, 10, sink.write)
	ctx := t.Context()
	total := 0
	for i := range 1000 {
		for range 3 {
			th.record(ctx, refusal(fmt.Sprintf("10.0.%d.%d", i>>8, i&255)))
			total++
		}
	}
	require.LessOrEqual(t, len(th.windows), 11, "ten sources and one overflow window")
	require.Len(t, sink.rows, 11, "one row per tracked source and one for the first overflow")
	require.Equal(t, true, sink.rows[10].details["overflow"])
	rows := th.close(time.Now())
	for _, r := range rows {
		sink.write(ctx, r)
	}
	sum := 0
	for _, n := range sink.counts() {
		sum += n
	}
	require.Equal(t, total, sum, "no refusal goes uncounted")
	require.Equal(t, 3000-30-1, sink.counts()[overflowSource])
}

func TestSourceAddress(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:51234":               "192.0.2.7",
		"[::ffff:192.0.2.7]:443":        "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1%eth0]:1": "2001:db8:1:2::/64",
		"[::1]:8443":                    "::/64",
		"@":                             "@",
	} {
		require.Equal(t, want, sourceAddress(remote), remote)
	}
}

func TestSecurityAuditThrottleCountsFencingPerWorker(t *testing.T) {
	sink := &auditSink{}
	th := newSecurityThrottle(time.Minute, 100, sink.write)
	t0 := time.Unix(1_000_000, 0)
	fencing := func(worker string) securityEvent {
		return securityEvent{action: actionFencingRejected, source: "192.0.2.1", actorType: "worker", actorID: worker, worker: worker}
	}
	for _, w := range []string{"w1", "w2", "w1"} {
		th.note(fencing(w), t0)
	}
	require.Len(t, th.windows, 2, "two workers behind one address are told apart")
	rows, _ := th.due(t0.Add(time.Minute))
	require.Len(t, rows, 1)
	require.Equal(t, "w1", rows[0].actorID, "the count row names the worker")
	require.Equal(t, "worker", rows[0].actorType)
	require.Equal(t, "192.0.2.1", rows[0].details["source_address"])
}
