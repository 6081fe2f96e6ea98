package netfaults

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/faults"
)

// finish stops the workload, its tasks done, and judges the run: the
// answers of every call it recorded (faults.RequireOnly503), then the faults
// checker — the invariants in SQL and the lease model over the history.
// It logs what this package counts besides, then the summary line.
func finish(t *testing.T, w *faults.Workload, extra string, injected ...faults.Fault) {
	t.Helper()
	w.Stop()
	unavailable, transportErrors := faults.RequireOnly503(t, w.History().Calls())
	t.Logf("%s: answers_503=%d transport_errors=%d %s", t.Name(), unavailable, transportErrors, extra)
	faults.Summarize(t, faults.Check(t, w), injected...)
}
