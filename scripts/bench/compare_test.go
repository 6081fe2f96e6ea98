package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1000}, 10},
	} {
		in := slices.Clone(tc.in)
		got := median(in, 3)
		if got == nil || *got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("median reordered its input: %v", in)
		}
	}
	if got := median(nil, 1); got != nil {
		t.Errorf("median(nil) = %v, want nil", *got)
	}
}

func TestSummarizeComparison(t *testing.T) {
	sum := &Result{Scenario: "throughput-vs-river", compareFigures: &compareFigures{Runs: 3}}
	summarizeComparison(sum,
		[]float64{9000, 11000, 10000},  // gateway tasks/s
		[]float64{20000, 25000, 21000}, // river jobs/s
		[]float64{0.3, 0.2, 0.25},      // gateway postgres ms per task
		[]float64{0.05, 0.04, 0.1},     // river postgres ms per job
	)
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("gateway median", sum.GatewayTasksPerSec, 10000)
	check("river median", sum.RiverJobsPerSec, 21000)
	check("gateway/river", sum.GatewayRiverRatio, 0.476) // 10000 / 21000
	check("gateway pg", sum.GatewayPGCPUMsPerTask, 0.25)
	check("river pg", sum.RiverPGCPUMsPerJob, 0.05)
	check("pg ratio", sum.PGCPUPerTaskRatio, 5)

	// Missing River figures leave the ratios out rather than dividing by 0.
	sum = &Result{compareFigures: &compareFigures{}}
	summarizeComparison(sum, []float64{100}, nil, []float64{0.3}, nil)
	if sum.GatewayRiverRatio != nil || sum.PGCPUPerTaskRatio != nil {
		t.Errorf("ratios without River figures: %v, %v", sum.GatewayRiverRatio, sum.PGCPUPerTaskRatio)
	}
}

func TestParseLoadAvg(t *testing.T) {
	got, err := parseLoadAvg("8.27 10.46 8.30 3/456 1234\n")
	if err != nil || !slices.Equal(got, []float64{8.27, 10.46, 8.30}) {
		t.Fatalf("parseLoadAvg = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1.0 2.0", "1.0 x 3.0 1/2 3"} {
		if _, err := parseLoadAvg(bad); err == nil {
			t.Errorf("parseLoadAvg(%q) accepted it", bad)
		}
	}
}

func TestParseRiverLine(t *testing.T) {
	l, err := parseRiverLine(`{"event":"done","jobs":100000,"completed":100000,"failed":0,"seconds":4.5,"jobs_per_sec":22222.2,"workers":2000,"fetch_cooldown_ms":2,"fetch_poll_interval_ms":20,"max_conns":4,"river_version":"v0.51.2"}`)
	if err != nil {
		t.Fatal(err)
	}
	if l.Event != "done" || l.Completed != 100000 || l.Seconds != 4.5 || l.JobsPerSec != 22222.2 || l.MaxConns != 4 || l.FetchCooldownMs != 2 {
		t.Errorf("parsed %+v", l)
	}
	for _, bad := range []string{"go: downloading something", `{"event":"started"}`, ""} {
		if _, err := parseRiverLine(bad); err == nil {
			t.Errorf("parseRiverLine(%q) accepted it", bad)
		}
	}
}

// The comparison's keys appear in the JSON of its results only.
func TestCompareKeysInJSON(t *testing.T) {
	plain, err := json.Marshal(&Result{Scenario: "throughput", TasksPerSec: ptr(1.0), PostgresCPUMsPerTask: ptr(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "river") || strings.Contains(string(plain), `"run"`) {
		t.Errorf("a plain throughput result has comparison keys: %s", plain)
	}
	if !strings.Contains(string(plain), `"postgres_cpu_ms_per_task":0.5`) {
		t.Errorf("postgres_cpu_ms_per_task missing: %s", plain)
	}
	sum := &Result{Scenario: "throughput-vs-river", compareFigures: &compareFigures{Runs: 1}}
	summarizeComparison(sum, []float64{5000}, []float64{20000}, []float64{0.4}, []float64{0.1})
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{
		"gateway_tasks_per_sec": 5000, "river_jobs_per_sec": 20000, "gateway_river_ratio": 0.25,
		"gateway_postgres_cpu_ms_per_task": 0.4, "river_postgres_cpu_ms_per_job": 0.1, "postgres_cpu_per_task_ratio": 4, "runs": 1,
	} {
		if m[key] != want {
			t.Errorf("%s = %v, want %v (in %s)", key, m[key], want, b)
		}
	}
}
