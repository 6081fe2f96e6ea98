package ha

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// TestExecModeFollowsTheConnection: -database-exec-mode=auto keeps named
// statements on a direct connection and picks cache_describe behind
// PgBouncer; a mode in the URL or the flag wins.
func TestExecModeFollowsTheConnection(t *testing.T) {
	t.Parallel()
	b := startBouncer(t, bouncerPoolSize)
	direct := storetest.NewDatabase(t)
	pooled, err := b.Route(direct)
	require.NoError(t, err)
	ctx := context.Background()
	for _, c := range []struct {
		url, flag string
		want      pgx.QueryExecMode
	}{
		{direct, store.ExecModeAuto, pgx.QueryExecModeCacheStatement},
		{pooled, store.ExecModeAuto, pgx.QueryExecModeCacheDescribe},
		{pooled + "&default_query_exec_mode=exec", store.ExecModeAuto, pgx.QueryExecModeExec},
		{pooled, "simple_protocol", pgx.QueryExecModeSimpleProtocol},
	} {
		got, err := store.ChooseExecMode(ctx, c.url, c.flag)
		require.NoError(t, err)
		require.Equal(t, c.want, got.Mode, "%s with -database-exec-mode=%s: %s", c.url, c.flag, got.Reason)
	}
	_, err = store.ChooseExecMode(ctx, direct, "prepared")
	require.Error(t, err)
}

// TestNamedStatementsBreakBehindPgBouncer is the control of the PgBouncer
// tests: two client connections sharing PgBouncer's one server connection
// fail with pgx's default named statements (the second prepares a name
// the first left on the server connection), and work with cache_describe,
// which leaves nothing behind.
func TestNamedStatementsBreakBehindPgBouncer(t *testing.T) {
	t.Parallel()
	b := startBouncer(t, 1)
	pooled, err := b.Route(storetest.NewDatabase(t))
	require.NoError(t, err)
	ctx := context.Background()

	run := func(mode pgx.QueryExecMode) error {
		pool, err := store.OpenPool(ctx, pooled, func(cfg *pgxpool.Config) {
			cfg.ConnConfig.DefaultQueryExecMode = mode
			cfg.MaxConns, cfg.MinConns = 2, 0
		})
		require.NoError(t, err)
		defer pool.Close()
		// Two client connections, held at once so they are distinct.
		a, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer a.Release()
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		var errs []error
		for _, conn := range []*pgxpool.Conn{a, c, a, c} {
			var n int
			errs = append(errs, conn.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE priority > $1`, 0).Scan(&n))
		}
		return errors.Join(errs...)
	}

	err = run(pgx.QueryExecModeCacheStatement)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "named statements through transaction pooling fail")
	require.Contains(t, []string{"42P05", "26000"}, pgErr.Code, "prepared statement already exists, or does not exist: %v", err)

	require.NoError(t, run(pgx.QueryExecModeCacheDescribe))
}
