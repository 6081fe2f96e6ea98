package netfaults

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
)

// finish stops the workload, its tasks done, and judges the run: the
// answers of every call it recorded (requireOnly503), then the faults
// checker — the invariants in SQL and the lease model over the history.
// It logs what this package counts besides, then the summary line.
func finish(t *testing.T, w *faults.Workload, extra string, injected ...faults.Fault) {
	t.Helper()
	w.Stop()
	unavailable, transportErrors := requireOnly503(t, w.History().Calls())
	t.Logf("%s: answers_503=%d transport_errors=%d %s", t.Name(), unavailable, transportErrors, extra)
	faults.Summarize(t, faults.Check(t, w), injected...)
}

// requireOnly503 requires that the gateway never answered a 5xx but 503,
// and every 503 as problem+json saying when to retry (Retry-After). It
// counts the 503s and the calls that got no answer.
func requireOnly503(t *testing.T, calls []faults.Call) (unavailable, transportErrors int) {
	t.Helper()
	bad := 0
	for _, c := range calls {
		switch {
		case c.Status == 0:
			transportErrors++
		case c.Status == http.StatusServiceUnavailable && c.RetryAfter != "" && c.ContentType == "application/problem+json":
			unavailable++
		case c.Status >= 500:
			bad++
			t.Errorf("bad 5xx: %s to %s answered %d %q (Retry-After %q, %s)", c.Op, c.Replica, c.Status, c.Code, c.RetryAfter, c.ContentType)
		}
	}
	require.Zero(t, bad, "5xx other than 503 with Retry-After, as problem+json")
	return unavailable, transportErrors
}
