package faults

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/worker-gateway/gateway/tests/harness"
)

// commitFailpoints are the places an armed replica may crash: around the
// COMMIT of the lease, result and completion transactions, and between a
// result batch's commit and its answer.
var commitFailpoints = []string{
	"before-commit:acquire-leases", "after-commit:acquire-leases",
	"before-commit:accept-result-batch", "after-commit:accept-result-batch",
	"before-commit:complete-attempts", "after-commit:complete-attempts",
	"results-after-commit",
}

// armed is the environment of a replica that crashes (exit 137) at each
// commit failpoint with probability p.
func armed(p string) []string {
	fps := make([]string, len(commitFailpoints))
	for i, fp := range commitFailpoints {
		fps[i] = fp + "@" + p
	}
	return []string{"GATEWAY_FAILPOINTS=" + strings.Join(fps, ",")}
}

// The kill scenario runs waves of tasks through raw clients and Go
// runtimes while one replica is killed with SIGKILL every few hundred
// milliseconds to two seconds and another crashes itself at random commit
// failpoints; both are restarted each time. Before some kills, a worker
// leases tasks through the victim alone, to measure how long a dead
// replica's leases strand their tasks.
//
// KillReplicasUnderLoad runs it over db (harness.Database{}: a fresh
// database, directly), for tests/ha to run it through PgBouncer too.
func KillReplicasUnderLoad(t *testing.T, db harness.Database) {
	sc := scaleOf()
	cl := startCluster(t, db, nil, armed("0.02"))
	w := newWorkload(t, cl)
	w.startRaw(sc.RawClients, Plan{MaxTasks: 2, WaitSeconds: 2, Batches: batches, FailRate: 0.1, AbandonRate: 0.05})
	w.startRuntimes(sc.Runtimes)
	probe := newProber(w)
	maxProbes := 2
	if sc.Long {
		maxProbes = 10
	}

	start := time.Now()
	nextKill := start
	for waves := 0; waves < sc.Waves || time.Since(start) < sc.Faults; {
		if waves < sc.Waves && time.Since(start) >= time.Duration(waves)*sc.WaveEvery {
			w.wave(sc)
			waves++
		}
		if time.Now().After(nextKill) && time.Since(start) < sc.Faults {
			victim := 1 + rand.IntN(2)
			probing := victim == 1 && len(probe.rounds) < maxProbes
			if probing {
				probe.strand(cl.url(victim))
			}
			at := cl.kill(victim)
			if probing {
				probe.killed(at)
			}
			nextKill = time.Now().Add(time.Duration(300+rand.IntN(1700)) * time.Millisecond)
		}
		cl.reviveCrashed()
		time.Sleep(20 * time.Millisecond) // the fault loop's pace, not a synchronisation
	}
	cl.calmDown()
	w.drain(sc.Drain)
	probe.report(t)
	Summarize(t, Check(t, w), cl.faults()...)
}
