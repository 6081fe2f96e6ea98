package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// prober measures how long the tasks of a worker that talked only to a
// replica that died stay stranded: it leases probe tasks through that
// replica alone, the replica is killed, the prober goes silent, and the
// workload's raw clients are then allowed to take the tasks over.
type prober struct {
	w      *Workload
	c      *RawClient
	rounds []probeRound
}

// probeRound is one kill: the tasks stranded and when the kill was sent.
type probeRound struct {
	tasks    []uuid.UUID
	killedAt time.Time
}

const probeTasks = 2

func newProber(w *Workload) *prober {
	c := w.RawClient("prober", Plan{MaxTasks: probeTasks, WaitSeconds: 5}, nil)
	return &prober{w: w, c: c}
}

// strand leases fresh probe tasks through the replica at url only. Their
// capability is new, so no other worker can lease them yet.
func (p *prober) strand(url string) {
	p.w.t.Helper()
	capability := fmt.Sprintf("probe-%d", len(p.rounds)+1)
	tasks := p.w.CreateTasks(probeTasks, map[string]any{capability: true})
	p.c.url = func() string { return url }
	p.c.Advertise(map[string]any{capability: true})
	var leased []uuid.UUID
	for range 5 {
		for _, l := range p.c.Poll(p.w.ctx) {
			leased = append(leased, l.Task.ID)
		}
		if len(leased) == probeTasks {
			break
		}
	}
	require.ElementsMatch(p.w.t, tasks, leased, "the prober leases its tasks through %s", url)
	p.rounds = append(p.rounds, probeRound{tasks: tasks})
	p.w.caps.add(capability, true) // from now on, any raw client may take them over
}

// killed records when the replica of the last round was killed.
func (p *prober) killed(at time.Time) { p.rounds[len(p.rounds)-1].killedAt = at }

// report logs, for every stranded task, the time from the kill to the
// first lease of another worker (the database's started_at of that attempt).
func (p *prober) report(t *testing.T) {
	t.Helper()
	var takeovers []time.Duration
	for _, r := range p.rounds {
		for _, task := range r.tasks {
			var at time.Time
			require.NoError(t, p.w.g.Pool.QueryRow(context.Background(), `
				SELECT min(a.started_at) FROM worker_task_attempts a JOIN workers w ON w.id = a.worker_id
				WHERE a.task_id = $1 AND w.name <> $2`, task, p.c.name).Scan(&at))
			takeovers = append(takeovers, at.Sub(r.killedAt))
		}
	}
	if len(takeovers) == 0 {
		return
	}
	slices.Sort(takeovers)
	t.Logf("takeover after kill -9 (lease %ds): n=%d min=%s median=%s max=%s — from SIGKILL of the only replica a worker "+
		"talked to until another worker leased its task: the lease's remaining time, then a surviving replica's sweeper "+
		"pass, the retry back-off (≤%.1fs) and a waiting poll's wake-up",
		leaseSeconds, len(takeovers), takeovers[0].Round(time.Millisecond), takeovers[len(takeovers)/2].Round(time.Millisecond),
		takeovers[len(takeovers)-1].Round(time.Millisecond), retryMost)
}
