package netfaults

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/worker-gateway/gateway/tests/harness"
)

// metricSum adds up the samples of one metric of a replica whose labels
// include every one of labels as substrings (`code="5` for every 5xx); ok is false when the replica
// could not be scraped.
func metricSum(g *harness.Gateway, p *harness.Process, name string, labels ...string) (sum float64, ok bool) {
	req, err := http.NewRequest(http.MethodGet, p.URL+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	res, err := g.HTTPClient(nil).Do(req)
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, false
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		// Label values may hold spaces (route="POST /v1/leases"): the
		// value is after the last one.
		line := sc.Text()
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		series, value := line[:cut], line[cut+1:]
		metric, labelText, _ := strings.Cut(series, "{")
		if metric != name || !containsAll(labelText, labels) {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err() == nil
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// waitRecovered waits until every replica is ready again (/readyz checks
// the database, the schema and the LISTEN connection) and reports its
// LISTEN connection up in gateway_listen_connected.
func waitRecovered(t *testing.T, g *harness.Gateway, procs []*harness.Process) {
	t.Helper()
	for _, p := range procs {
		g.WaitReady(t, p)
		harness.WaitFor(t, 30*time.Second, "gateway_listen_connected 1 at "+p.URL, func() bool {
			v, ok := metricSum(g, p, "gateway_listen_connected")
			return ok && v == 1
		})
	}
}
