package readiness

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
)

type readiness struct {
	status   int
	checks   map[string]string
	duration time.Duration
}

func probe(t *testing.T, client *http.Client, url string) readiness {
	t.Helper()
	start := time.Now()
	res, err := client.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var v struct {
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return readiness{status: res.StatusCode, checks: v.Checks, duration: time.Since(start)}
}

// TestReadyzFollowsTheDatabase: /readyz answers 503, quickly, while
// PostgreSQL is down and 200 again once it is back — on the main listener
// and on the ops listener. Not parallel: it stops the shared cluster.
func TestReadyzFollowsTheDatabase(t *testing.T) {
	g := harness.Start(t)
	ops := httptest.NewServer(g.Server.OpsHandler())
	t.Cleanup(ops.Close)
	mainClient, opsClient := g.HTTPClient(nil), &http.Client{Timeout: 30 * time.Second}
	urls := map[string]*http.Client{g.URL + "/readyz": mainClient, ops.URL + "/readyz": opsClient}

	for url, c := range urls {
		r := probe(t, c, url)
		require.Equal(t, http.StatusOK, r.status, url)
		require.Equal(t, map[string]string{"database": "ok", "schema": "ok", "listen": "ok"}, r.checks)
	}

	cluster := storetest.Cluster()
	require.NoError(t, cluster.StopImmediate())
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = cluster.Resume(context.Background())
		}
	})

	for url, c := range urls {
		var last readiness
		harness.WaitFor(t, 15*time.Second, "readyz 503 at "+url, func() bool {
			last = probe(t, c, url)
			require.Less(t, last.duration, 3*time.Second, "readiness is bounded")
			return last.status == http.StatusServiceUnavailable
		})
		require.Equal(t, "unreachable", last.checks["database"])
	}
	// The LISTEN connection is noticed lost too.
	harness.WaitFor(t, 15*time.Second, "LISTEN connection lost", func() bool { return !g.Server.ListenerReady() })
	r := probe(t, opsClient, ops.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, "disconnected", r.checks["listen"])

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, cluster.Resume(ctx))
	resumed = true

	for url, c := range urls {
		var last readiness
		harness.WaitFor(t, 30*time.Second, "readyz 200 at "+url, func() bool {
			last = probe(t, c, url)
			return last.status == http.StatusOK
		})
		require.Equal(t, map[string]string{"database": "ok", "schema": "ok", "listen": "ok"}, last.checks)
	}
}

// TestReadyzFollowsTheSchemaVersion: a replica is ready within the upgrade
// window (package migrations): on its own expand version and on a newer
// one (the next release's expand migrations, applied or being applied),
// until a contract step needs a newer release; never behind its own.
func TestReadyzFollowsTheSchemaVersion(t *testing.T) {
	g := harness.Start(t)
	client := g.HTTPClient(nil)
	exec := func(sql string, args ...any) {
		_, err := g.Pool.Exec(context.Background(), sql, args...)
		require.NoError(t, err)
	}
	shift := `UPDATE schema_migrations SET version = version + $1, dirty = $2`
	contract := `CREATE TABLE IF NOT EXISTS ` + migrations.ContractTable + ` (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
		TRUNCATE ` + migrations.ContractTable
	latest, err := migrations.Latest()
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		edit func()
		want string
	}{
		{"the next release's expand applied", func() { exec(shift, +1, false) }, "ok"},
		{"the next release's expand being applied", func() { exec(shift, +1, true) }, "ok"},
		{"its own contract step run", func() {
			exec(contract)
			exec(`INSERT INTO `+migrations.ContractTable+` VALUES ($1, false)`, latest)
		}, "ok"},
		{"the next release's contract step run", func() { exec(`UPDATE ` + migrations.ContractTable + ` SET version = version + 1`) }, "contracted"},
		{"behind", func() { exec(`DROP TABLE ` + migrations.ContractTable); exec(shift, -3, false) }, "behind"},
		{"its own expand being applied", func() { exec(shift, +1, true) }, "behind"},
		{"its own expand applied", func() { exec(shift, 0, false) }, "ok"},
	} {
		c.edit()
		r := probe(t, client, g.URL+"/readyz")
		require.Equal(t, c.want, r.checks["schema"], c.name)
		if c.want == "ok" {
			require.Equal(t, http.StatusOK, r.status, c.name)
		} else {
			require.Equal(t, http.StatusServiceUnavailable, r.status, c.name)
		}
	}
}
