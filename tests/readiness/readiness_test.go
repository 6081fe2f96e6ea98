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

// TestReadyzFollowsTheSchemaVersion: a replica is ready only on the schema
// its binary was built for — not behind it, and not ahead of it (a newer
// schema may change the rules its statements must keep).
func TestReadyzFollowsTheSchemaVersion(t *testing.T) {
	g := harness.Start(t)
	client := g.HTTPClient(nil)
	for _, c := range []struct {
		shift int
		want  string
	}{{+1, "ahead"}, {-2, "behind"}, {+1, "ok"}} {
		_, err := g.Pool.Exec(context.Background(), `UPDATE schema_migrations SET version = version + $1`, c.shift)
		require.NoError(t, err)
		r := probe(t, client, g.URL+"/readyz")
		require.Equal(t, c.want, r.checks["schema"])
		if c.want == "ok" {
			require.Equal(t, http.StatusOK, r.status)
		} else {
			require.Equal(t, http.StatusServiceUnavailable, r.status)
		}
	}
}
