package upgrade

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/faults"
)

// scale is the size of a run: short by default (make test), long with
// FAULTS_LONG=1 (make faults).
type scale struct {
	RawClients, Runtimes, ReferenceWorkers int
	// Every Tick the load creates Tasks tasks for the raw clients and Go
	// runtimes and one for the reference workers.
	Tasks int
	Tick  time.Duration
	// Each step of the upgrade serves until Progress more tasks completed
	// and Serve has passed.
	Progress int
	Serve    time.Duration
	// AbandonRate is the raw clients' share of leases left to expire.
	AbandonRate float64
	Drain       time.Duration
}

func scaleOf() scale {
	if os.Getenv("FAULTS_LONG") == "1" {
		return scale{RawClients: 4, Runtimes: 2, ReferenceWorkers: 2, Tasks: 3, Tick: 100 * time.Millisecond,
			Progress: 80, Serve: 20 * time.Second, AbandonRate: 0.03, Drain: 5 * time.Minute}
	}
	return scale{RawClients: 2, Runtimes: 1, ReferenceWorkers: 1, Tasks: 2, Tick: 200 * time.Millisecond,
		Progress: 10, Drain: 2 * time.Minute}
}

// The reference worker's tasks: its sleep plugin, briefly. Neither the raw
// clients nor the Go runtimes advertise its plugins.
const referencePayload = `{"plugin": "sleep", "input": {"seconds": 0.2}}`

var referenceCaps = map[string]any{"plugins": []string{"sleep"}}

// load creates tasks continuously while the upgrade goes on, and counts
// what was created.
type load struct {
	t       *testing.T
	w       *faults.Workload
	pool    *pgxpool.Pool
	sc      scale
	created []uuid.UUID
}

// tick creates one round of tasks.
func (l *load) tick() {
	l.t.Helper()
	l.created = append(l.created, l.w.CreateTasks(l.sc.Tasks, faults.LoadCapabilities())...)
	l.created = append(l.created, l.w.CreateTasksWith(1, referenceCaps, referencePayload)...)
}

// track counts tasks created outside the load's ticks.
func (l *load) track(ids ...uuid.UUID) { l.created = append(l.created, ids...) }

// until creates tasks every tick until cond holds.
func (l *load) until(what string, timeout time.Duration, cond func() bool) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			l.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		l.tick()
		time.Sleep(l.sc.Tick) // the load's pace, not a synchronisation
	}
}

// progress goes on creating tasks until Progress more tasks completed and
// Serve has passed: each step of the upgrade serves work.
func (l *load) progress(step string) {
	l.t.Helper()
	base, began := l.completed(), time.Now()
	l.until(step+": tasks completed", 3*time.Minute+l.sc.Serve, func() bool {
		return time.Since(began) >= l.sc.Serve && l.completed() >= base+l.sc.Progress
	})
	l.t.Logf("%s: %d tasks completed in %s", step, l.completed()-base, time.Since(began).Round(time.Millisecond))
}

// during runs op while tasks go on being created and returns its error.
func (l *load) during(what string, op func() error) error {
	l.t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	var (
		err      error
		finished bool
	)
	l.until(what, 5*time.Minute, func() bool {
		select {
		case err = <-done:
			finished = true
		default:
		}
		return finished
	})
	return err
}

func (l *load) completed() int {
	l.t.Helper()
	var n int
	require.NoError(l.t, l.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM worker_tasks WHERE state = 'completed'`).Scan(&n))
	return n
}
