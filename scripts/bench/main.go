// Command bench is Worker Gateway's rerunnable benchmark.
//
// By default it brings up a private stack on this machine — PostgreSQL with
// its durable defaults, the schema, a dev CA and certificates, and the
// gateway built from this checkout and run as its own process on 127.0.0.1
// — runs the chosen scenarios against it, prints what it measured, and
// tears everything down again, also on Ctrl-C. With -gateway it targets an
// existing deployment instead and starts nothing.
//
// Linux only: resource figures come from /proc.
//
// Run `go run ./scripts/bench -h` for the flags; scripts/bench/README.md
// explains every number.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

const usageText = `go run ./scripts/bench [flags]

Benchmarks Worker Gateway with simulated workers speaking the HTTP/JSON
worker protocol over mTLS.

Scenarios (-scenario, comma-separated to run several on one stack):
  throughput  -tasks no-op tasks are inserted in bulk, then -workers simulated
              workers (each its own certificate and worker identity) loop:
              POST /v1/leases (max_tasks=-batch), then POST
              /v1/attempts/{id}/complete for each lease. Reports tasks/s from
              the workers' start to the last completion, and verifies in SQL
              that every task completed exactly once.
  latency     -polls idle long-polls are parked over -workers workers, then
              -samples tasks are created one at a time through POST /v1/tasks,
              -interval apart. Reports the wake latency: create call returned
              → a poller received the lease (p50/p90/p99/max).

Stack:
  default     a private PostgreSQL (temp dir, durable defaults), migrations,
              dev CA + certificates, and 'gateway serve' built from this
              checkout as a separate process on 127.0.0.1; all removed at exit.
  -gateway    an existing deployment; needs -database and -ca (see README.md).

Output: a human summary (on stderr with -json), and with -json one JSON
object per scenario on stdout. The exit status is 1 when a scenario failed or
its verification did not hold.

Flags:
`

// pgWaits turns on sampling of pg_stat_activity during measured windows.
var pgWaits bool

func main() {
	os.Exit(run())
}

