package store_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
)

// historyOrderMigration is the migration after which only scans whose
// every job completed are compared.
const historyOrderMigration = 23

// TestHistoryOrderMigrationForgetsPartialScans: a scan 000022 recorded
// though one of its jobs failed is no longer a scan to compare with after
// the upgrade, and loses the changes it had; a complete scan keeps its own.
func TestHistoryOrderMigrationForgetsPartialScans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, pool := beforeMigration(t, historyOrderMigration)
	org := createOldOrg(t, pool, "org")

	var assetID uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO assets (organization_id, type, value, normalized_value)
		VALUES ($1, 'port', '127.0.0.1:22', '127.0.0.1:22') RETURNING id`, org.ID).Scan(&assetID))
	// As 000022 left them: recorded, with a change each.
	scan := func(jobStates ...string) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO scans (organization_id, state, scope_key, history_recorded_at, completed_at)
			VALUES ($1, 'completed', 'key', now(), now()) RETURNING id`, org.ID).Scan(&id))
		for i, state := range jobStates {
			exec(t, pool, `INSERT INTO scan_jobs (scan_id, organization_id, position, plugin_name, state) VALUES ($1, $2, $3, 'p', $4)`,
				id, org.ID, i, state)
		}
		exec(t, pool, `INSERT INTO asset_scan_changes (organization_id, scan_id, asset_id, asset_type, asset_value, kind)
			VALUES ($1, $2, $3, 'port', '127.0.0.1:22', 'port_closed')`, org.ID, id, assetID)
		return id
	}
	partial := scan("completed", "failed")
	complete := scan("completed", "completed")

	require.NoError(t, migrations.Up(ctx, url))
	state := func(id uuid.UUID) (recorded bool, changes int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT s.history_recorded_at IS NOT NULL,
			(SELECT count(*) FROM asset_scan_changes c WHERE c.scan_id = s.id) FROM scans s WHERE s.id = $1`, id).Scan(&recorded, &changes))
		return recorded, changes
	}
	recorded, changes := state(partial)
	require.False(t, recorded, "a partial scan is no scan to compare with")
	require.Zero(t, changes)
	recorded, changes = state(complete)
	require.True(t, recorded)
	require.Equal(t, 1, changes)
}
