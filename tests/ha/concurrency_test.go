package ha

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pgbouncer"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestTwoReplicasThroughPgBouncer is tests/workerprotocol/concurrency_test.go's two
// replicas with every query through PgBouncer in transaction pooling mode
// (40 client connections on 6 server connections) and LISTEN on direct
// connections: every task is done exactly once, a poll waiting on one
// replica is woken by a task created through the other, and the server
// connections are left as found — no setting, no prepared statement
// carried over to the next client.
func TestTwoReplicasThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := startBouncer(t, bouncerPoolSize)
	db := bouncedDatabase(t, b)
	g, procs := harness.StartProcessesOn(t, 2, db)
	org := g.NewOrganization(t, "acme")
	tasks := 300
	if long() {
		tasks = 2000
	}

	began := time.Now()
	stops := harness.RunEveryTaskOnce(t, g, procs, org, 10, tasks)
	t.Logf("%d tasks through PgBouncer in %s", tasks, time.Since(began).Round(time.Millisecond))

	for _, stop := range stops {
		stop() // the poll below must be the only one
	}

	wakeUpAcrossReplicas(t, g, procs, org)
	requireCleanServerConnections(t, b, databaseName(t, db.URL))
}

// wakeUpAcrossReplicas: a poll waiting on replica 1 gets a task created
// through replica 0, woken by NOTIFY sent through PgBouncer and heard on
// replica 1's direct LISTEN connection, before its 25 s wait ends.
func wakeUpAcrossReplicas(t *testing.T, g *harness.Gateway, procs []*harness.Process, org uuid.UUID) {
	t.Helper()
	w := g.NewWorker(t, "waker", 1, org)
	onB, err := apiclient.NewClientWithResponses(procs[1].URL, apiclient.WithHTTPClient(w.HTTP))
	require.NoError(t, err)
	got := harness.LeaseAsync(onB, apiclient.LeaseRequest{MaxTasks: harness.Ptr(1), WaitSeconds: harness.Ptr(25)})
	harness.WaitFor(t, 10*time.Second, "the poll on replica B", func() bool {
		var seen bool
		err := g.Pool.QueryRow(context.Background(), `SELECT last_seen_at IS NOT NULL FROM workers WHERE id = $1`, w.ID).Scan(&seen)
		return err == nil && seen
	})
	start := time.Now()
	task := g.CreateTask(t, org, harness.TaskSpec{})
	leases := <-got
	require.Len(t, leases, 1, "replica B's poll was woken by replica A's task")
	require.Equal(t, task, leases[0].Task.Id)
	t.Logf("wake-up across replicas: %s", time.Since(start).Round(time.Millisecond))
}

// requireCleanServerConnections holds every server connection PgBouncer
// has for the database (one open transaction per client connection, as
// many as the pool) and checks that none kept a setting or a prepared
// statement of the gateways: their set_config calls are transaction-local
// and their statements unnamed.
func requireCleanServerConnections(t *testing.T, b *pgbouncer.Bouncer, database string) {
	t.Helper()
	ctx := context.Background()
	backends := map[int32]bool{}
	var txs []pgx.Tx
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(ctx)
		}
	}()
	for range bouncerPoolSize {
		cfg, err := pgx.ParseConfig(b.URL(database))
		require.NoError(t, err)
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(ctx) })
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		txs = append(txs, tx)
		var (
			pid                                     int32
			planCache, seqscan, bitmap, merge, hash string
			prepared                                int
		)
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('plan_cache_mode'),
			current_setting('enable_seqscan'), current_setting('enable_bitmapscan'),
			current_setting('enable_mergejoin'), current_setting('enable_hashjoin'),
			(SELECT count(*) FROM pg_prepared_statements)`).Scan(&pid, &planCache, &seqscan, &bitmap, &merge, &hash, &prepared))
		backends[pid] = true
		require.Equal(t, []string{"auto", "on", "on", "on", "on"}, []string{planCache, seqscan, bitmap, merge, hash},
			"settings of server connection %d", pid)
		require.Zero(t, prepared, "prepared statements left on server connection %d", pid)
	}
	require.Len(t, backends, bouncerPoolSize, "each open transaction holds a server connection of its own")
}