func run() int {
	var (
		scenarios   = flag.String("scenario", "throughput", "scenarios to run: throughput, latency, or both comma-separated")
		tasks       = flag.Int("tasks", 20000, "throughput: number of tasks")
		workers     = flag.Int("workers", 32, "number of simulated workers (each its own certificate and worker identity)")
		batch       = flag.Int("batch", 1, "throughput: max_tasks per lease request")
		tpWait      = flag.Int("tp-wait", 1, "throughput: wait_seconds of each lease request")
		polls       = flag.Int("polls", 100, "latency: idle long-polls, spread over the workers")
		samples     = flag.Int("samples", 200, "latency: tasks created one at a time")
		interval    = flag.Duration("interval", 20*time.Millisecond, "latency: spacing of task creations")
		latWait     = flag.Int("lat-wait", 20, "latency: wait_seconds of each idle long-poll")
		timeLimit   = flag.Duration("time-limit", 5*time.Minute, "time limit per scenario (setup included); the scenario stops and fails when it is reached")
		jsonOut     = flag.Bool("json", false, "print one JSON object per scenario on stdout (the human summary goes to stderr)")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the load generator itself (this process, not the gateway) to this file")
		gatewayBin  = flag.String("gateway-bin", "", "private stack: run this prebuilt gateway binary instead of building ./server/cmd/gateway (its migrations must match this checkout's)")
		gatewayArgs = flag.String("gateway-args", "", "extra flags for 'gateway serve' in the private stack, space-separated (e.g. \"-db-max-conns 40\")")
		keep        = flag.Bool("keep", false, "keep the private stack's temp dir (gateway.log, PostgreSQL log and data) after exit")
		verbose     = flag.Bool("v", false, "log progress (bring-up, scenario phases)")

		gatewayURL   = flag.String("gateway", "", "existing deployment: gateway base URL (https://127.0.0.1:8443); starts nothing")
		databaseURL  = flag.String("database", "", "existing deployment: PostgreSQL URL of the gateway's database (setup, verification, statistics)")
		caFile       = flag.String("ca", "", "existing deployment: PEM CA certificate the gateway's server certificate chains to")
		token        = flag.String("token", "", "existing deployment: API token with the producer (or admin) scope; default: one is created in the database and revoked at exit")
		workerCerts  = flag.String("worker-certs", "", "existing deployment: directory of worker certificate pairs NAME.pem + NAME-key.pem; default: throwaway certificates are registered as new workers")
		gatewayPID   = flag.Int("gateway-pid", 0, "existing deployment: gateway process id, for its CPU and memory figures")
		postgresData = flag.String("postgres-data", "", "existing deployment: PostgreSQL data directory (its postmaster.pid), for PostgreSQL's CPU figure")
		allowRemote  = flag.Bool("allow-remote", false, "existing deployment: allow a gateway or database that is not on a loopback address")
	)
	flag.BoolVar(&pgWaits, "pg-waits", false, "sample pg_stat_activity every 20 ms during measured windows and report where backends spend time")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usageText)
		flag.PrintDefaults()
	}
	flag.Parse()

	logf := func(format string, args ...any) {
		if *verbose {
			fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
		}
	}
	warnf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench: %s\n", fmt.Sprintf(format, args...))
	}

	list := strings.Split(*scenarios, ",")
	for _, sc := range list {
		if !slices.Contains([]string{"throughput", "latency"}, sc) {
			warnf("unknown scenario %q (want throughput or latency)", sc)
			return 2
		}
	}
	if *tasks < 1 || *workers < 1 || *batch < 1 || *batch > 1000 || *polls < 1 || *samples < 1 || *interval <= 0 ||
		*tpWait < 0 || *latWait < 1 || *timeLimit <= 0 {
		warnf("flags out of range (tasks, workers, polls, samples ≥ 1; 1 ≤ batch ≤ 1000; tp-wait ≥ 0; lat-wait ≥ 1)")
		return 2
	}

	// The first Ctrl-C (or SIGTERM) ends the run and starts the teardown;
	// later ones are acknowledged but do not interrupt the teardown, so
	// PostgreSQL and the gateway are always stopped.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for range sigs {
			if ctx.Err() == nil {
				warnf("interrupted: stopping and tearing down")
				cancel()
			} else {
				warnf("still tearing down; please wait")
			}
		}
	}()

	pollsPerWorker := (*polls + *workers - 1) / *workers
	st, err := bringUp(ctx, stackConfig{
		gatewayURL: *gatewayURL, databaseURL: *databaseURL, caFile: *caFile, token: *token,
		workerCertDir: *workerCerts, gatewayPID: *gatewayPID, postgresData: *postgresData, allowRemote: *allowRemote,
		gatewayBin:     *gatewayBin,
		gatewayArgs:    strings.Fields(*gatewayArgs),
		pollsPerWorker: max(8, pollsPerWorker+1),
		maxPolls:       max(20000, *polls+*workers),
		keep:           *keep,
		logf:           logf,
	})
	if err != nil {
		warnf("bring-up failed: %v", err)
		return 1
	}
	defer st.Close()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			warnf("%v", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			warnf("%v", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}

	var human io.Writer = os.Stdout
	if *jsonOut {
		human = os.Stderr
	}
	status := 0
	for _, sc := range list {
		if ctx.Err() != nil {
			break
		}
		scCtx, scCancel := context.WithTimeout(ctx, *timeLimit)
		var r *Result
		switch sc {
		case "throughput":
			r, err = runThroughput(scCtx, st, throughputConfig{tasks: *tasks, workers: *workers, batch: *batch, wait: *tpWait}, logf)
		case "latency":
			r, err = runLatency(scCtx, st, latencyConfig{polls: *polls, workers: *workers, samples: *samples, interval: *interval, wait: *latWait}, logf)
		}
		scCancel()
		if err != nil {
			if r == nil {
				r = &Result{Scenario: sc}
			}
			r.Error = err.Error()
		}
		if r.Error != "" || !r.Verified {
			status = 1
		}
		r.printHuman(human)
		if *jsonOut {
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
		}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		status = 1
	}
	return status
}

