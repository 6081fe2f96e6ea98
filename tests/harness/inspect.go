package harness

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Small readers of the gateway's state and output the tests share.

// Ptr is a pointer to v, for optional request fields.
func Ptr[T any](v T) *T { return &v }

// CountRows counts a table's rows in the gateway's database.
func CountRows(t testing.TB, g *Gateway, table string) int {
	t.Helper()
	var n int
	require.NoError(t, g.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// Scrape reads /metrics from the gateway's main listener with token and
// returns every sample by its series (name{labels} as exposed).
func Scrape(t testing.TB, g *Gateway, token string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := g.HTTPClient(nil).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	return ParseSamples(t, string(body))
}

// ParseSamples parses a Prometheus exposition into samples by series.
func ParseSamples(t testing.TB, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// Truncate shortens long output for a test log.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + strings.Repeat(".", 3)
}

// Long reports FAULTS_LONG=1 (`make faults`): load tests run their long
// form; `make test` runs the short one, with the same assertions.
func Long() bool { return os.Getenv("FAULTS_LONG") == "1" }

// WaitingPolls counts polls waiting in a process gateway: the only outside
// sign is the workers' last_seen_at, so count workers seen with no lease.
func WaitingPolls(t testing.TB, g *Gateway) int {
	var n int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM workers WHERE last_seen_at IS NOT NULL`).Scan(&n))
	return n
}
