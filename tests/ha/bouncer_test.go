package ha

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pgbouncer"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
)

// bouncerPoolSize is the server connections PgBouncer keeps per database:
// fewer than the gateways' pools together, so every server connection
// serves transactions of many client connections in turn, as in
// production.
const bouncerPoolSize = 6

// startBouncer runs PgBouncer (transaction pooling, poolSize server
// connections per database) in front of this binary's cluster, installing
// Debian's pgbouncer first when it is missing and this is root; the test
// is skipped when it cannot be.
func startBouncer(t *testing.T, poolSize int) *pgbouncer.Bouncer {
	t.Helper()
	if pgbouncer.Binary() == "" {
		if err := harness.AptInstall("pgbouncer"); err != nil {
			t.Skipf("pgbouncer is not installed: %v", err)
		}
		require.NotEmpty(t, pgbouncer.Binary(), "apt-get installed pgbouncer but its binary is missing")
	}
	dir, err := os.MkdirTemp("", "gateway-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cluster := storetest.Cluster()
	b, err := pgbouncer.Start(context.Background(), pgbouncer.Options{
		Dir: dir, ServerHost: "127.0.0.1", ServerPort: cluster.Port(), PoolSize: poolSize})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

// bouncedDatabase is a fresh test database that gateways query through b
// and LISTEN on directly.
func bouncedDatabase(t *testing.T, b *pgbouncer.Bouncer) harness.Database {
	t.Helper()
	direct := storetest.NewDatabase(t)
	pooled, err := b.Route(direct)
	require.NoError(t, err)
	return harness.Database{URL: pooled, ListenURL: direct}
}

// databaseName is the database of a URL.
func databaseName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return strings.TrimPrefix(u.Path, "/")
}
