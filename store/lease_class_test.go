package store_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// TestLeaseSkipsWholeClassesTheWorkerCannotRun: older tasks that need a
// capability the worker lacks, or are of another task type, are passed over
// as classes; tasks whose requirements the worker meets — however their
// JSON is spelled — are leased in age order across classes.
func TestLeaseSkipsWholeClassesTheWorkerCannotRun(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	w := createWorker(t, s, b.pool, workerOpts{Capacity: 10, Capabilities: `{"plugins": ["dns", "http"], "region": "eu"}`})
	assign(t, s, b.org.ID, w.ID)

	createTasks(t, s, b.org.ID, 30, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"plugins": ["nmap"]}`)})
	createTasks(t, s, b.org.ID, 30, store.CreateTaskParams{TaskType: "ai"})
	first := createTask(t, s, b.org.ID, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"region": "eu", "plugins": ["http"]}`)})
	second := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	third := createTask(t, s, b.org.ID, store.CreateTaskParams{RequiredCapabilities: json.RawMessage(`{"plugins":["http"],"region":"eu"}`)})

	require.ElementsMatch(t, []uuid.UUID{first.ID, second.ID}, leaseTaskIDs(acquire(t, s, w.ID, 2).Leases), "oldest first, across classes")
	require.ElementsMatch(t, []uuid.UUID{third.ID}, leaseTaskIDs(acquire(t, s, w.ID, 10).Leases))
	require.Empty(t, acquire(t, s, w.ID, 10).Leases, "nothing else this worker can run")
}