// Result is one scenario's figures. Keys that do not apply to a scenario
// are left out of the JSON.
type Result struct {
	Scenario string `json:"scenario"`
	Tasks    int    `json:"tasks,omitempty"`
	Workers  int    `json:"workers,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	Polls    int    `json:"polls,omitempty"`
	Samples  int    `json:"samples,omitempty"`

	WallSeconds float64  `json:"wall_seconds"`
	TasksPerSec *float64 `json:"tasks_per_sec,omitempty"`

	WakeP50         *float64 `json:"wake_p50_ms,omitempty"`
	WakeP90         *float64 `json:"wake_p90_ms,omitempty"`
	WakeP99         *float64 `json:"wake_p99_ms,omitempty"`
	WakeMax         *float64 `json:"wake_max_ms,omitempty"`
	WakeEarly       int      `json:"wake_early,omitempty"`
	SamplesReceived int      `json:"samples_received,omitempty"`
	CreateP50       *float64 `json:"create_p50_ms,omitempty"`
	CreateP99       *float64 `json:"create_p99_ms,omitempty"`

	LeaseP50         *float64 `json:"lease_p50_ms,omitempty"`
	LeaseP99         *float64 `json:"lease_p99_ms,omitempty"`
	LeaseCalls       int      `json:"lease_calls,omitempty"`
	EmptyPolls       int      `json:"empty_polls,omitempty"`
	CompleteP50      *float64 `json:"complete_p50_ms,omitempty"`
	CompleteP99      *float64 `json:"complete_p99_ms,omitempty"`
	ClientDuplicates int      `json:"client_duplicates,omitempty"`

	GatewayCPUCores  *float64 `json:"gateway_cpu_cores,omitempty"`
	PostgresCPUCores *float64 `json:"postgres_cpu_cores,omitempty"`
	GatewayRSSMB     *float64 `json:"gateway_rss_mb,omitempty"`
	LoadgenCPUCores  *float64 `json:"loadgen_cpu_cores,omitempty"`
	DBXactPerSec     *float64 `json:"db_xact_per_sec,omitempty"`
	DBXactPerTask    *float64 `json:"db_xact_per_task,omitempty"`

	Verified     bool           `json:"verified"`
	Verification verification   `json:"verification"`
	HTTPErrors   map[string]int `json:"http_errors,omitempty"`
	PGWaits      []waitShare    `json:"pg_waits,omitempty"`
	Error        string         `json:"error,omitempty"`

	errorText string
}

// printHuman writes the summary a person reads.
func (r *Result) printHuman(w io.Writer) {
	f := func(p *float64, unit string) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprintf("%g%s", *p, unit)
	}
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-14s %s\n", label, fmt.Sprintf(format, args...))
	}
	switch r.Scenario {
	case "throughput":
		fmt.Fprintf(w, "throughput: %d tasks, %d workers, batch %d\n", r.Tasks, r.Workers, r.Batch)
		line("throughput", "%s tasks/s (%.2f s from first poll to last completion)", f(r.TasksPerSec, ""), r.WallSeconds)
		line("lease call", "p50 %s  p99 %s  (%d calls that got leases, %d empty)", f(r.LeaseP50, " ms"), f(r.LeaseP99, " ms"), r.LeaseCalls, r.EmptyPolls)
		line("complete call", "p50 %s  p99 %s", f(r.CompleteP50, " ms"), f(r.CompleteP99, " ms"))
	case "latency":
		fmt.Fprintf(w, "latency: %d idle polls over %d workers, %d samples\n", r.Polls, r.Workers, r.Samples)
		line("wake latency", "p50 %s  p90 %s  p99 %s  max %s  (%d samples received, %d early)",
			f(r.WakeP50, " ms"), f(r.WakeP90, " ms"), f(r.WakeP99, " ms"), f(r.WakeMax, " ms"), r.SamplesReceived, r.WakeEarly)
		line("create call", "p50 %s  p99 %s", f(r.CreateP50, " ms"), f(r.CreateP99, " ms"))
		line("window", "%.2f s", r.WallSeconds)
	}
	line("gateway", "%s CPU cores, peak RSS %s", f(r.GatewayCPUCores, ""), f(r.GatewayRSSMB, " MiB"))
	line("postgres", "%s CPU cores, %s xact/s (%s per task)", f(r.PostgresCPUCores, ""), f(r.DBXactPerSec, ""), f(r.DBXactPerTask, ""))
	line("load generator", "%s CPU cores (this process; same machine)", f(r.LoadgenCPUCores, ""))
	line("verification", "%s", r.Verification)
	if r.errorText == "" {
		r.errorText = "none"
	}
	line("http errors", "%s", r.errorText)
	if len(r.PGWaits) > 0 {
		var parts []string
		for _, s := range r.PGWaits[:min(8, len(r.PGWaits))] {
			parts = append(parts, fmt.Sprintf("%s %.2f", s.Event, s.Backends))
		}
		line("pg backends", "avg per sample: %s", strings.Join(parts, ", "))
	}
	if r.Error != "" {
		line("ERROR", "%s", r.Error)
	}
}
