package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// The default keeps audit events a year: a prune with the documented
// defaults deletes older events and keeps the rest.
func TestPruneAuditEventsAtTheDefaultRetention(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	require.Equal(t, 365*day, store.DefaultPruneParams().AuditRetention, "audit events are not kept forever by default")
	for _, action := range []string{"test.year_and_a_day", "test.two_years", "test.almost_a_year", "test.today"} {
		require.NoError(t, s.RecordAudit(t.Context(), store.AuditEvent{ActorType: "system", Action: action}))
	}
	exec(t, b.pool, `UPDATE audit_events SET occurred_at = now() - interval '366 days' WHERE action = 'test.year_and_a_day'`)
	exec(t, b.pool, `UPDATE audit_events SET occurred_at = now() - interval '730 days' WHERE action = 'test.two_years'`)
	exec(t, b.pool, `UPDATE audit_events SET occurred_at = now() - interval '364 days' WHERE action = 'test.almost_a_year'`)

	res := prune(t, s, store.DefaultPruneParams())
	require.Equal(t, store.PruneResult{AuditEvents: 2}, res)
	require.Equal(t, 2, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE action IN ('test.almost_a_year', 'test.today')`))
	require.Equal(t, 2, countRows(t, b.pool, `SELECT count(*) FROM audit_events`))
}
