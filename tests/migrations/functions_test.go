package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store/storetest"
)

// TestFunctionsStepOnlyOnItsOwnSchema: Up puts back the functions' current
// definitions on a database at the release's expand version, and leaves
// the bodies of a newer release (a schema past it) alone, as a replica of
// the previous release restarting during an upgrade must.
func TestFunctionsStepOnlyOnItsOwnSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	latest, err := migrations.Latest()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var source string
	defs, err := migrations.Functions()
	require.NoError(t, err)
	for _, f := range defs {
		if f.Name == "gateway_glob_like" {
			source = f.Body
		}
	}
	require.NotEmpty(t, source)
	body := func() string {
		var b string
		require.NoError(t, conn.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'gateway_glob_like'`).Scan(&b))
		return b
	}
	require.Equal(t, source, body())

	// A newer release expanded the schema and wrote its own body.
	const newer = "SELECT p || ' (newer)'"
	_, err = conn.Exec(ctx, `CREATE OR REPLACE FUNCTION gateway_glob_like(p text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$`+newer+`$$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE schema_migrations SET version = $1`, latest+1)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, url))
	require.Equal(t, newer, body(), "Up replaced a newer release's function")

	// Back at this release's version (as if the newer one had never run):
	// the current definition again, from replicas starting together.
	_, err = conn.Exec(ctx, `UPDATE schema_migrations SET version = $1`, latest)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = migrations.Up(ctx, url) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, source, body())
}
