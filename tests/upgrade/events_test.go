package upgrade

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// requireRevocationsToldOnce: while both releases serve on the expanded
// schema, a worker revoked through either release's replica is told to
// its organization's webhook exactly once. The previous release relies on
// the worker.revoked trigger, which this release's own emitter makes stand
// aside (migration 000026) until the contract step drops it.
func requireRevocationsToldOnce(t *testing.T, g *harness.Gateway, org uuid.UUID, through map[string]*harness.Process) {
	t.Helper()
	ctx := t.Context()
	// A target that hears worker.revoked, its circuit open so that no
	// delivery is tried (no traffic leaves the machine).
	_, err := g.Pool.Exec(ctx, `INSERT INTO webhook_targets (organization_id, url, event_types, secret, circuit_open_until)
		VALUES ($1, 'http://192.0.2.1/upgrade-hook', ARRAY['worker.revoked'], '\x01'::bytea, now() + interval '1 day')`, org)
	require.NoError(t, err)
	for release, p := range through {
		wk := g.NewWorker(t, "revoked-through-"+release, 1, org)
		revokeThrough(t, g, p, wk.ID)
		var told int
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_events
			WHERE organization_id = $1 AND event_type = 'worker.revoked' AND convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'worker_id' = $2`,
			org, wk.ID.String()).Scan(&told))
		require.Equal(t, 1, told, "a worker revoked through a replica of the %s release is told once", release)
	}
}

// revokeThrough revokes a worker through one replica.
func revokeThrough(t *testing.T, g *harness.Gateway, p *harness.Process, worker uuid.UUID) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.WithoutCancel(t.Context()), http.MethodPost,
		p.URL+"/v1/workers/"+worker.String()+"/revoke", bytes.NewReader([]byte(`{"reason":"upgrade test"}`)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := g.HTTPClient(nil).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}
