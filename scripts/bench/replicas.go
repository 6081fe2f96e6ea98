package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// replicasConfig is the replicas scenario: the throughput and latency
// scenarios run again for each number of gateway replicas, all on one
// database, with the workers spread over the replicas.
type replicasConfig struct {
	counts     []int
	throughput throughputConfig
	latency    latencyConfig
}

// replicaFigures is one replica count's figures.
type replicaFigures struct {
	Replicas         int      `json:"replicas"`
	TasksPerSec      *float64 `json:"tasks_per_sec"`
	Speedup          *float64 `json:"speedup_vs_first"`
	GatewayCPUCores  *float64 `json:"gateway_cpu_cores"`
	PostgresCPUCores *float64 `json:"postgres_cpu_cores"`
	PostgresMsTask   *float64 `json:"postgres_cpu_ms_per_task"`
	MachineCPUCores  *float64 `json:"machine_cpu_cores"`
	WakeP50          *float64 `json:"wake_p50_ms"`
	WakeP99          *float64 `json:"wake_p99_ms"`
	Verified         bool     `json:"verified"`
	// PGWaits is where PostgreSQL's backends were during the throughput
	// round (-pg-waits): what it waits on where it saturates.
	PGWaits []waitShare `json:"pg_waits,omitempty"`
}

// replicasVerification is every round's verification.
type replicasVerification struct{ rounds []string }

func (v replicasVerification) String() string { return strings.Join(v.rounds, "; ") }

// runReplicas runs, for each replica count, the throughput scenario (its
// tasks spread over several organizations) and then the latency scenario
// (tasks created through the first replica, pollers on all of them, so a
// wake-up crosses replicas through PostgreSQL's NOTIFY). Gateway CPU is
// summed over the replicas; where the rate stops growing with replicas
// while PostgreSQL's CPU nears what the machine has, PostgreSQL is the
// limit.
func runReplicas(ctx context.Context, s *Stack, c replicasConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "replicas", Tasks: c.throughput.tasks, Workers: c.throughput.workers, Batch: c.throughput.batch,
		CompleteMany: c.throughput.completeMany, Next: c.throughput.next, Polls: c.latency.polls, Samples: c.latency.samples, Orgs: c.throughput.orgs}
	v := replicasVerification{}
	r.Verification, r.Verified = &v, true
	defer func() { _ = s.SetReplicas(context.WithoutCancel(ctx), 1) }()
	for _, n := range c.counts {
		logf("replicas: %d gateway replicas", n)
		if err := s.SetReplicas(ctx, n); err != nil {
			return r, err
		}
		tp, err := runThroughput(ctx, s, c.throughput, logf)
		if err != nil {
			return r, fmt.Errorf("%d replicas, throughput: %w", n, err)
		}
		lat, err := runLatency(ctx, s, c.latency, logf)
		if err != nil {
			return r, fmt.Errorf("%d replicas, latency: %w", n, err)
		}
		f := replicaFigures{Replicas: n, TasksPerSec: tp.TasksPerSec, GatewayCPUCores: tp.GatewayCPUCores,
			PostgresCPUCores: tp.PostgresCPUCores, PostgresMsTask: tp.PostgresCPUMsPerTask, MachineCPUCores: tp.MachineCPUCores,
			WakeP50: lat.WakeP50, WakeP99: lat.WakeP99, Verified: tp.Verified && lat.Verified, PGWaits: tp.PGWaits}
		if len(r.ReplicaRounds) > 0 && r.ReplicaRounds[0].TasksPerSec != nil && f.TasksPerSec != nil {
			f.Speedup = ptr(round(*f.TasksPerSec / *r.ReplicaRounds[0].TasksPerSec, 2))
		}
		r.ReplicaRounds = append(r.ReplicaRounds, f)
		r.Verified = r.Verified && f.Verified
		v.rounds = append(v.rounds, fmt.Sprintf("%d replicas: throughput %s, latency %s", n, tp.Verification, lat.Verification))
	}
	return r, nil
}

// printReplicas writes the replicas scenario's table.
func printReplicas(w io.Writer, r *Result) {
	f := func(p *float64) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprint(*p)
	}
	fmt.Fprintf(w, "replicas: %d tasks over %d organizations per round, %d workers (batch %d), then %d latency samples over %d idle polls\n",
		r.Tasks, r.Orgs, r.Workers, r.Batch, r.Samples, r.Polls)
	fmt.Fprintf(w, "  %-9s %-11s %-8s %-13s %-14s %-15s %-14s %-10s %-10s\n",
		"replicas", "tasks/s", "×first", "gateway CPU", "postgres CPU", "pg ms/task", "machine CPU", "wake p50", "wake p99")
	for _, x := range r.ReplicaRounds {
		fmt.Fprintf(w, "  %-9d %-11s %-8s %-13s %-14s %-15s %-14s %-10s %-10s\n", x.Replicas, f(x.TasksPerSec), f(x.Speedup),
			f(x.GatewayCPUCores), f(x.PostgresCPUCores), f(x.PostgresMsTask), f(x.MachineCPUCores), f(x.WakeP50)+" ms", f(x.WakeP99)+" ms")
	}
	for _, x := range r.ReplicaRounds {
		if len(x.PGWaits) == 0 {
			continue
		}
		var parts []string
		for _, s := range x.PGWaits[:min(8, len(x.PGWaits))] {
			parts = append(parts, fmt.Sprintf("%s %.2f", s.Event, s.Backends))
		}
		fmt.Fprintf(w, "  pg backends, %d replicas (average per sample): %s\n", x.Replicas, strings.Join(parts, ", "))
	}
}

// replicasTimeLimit replaces the default -time-limit: each round inserts
// and drains a million tasks.
const replicasTimeLimit = 60 * time.Minute

// parseCounts reads "1,2,3".
func parseCounts(s string) ([]int, error) {
	var counts []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > 16 {
			return nil, fmt.Errorf("bad replica count %q (1 to 16)", part)
		}
		counts = append(counts, n)
	}
	return counts, nil
}
