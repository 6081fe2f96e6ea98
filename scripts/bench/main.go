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

	"github.com/worker-gateway/gateway/internal/pki"
)

const usageText = `go run ./scripts/bench [flags]

Benchmarks Worker Gateway with simulated workers speaking the HTTP/JSON
worker protocol over mTLS.

Scenarios (-scenario, comma-separated to run several on one stack):
  throughput  -tasks no-op tasks are inserted in bulk, then -workers simulated
              workers (each its own certificate and worker identity) loop:
              POST /v1/leases (max_tasks=-batch), then POST
              /v1/attempts/{id}/complete for each lease (with -complete-many:
              one POST /v1/attempts/complete for all of them, as the Go
              worker runtime does). Each completion call asks for the next
              leases (-next, on by default), so a worker polls only when a
              completion brings none. Reports tasks/s from
              the workers' start to the last completion, and verifies in SQL
              that every task completed exactly once. Each throughput run is
              preceded by a floor run with the same flags (-floor=false: none)
              and states its ratio to it ("0.31× floor").
  floor       the throughput scenario's workers, flags and code against a
              server that does no work (this binary as its own process: the
              gateway's TLS 1.3 + HTTP/2 + mTLS, canned answers of the
              gateway's shape and size, no database): the protocol's and the
              load generator's ceiling on this machine. Reports tasks/s,
              requests/s and the floor server's CPU per task; needs no stack.
  latency     -polls idle long-polls are parked over -workers workers, then
              -samples tasks are created one at a time through POST /v1/tasks,
              -interval apart. Reports the wake latency: create call returned
              → a poller received the lease (p50/p90/p99/max).
  results     -workers (16 unless given) workers each lease one long-lived
              task, then post -result-batches batches in all of -records
              records (70 % assets, 30 % threats) with keys <attempt>:<seq>;
              then send -replay-sample of them again, same key and body.
              Reports batches/s, records/s and latency of first writes and of
              replays, and what a replay costs next to a first write; verifies
              in SQL that every batch was ingested exactly once.
  uploads     one -upload-mib MiB artifact streamed by one worker, then
              -uploads artifacts of -upload-kib KiB from -workers workers at
              once: open session, PUT, commit. Reports MiB/s and the
              gateway's peak VmRSS per phase; verifies the files in SQL.
  idle        -polls (10000 unless given) idle long-polls over -workers
              workers, 100 per connection, parked in the gateway's hub;
              then -idle-window of nothing. Reports gateway and PostgreSQL
              CPU, transactions/s and the gateway's RSS (per poll, too)
              while parked; every poll must end empty.
  backlog     one worker's lease latency (create a task, lease it, complete
              it; -backlog-samples cycles) with no other pending task, then
              with -backlog-tasks pending tasks of other organizations and
              -backlog-unmatched older ones of its own that need a capability
              it lacks. Reports p50/p99 of both phases and their ratio.
  schedules   -schedules interval schedules (every -schedule-period, their
              slots spread evenly over it; each fire creates a loopback scan)
              are cloned in SQL. First -idle-window with no slot due
              (PostgreSQL xact/s must be 0), then -schedule-window of firing:
              fires/s, the lag from each slot's fire time to the commit that
              created its scan (p50/p99, from the gateway's
              gateway_schedule_fire_lag_seconds histogram) and CPU. Verifies
              in SQL that every slot due fired once, with one scan.
  replicas    the throughput and latency scenarios once per replica count
              (-replica-counts, default 1,2,3 gateway processes on one
              database; workers spread over them round-robin): -replica-tasks
              tasks over -replica-orgs organizations with -workers (64
              unless given) leasing -batch (32 unless given) per poll and
              completing them in one call (-complete-many, on unless
              given), then latency with tasks created through the
              first replica. Reports tasks/s, speed-up, gateway (summed) and
              PostgreSQL CPU, wake p50/p99 per replica count.
  fairness    -workers (8 unless given) workers serving organizations A and
              B drain A's -fairness-tasks backlog (max_tasks=-batch) while
              -samples (20 unless given) tasks are created for B one at a
              time. Reports how many lease answers and how many ms pass
              until each of B's tasks is leased.

Comparison:
  -compare river  with throughput: River (riverqueue/river, the Go job queue
              on PostgreSQL; scripts/bench/compare/river, its own module)
              drains -tasks no-op jobs in its own database on the same
              private PostgreSQL, alternating with the gateway -runs times.
              Reports both rates, gateway/River, and each one's PostgreSQL
              CPU ms per task over the work only (README.md).

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

// pgStatements, when above zero, loads pg_stat_statements in the private
// stack and prints the statements that took the most database time in each
// measured window.
var pgStatements int

// pgSettings are extra PostgreSQL settings for the private stack.
var pgSettings string

// pgWaits turns on sampling of pg_stat_activity during measured windows.
var pgWaits bool

func main() {
	if len(os.Args) > 1 && os.Args[1] == floorServeCommand {
		os.Exit(floorServeMain(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	var (
		scenarios   = flag.String("scenario", "throughput", "scenarios to run, comma-separated: throughput, floor, latency, results, uploads, idle, backlog, fairness, schedules, replicas")
		tasks       = flag.Int("tasks", 20000, "throughput: number of tasks")
		workers     = flag.Int("workers", 32, "number of simulated workers (each its own certificate and worker identity); results uses 16 and fairness 8 unless this is given, backlog always 1")
		batch       = flag.Int("batch", 1, "throughput, fairness: max_tasks per lease request")
		tpWait      = flag.Int("tp-wait", 1, "throughput: wait_seconds of each lease request")
		nextOn      = flag.Bool("next", true, "throughput, floor, replicas: each completion call asks for the next leases (`next`), so a worker with a backlog polls only when a completion brings none; -next=false polls after every completion (two requests per task at -batch 1)")
		completeMny = flag.Bool("complete-many", false, "throughput: complete each poll's leases in one POST /v1/attempts/complete (as the Go worker runtime does) instead of one call per lease")
		floorOn     = flag.Bool("floor", true, "throughput: run the floor scenario with the same parameters before each throughput run, and state each run's ratio to it")
		polls       = flag.Int("polls", 100, "latency, idle: idle long-polls, spread over the workers; idle uses 10000 unless this is given")
		samples     = flag.Int("samples", 200, "latency, fairness: tasks created one at a time; fairness uses 20 unless this is given")
		interval    = flag.Duration("interval", 20*time.Millisecond, "latency: spacing of task creations")
		latWait     = flag.Int("lat-wait", 20, "latency: wait_seconds of each idle long-poll")
		resBatches  = flag.Int("result-batches", 4000, "results: result batches in all (first writes), spread evenly over the workers")
		records     = flag.Int("records", 100, "results: records per batch (70 % asset records, 30 % threat records); the gateway accepts 1000 by default")
		replayShare = flag.Float64("replay-sample", 1, "results: share of each worker's batches sent again with the same key and body (0 to 1; 1 = all)")
		uploadMiB   = flag.Int("upload-mib", 200, "uploads: size of the single large artifact, MiB")
		uploads     = flag.Int("uploads", 32, "uploads: number of small artifacts uploaded at once after the large one")
		uploadKiB   = flag.Int("upload-kib", 1024, "uploads: size of each small artifact, KiB")
		idleWindow  = flag.Duration("idle-window", 20*time.Second, "idle: measured window once every poll is parked")
		idleWait    = flag.Int("idle-wait", 0, "idle: wait_seconds of each poll; 0 = long enough to stay parked through the ramp (60 s allowance), the statistics settle and the window (the private gateway gets -max-wait to match)")
		blTasks     = flag.Int("backlog-tasks", 1000000, "backlog: pending tasks of other organizations in the second phase")
		blUnmatched = flag.Int("backlog-unmatched", 100000, "backlog: pending tasks of the measured organization that need a capability no worker has, in the second phase")
		blSamples   = flag.Int("backlog-samples", 500, "backlog: measured lease cycles per phase")
		fairTasks   = flag.Int("fairness-tasks", 100000, "fairness: pending tasks of organization A")
		nSchedules  = flag.Int("schedules", 100000, "schedules: interval schedules, their slots spread evenly over the period")
		schedPeriod = flag.Duration("schedule-period", time.Minute, "schedules: every schedule's interval (whole seconds)")
		schedWindow = flag.Duration("schedule-window", 2*time.Minute, "schedules: measured window of firing")
		replCounts  = flag.String("replica-counts", "1,2,3", "replicas: gateway replica counts to run, comma-separated")
		replTasks   = flag.Int("replica-tasks", 1000000, "replicas: tasks per round")
		replOrgs    = flag.Int("replica-orgs", 4, "replicas: organizations the tasks are spread over")
		timeLimit   = flag.Duration("time-limit", 5*time.Minute, "time limit per scenario (setup included); the scenario stops and fails when it is reached. backlog gets 15m unless this is given (inserting its backlog alone can take minutes)")
		jsonOut     = flag.Bool("json", false, "print one JSON object per scenario on stdout (the human summary goes to stderr)")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the load generator itself (this process, not the gateway) to this file")
		gatewayBin  = flag.String("gateway-bin", "", "private stack: run this prebuilt gateway binary instead of building ./server/cmd/gateway (its migrations must match this checkout's)")
		webhooks    = flag.Bool("webhooks", false, "throughput: subscribe every organization to task.completed, delivered to a receiver in this process (the gateway runs with -webhooks-allow-private); reports the deliveries and waits for them all")
		gatewayArgs = flag.String("gateway-args", "", "extra flags for 'gateway serve' in the private stack, space-separated (e.g. \"-db-max-conns 40\")")
		keep        = flag.Bool("keep", false, "keep the private stack's temp dir (gateway.log, PostgreSQL log and data) after exit")
		verbose     = flag.Bool("v", false, "log progress (bring-up, scenario phases)")

		compare       = flag.String("compare", "", "throughput: also run another queue on the same PostgreSQL and compare: river")
		runs          = flag.Int("runs", 1, "-compare: runs of each, alternating (gateway, river, gateway, river, …); medians are reported")
		riverWorkers  = flag.Int("river-workers", 2000, "-compare river: MaxWorkers of River's queue (river bench: 2000)")
		riverCooldown = flag.Duration("river-fetch-cooldown", 2*time.Millisecond, "-compare river: River's FetchCooldown (river bench: 2ms)")
		riverPoll     = flag.Duration("river-fetch-poll-interval", 20*time.Millisecond, "-compare river: River's FetchPollInterval (river bench: 20ms)")
		riverConns    = flag.Int("river-max-conns", 0, "-compare river: River's pgx pool size; 0 = pgx's default, max(4, CPUs), as river bench")

		gatewayURL   = flag.String("gateway", "", "existing deployment: gateway base URL (https://127.0.0.1:8443); starts nothing")
		databaseURL  = flag.String("database", "", "existing deployment: PostgreSQL URL of the gateway's database (setup, verification, statistics)")
		caFile       = flag.String("ca", "", "existing deployment: PEM CA certificate the gateway's server certificate chains to")
		token        = flag.String("token", "", "existing deployment: API token with the producer (or admin) scope; default: one is created in the database and revoked at exit")
		workerCerts  = flag.String("worker-certs", "", "existing deployment: directory of worker certificate pairs NAME.pem + NAME-key.pem; default: throwaway certificates are registered as new workers")
		gatewayPID   = flag.Int("gateway-pid", 0, "existing deployment: gateway process id, for its CPU and memory figures")
		postgresData = flag.String("postgres-data", "", "existing deployment: PostgreSQL data directory (its postmaster.pid), for PostgreSQL's CPU figure")
		allowRemote  = flag.Bool("allow-remote", false, "existing deployment: allow a gateway or database that is not on a loopback address")
	)
	flag.StringVar(&pgSettings, "pg-settings", "", "private stack: extra PostgreSQL settings, comma-separated name=value (e.g. \"shared_preload_libraries=auto_explain,auto_explain.log_min_duration=50ms\")")
	flag.IntVar(&pgStatements, "pg-statements", 0, "private stack: load pg_stat_statements and print the N statements with the most execution + planning time per measured window (on stderr)")
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
		if !slices.Contains([]string{"throughput", "floor", "latency", "results", "uploads", "idle", "backlog", "fairness", "schedules", "replicas"}, sc) {
			warnf("unknown scenario %q (want throughput, floor, latency, results, uploads, idle, backlog, fairness, schedules or replicas)", sc)
			return 2
		}
	}
	if *tasks < 1 || *workers < 1 || *batch < 1 || *batch > 1000 || *polls < 1 || *samples < 1 || *interval <= 0 ||
		*tpWait < 0 || *latWait < 1 || *timeLimit <= 0 {
		warnf("flags out of range (tasks, workers, polls, samples ≥ 1; 1 ≤ batch ≤ 1000; tp-wait ≥ 0; lat-wait ≥ 1)")
		return 2
	}
	if *resBatches < 1 || *records < 1 || *records > 10000 || *replayShare < 0 || *replayShare > 1 ||
		*uploadMiB < 0 || *uploads < 1 || *uploadKiB < 0 {
		warnf("flags out of range (result-batches, uploads ≥ 1; 1 ≤ records ≤ 10000; 0 ≤ replay-sample ≤ 1; upload-mib, upload-kib ≥ 0)")
		return 2
	}
	if *idleWindow <= 0 || *idleWait < 0 || *blTasks < 0 || *blUnmatched < 0 || *blSamples < 1 || *fairTasks < 1 {
		warnf("flags out of range (idle-window > 0; idle-wait, backlog-tasks, backlog-unmatched ≥ 0; backlog-samples, fairness-tasks ≥ 1)")
		return 2
	}
	replicaCounts, err := parseCounts(*replCounts)
	if err != nil {
		warnf("-replica-counts: %v", err)
		return 2
	}
	if *nSchedules < 1 || *schedPeriod < time.Second || *schedPeriod%time.Second != 0 || *schedWindow <= 0 {
		warnf("flags out of range (schedules ≥ 1; schedule-period whole seconds ≥ 1s; schedule-window > 0)")
		return 2
	}
	if *compare != "" && (*compare != "river" || !slices.Contains(list, "throughput")) {
		warnf("-compare takes river, with -scenario throughput")
		return 2
	}
	if *runs < 1 || (*runs > 1 && *compare == "") || *riverWorkers < 1 || *riverConns < 0 ||
		*riverCooldown < time.Millisecond || *riverPoll < *riverCooldown {
		warnf("flags out of range (runs ≥ 1, above 1 only with -compare; river-workers ≥ 1; river-max-conns ≥ 0; 1ms ≤ river-fetch-cooldown ≤ river-fetch-poll-interval)")
		return 2
	}
	// Some scenarios have their own defaults for shared flags.
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	orDefault := func(v int, name string, dflt int) int {
		if given[name] {
			return v
		}
		return dflt
	}
	resultWorkers := orDefault(*workers, "workers", 16)
	fairWorkers := orDefault(*workers, "workers", 8)
	fairSamples := orDefault(*samples, "samples", 20)
	idlePolls := orDefault(*polls, "polls", 10000)
	idleWaitSecs := idleWaitSeconds(*idleWait, *idleWindow)
	// The private gateway's poll limits must admit the most polls any
	// scenario keeps open (per worker and in all), and its longest wait the
	// idle polls' wait.
	openPolls := *polls
	var maxWait time.Duration
	if slices.Contains(list, "idle") {
		openPolls = max(openPolls, idlePolls)
		maxWait = time.Duration(idleWaitSecs) * time.Second
	}
	// The results and uploads tasks get a lease that outlives the
	// scenario's time limit: their workers send no heartbeats.
	longLease := max(600, int(timeLimit.Seconds())+60)

	// Thousands of idle polls need file descriptors: raise the soft limit
	// to the hard one. Go raises it for itself at start-up but restores the
	// original for the processes it starts; a limit set explicitly is kept
	// for them, so the private gateway gets it as well.
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil && nofile.Cur < nofile.Max {
		nofile.Cur = nofile.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
			warnf("raise the open file limit: %v", err)
		}
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

	pollsPerWorker := (openPolls + *workers - 1) / *workers
	hookArgs, err := webhookGatewayArgs(*webhooks)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	// The floor scenario alone needs no stack: no database, no gateway.
	var st *Stack
	if slices.ContainsFunc(list, func(sc string) bool { return sc != "floor" }) {
		st, err = bringUp(ctx, stackConfig{
			gatewayURL: *gatewayURL, databaseURL: *databaseURL, caFile: *caFile, token: *token,
			workerCertDir: *workerCerts, gatewayPID: *gatewayPID, postgresData: *postgresData, allowRemote: *allowRemote,
			gatewayBin:     *gatewayBin,
			gatewayArgs:    append(strings.Fields(*gatewayArgs), hookArgs...),
			pollsPerWorker: max(8, pollsPerWorker+1),
			maxPolls:       max(20000, openPolls+*workers),
			maxWait:        maxWait,
			keep:           *keep,
			logf:           logf,
		})
		if err != nil {
			warnf("bring-up failed: %v", err)
			return 1
		}
		defer st.Close()
	}
	// The floor's certificates come from the stack's CA when there is one.
	floorCA := func() *pki.CA {
		if st == nil {
			return nil
		}
		return st.issuer
	}

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
	report := func(r *Result, err error) {
		if err != nil {
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
	for _, sc := range list {
		if ctx.Err() != nil {
			break
		}
		tp := throughputConfig{tasks: *tasks, workers: *workers, batch: *batch, wait: *tpWait, completeMany: *completeMny, next: *nextOn}
		// runFloorFor runs the floor before a throughput run and reports
		// it; nil when -floor=false.
		runFloorFor := func(ctx context.Context) *Result {
			if !*floorOn {
				return nil
			}
			fctx, fcancel := context.WithTimeout(ctx, *timeLimit)
			defer fcancel()
			logf("floor: the same parameters as the throughput run, against a server that does no work")
			fr, err := runFloor(fctx, floorCA(), tp, logf)
			report(fr, err)
			return fr
		}
		if sc == "throughput" && *compare == "river" {
			rc := riverConfig{workers: *riverWorkers, fetchCooldown: *riverCooldown, fetchPollInterval: *riverPoll, maxConns: *riverConns}
			report(runCompareRiver(ctx, st, compareConfig{runs: *runs, throughput: tp, river: rc, timeLimit: *timeLimit, floor: runFloorFor}, logf, report))
			continue
		}
		var floor *Result
		if sc == "throughput" {
			floor = runFloorFor(ctx)
		}
		limit := *timeLimit
		if sc == "backlog" && !given["time-limit"] {
			limit = backlogTimeLimit
		}
		if sc == "schedules" && !given["time-limit"] {
			limit = schedulesTimeLimit
		}
		if sc == "replicas" && !given["time-limit"] {
			limit = replicasTimeLimit
		}
		scCtx, scCancel := context.WithTimeout(ctx, limit)
		var r *Result
		switch sc {
		case "throughput":
			twh := tp
			twh.webhooks = *webhooks
			r, err = runThroughput(scCtx, st, twh, logf)
			applyFloor(r, floor)
		case "floor":
			r, err = runFloor(scCtx, floorCA(), tp, logf)
		case "latency":
			r, err = runLatency(scCtx, st, latencyConfig{polls: *polls, workers: *workers, samples: *samples, interval: *interval, wait: *latWait}, logf)
		case "results":
			r, err = runResults(scCtx, st, resultsConfig{workers: resultWorkers, batches: *resBatches, records: *records,
				replaySample: *replayShare, leaseDuration: longLease}, logf)
		case "uploads":
			r, err = runUploads(scCtx, st, uploadsConfig{workers: *workers, largeMiB: *uploadMiB, uploads: *uploads,
				smallKiB: *uploadKiB, leaseDuration: longLease}, logf)
		case "idle":
			r, err = runIdle(scCtx, st, idleConfig{polls: idlePolls, workers: *workers, wait: idleWaitSecs, window: *idleWindow}, logf)
		case "backlog":
			r, err = runBacklog(scCtx, st, backlogConfig{tasks: *blTasks, unmatched: *blUnmatched, samples: *blSamples}, logf)
		case "fairness":
			r, err = runFairness(scCtx, st, fairnessConfig{tasks: *fairTasks, workers: fairWorkers, batch: *batch, samples: fairSamples}, logf)
		case "replicas":
			// Workers poll as the Go worker runtime does (32 leases a poll,
			// completed in one call) unless told otherwise: a million tasks
			// one lease per poll measure the per-call cost, not replicas.
			replWorkers, replBatch, replCompleteMany := 64, 32, true
			if given["workers"] {
				replWorkers = *workers
			}
			if given["batch"] {
				replBatch = *batch
			}
			if given["complete-many"] {
				replCompleteMany = *completeMny
			}
			r, err = runReplicas(scCtx, st, replicasConfig{counts: replicaCounts,
				throughput: throughputConfig{tasks: *replTasks, workers: replWorkers, batch: replBatch, wait: *tpWait, completeMany: replCompleteMany, next: *nextOn, orgs: *replOrgs},
				latency:    latencyConfig{polls: *polls, workers: replWorkers, samples: *samples, interval: *interval, wait: *latWait}}, logf)
		case "schedules":
			r, err = runSchedules(scCtx, st, schedulesConfig{schedules: *nSchedules, period: *schedPeriod, window: *schedWindow, idle: *idleWindow}, logf)
		}
		scCancel()
		if r == nil {
			r = &Result{Scenario: sc}
		}
		report(r, err)
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
	// CompleteMany: completions were sent in batches (-complete-many).
	CompleteMany bool `json:"complete_many,omitempty"`
	// Next: completions asked for the next leases (-next).
	Next    bool `json:"next,omitempty"`
	Polls   int  `json:"polls,omitempty"`
	Samples int  `json:"samples,omitempty"`

	WallSeconds float64  `json:"wall_seconds,omitempty"`
	TasksPerSec *float64 `json:"tasks_per_sec,omitempty"`
	// Requests the workers sent (polls and completions): throughput, floor.
	Requests       int      `json:"requests,omitempty"`
	RequestsPerSec *float64 `json:"requests_per_sec,omitempty"`

	// A throughput run: the floor run just before it with the same
	// parameters (floor.go), its tasks/s ÷ the floor's, and its gateway
	// CPU per task ÷ the floor server's.
	FloorTasksPerSec *float64 `json:"floor_tasks_per_sec,omitempty"`
	FloorRatio       *float64 `json:"floor_ratio,omitempty"`
	FloorCPURatio    *float64 `json:"floor_cpu_ratio,omitempty"`
	// The floor scenario: its server process, measured as the gateway is.
	FloorServerCPUCores     *float64 `json:"floor_server_cpu_cores,omitempty"`
	FloorServerCPUMsPerTask *float64 `json:"floor_server_cpu_ms_per_task,omitempty"`
	FloorServerRSSMB        *float64 `json:"floor_server_rss_mb,omitempty"`

	WakeP50         *float64 `json:"wake_p50_ms,omitempty"`
	WakeP90         *float64 `json:"wake_p90_ms,omitempty"`
	WakeP99         *float64 `json:"wake_p99_ms,omitempty"`
	WakeMax         *float64 `json:"wake_max_ms,omitempty"`
	WakeEarly       int      `json:"wake_early,omitempty"`
	SamplesReceived int      `json:"samples_received,omitempty"`
	CreateP50       *float64 `json:"create_p50_ms,omitempty"`
	CreateP99       *float64 `json:"create_p99_ms,omitempty"`
	// EndToEndP50/P99: create call sent → lease received, which neither
	// the create call's answer nor the wake alone decides.
	EndToEndP50 *float64 `json:"end_to_end_p50_ms,omitempty"`
	EndToEndP99 *float64 `json:"end_to_end_p99_ms,omitempty"`

	LeaseP50         *float64 `json:"lease_p50_ms,omitempty"`
	LeaseP99         *float64 `json:"lease_p99_ms,omitempty"`
	LeaseCalls       int      `json:"lease_calls,omitempty"`
	EmptyPolls       int      `json:"empty_polls,omitempty"`
	CompleteP50      *float64 `json:"complete_p50_ms,omitempty"`
	CompleteP99      *float64 `json:"complete_p99_ms,omitempty"`
	ClientDuplicates int      `json:"client_duplicates,omitempty"`

	// results: first writes (wall_seconds and the CPU, xact and wait figures
	// below are those of the first-write window), then replays.
	Batches                int      `json:"batches,omitempty"`
	RecordsPerBatch        int      `json:"records_per_batch,omitempty"`
	AssetRecords           int      `json:"asset_records_per_batch,omitempty"`
	ThreatRecords          int      `json:"threat_records_per_batch,omitempty"`
	BatchesSent            int      `json:"batches_sent,omitempty"`
	RetriedBatches         int      `json:"retried_batches,omitempty"`
	BatchesPerSec          *float64 `json:"batches_per_sec,omitempty"`
	RecordsPerSec          *float64 `json:"records_per_sec,omitempty"`
	BatchP50               *float64 `json:"batch_p50_ms,omitempty"`
	BatchP99               *float64 `json:"batch_p99_ms,omitempty"`
	GatewayCPUMsPerBatch   *float64 `json:"gateway_cpu_ms_per_batch,omitempty"`
	PostgresCPUMsPerBatch  *float64 `json:"postgres_cpu_ms_per_batch,omitempty"`
	CPUMsPerBatch          *float64 `json:"cpu_ms_per_batch,omitempty"`
	DBXactPerBatch         *float64 `json:"db_xact_per_batch,omitempty"`
	Replays                int      `json:"replays,omitempty"`
	ReplayWallSeconds      *float64 `json:"replay_wall_seconds,omitempty"`
	ReplaysPerSec          *float64 `json:"replays_per_sec,omitempty"`
	ReplayP50              *float64 `json:"replay_p50_ms,omitempty"`
	ReplayP99              *float64 `json:"replay_p99_ms,omitempty"`
	ReplayGatewayCPUCores  *float64 `json:"replay_gateway_cpu_cores,omitempty"`
	ReplayPostgresCPUCores *float64 `json:"replay_postgres_cpu_cores,omitempty"`
	ReplayLoadgenCPUCores  *float64 `json:"replay_loadgen_cpu_cores,omitempty"`
	ReplayMachineCPUCores  *float64 `json:"replay_machine_cpu_cores,omitempty"`
	ReplayStealCPUCores    *float64 `json:"replay_steal_cpu_cores,omitempty"`
	ReplayCheckpoints      *int64   `json:"replay_checkpoints,omitempty"`
	ReplayAutovacuumRuns   *int64   `json:"replay_autovacuum_runs,omitempty"`
	ReplayGatewayCPUMs     *float64 `json:"gateway_cpu_ms_per_replay,omitempty"`
	ReplayPostgresCPUMs    *float64 `json:"postgres_cpu_ms_per_replay,omitempty"`
	CPUMsPerReplay         *float64 `json:"cpu_ms_per_replay,omitempty"`
	ReplayDBXactPerSec     *float64 `json:"replay_db_xact_per_sec,omitempty"`
	ReplayDBXactPerCall    *float64 `json:"db_xact_per_replay,omitempty"`
	ReplayLatencyRatioP50  *float64 `json:"replay_latency_ratio_p50,omitempty"`
	ReplayLatencyRatioP99  *float64 `json:"replay_latency_ratio_p99,omitempty"`
	ReplayCPURatio         *float64 `json:"replay_cpu_ratio,omitempty"`

	// uploads: the large artifact, then the small ones at once.
	LargeMiB              int      `json:"large_mib,omitempty"`
	Uploads               int      `json:"uploads,omitempty"`
	UploadKiB             int      `json:"upload_kib,omitempty"`
	LargeSeconds          *float64 `json:"large_seconds,omitempty"`
	LargeMiBPerSec        *float64 `json:"large_mib_per_sec,omitempty"`
	LargeOpenMs           *float64 `json:"large_open_ms,omitempty"`
	LargePutSeconds       *float64 `json:"large_put_seconds,omitempty"`
	LargePutMiBPerSec     *float64 `json:"large_put_mib_per_sec,omitempty"`
	LargeCommitMs         *float64 `json:"large_commit_ms,omitempty"`
	LargeGatewayCPUCores  *float64 `json:"large_gateway_cpu_cores,omitempty"`
	LargePostgresCPUCores *float64 `json:"large_postgres_cpu_cores,omitempty"`
	LargeLoadgenCPUCores  *float64 `json:"large_loadgen_cpu_cores,omitempty"`
	LargeMachineCPUCores  *float64 `json:"large_machine_cpu_cores,omitempty"`
	LargeStealCPUCores    *float64 `json:"large_steal_cpu_cores,omitempty"`
	LargeRSSBeforeMB      *float64 `json:"large_rss_before_mb,omitempty"`
	LargeRSSPeakMB        *float64 `json:"large_rss_peak_mb,omitempty"`
	LargeRSSSamples       int      `json:"large_rss_samples,omitempty"`
	SmallCommitted        int      `json:"small_committed,omitempty"`
	SmallSeconds          *float64 `json:"small_seconds,omitempty"`
	SmallMiBPerSec        *float64 `json:"small_mib_per_sec,omitempty"`
	SmallP50              *float64 `json:"small_p50_ms,omitempty"`
	SmallP99              *float64 `json:"small_p99_ms,omitempty"`
	SmallOpenP50          *float64 `json:"small_open_p50_ms,omitempty"`
	SmallPutP50           *float64 `json:"small_put_p50_ms,omitempty"`
	SmallCommitP50        *float64 `json:"small_commit_p50_ms,omitempty"`
	SmallGatewayCPUCores  *float64 `json:"small_gateway_cpu_cores,omitempty"`
	SmallPostgresCPUCores *float64 `json:"small_postgres_cpu_cores,omitempty"`
	SmallLoadgenCPUCores  *float64 `json:"small_loadgen_cpu_cores,omitempty"`
	SmallMachineCPUCores  *float64 `json:"small_machine_cpu_cores,omitempty"`
	SmallStealCPUCores    *float64 `json:"small_steal_cpu_cores,omitempty"`
	SmallRSSBeforeMB      *float64 `json:"small_rss_before_mb,omitempty"`
	SmallRSSPeakMB        *float64 `json:"small_rss_peak_mb,omitempty"`
	SmallRSSSamples       int      `json:"small_rss_samples,omitempty"`

	// idle: the parked polls.
	WaitSeconds        int      `json:"wait_seconds,omitempty"`
	Connections        int      `json:"connections,omitempty"`
	RampSeconds        *float64 `json:"ramp_seconds,omitempty"`
	PollsParked        int      `json:"polls_parked,omitempty"`
	Repolls            int      `json:"repolls,omitempty"`
	PollsEmpty         int      `json:"polls_answered_empty,omitempty"`
	GatewayRSSBeforeMB *float64 `json:"gateway_rss_before_mb,omitempty"`
	RSSPerPollKiB      *float64 `json:"rss_per_poll_kib,omitempty"`

	// backlog: lease_p50_ms and lease_p99_ms above are the backlog phase's.
	BacklogTasks         int      `json:"backlog_tasks,omitempty"`
	UnmatchedTasks       int      `json:"unmatched_tasks,omitempty"`
	BacklogInsertSeconds *float64 `json:"backlog_insert_seconds,omitempty"`
	EmptyLeaseP50        *float64 `json:"empty_lease_p50_ms,omitempty"`
	EmptyLeaseP99        *float64 `json:"empty_lease_p99_ms,omitempty"`
	RatioP50             *float64 `json:"ratio_p50,omitempty"`
	RatioP99             *float64 `json:"ratio_p99,omitempty"`

	// fairness
	FairnessCyclesP50     *int64   `json:"fairness_cycles_p50,omitempty"`
	FairnessCyclesMax     *int64   `json:"fairness_cycles_max,omitempty"`
	FairnessRoundsP50     *int64   `json:"fairness_rounds_p50,omitempty"`
	FairnessRoundsMax     *int64   `json:"fairness_rounds_max,omitempty"`
	FairnessPassedOverP50 *int64   `json:"fairness_passed_over_p50,omitempty"`
	FairnessPassedOverMax *int64   `json:"fairness_passed_over_max,omitempty"`
	FairnessWaitP50       *float64 `json:"fairness_wait_p50_ms,omitempty"`
	FairnessWaitMax       *float64 `json:"fairness_wait_max_ms,omitempty"`

	// replicas: one entry per replica count.
	Orgs          int              `json:"orgs,omitempty"`
	ReplicaRounds []replicaFigures `json:"replica_rounds,omitempty"`

	// schedules: the firing window (wall_seconds, CPU and xact figures
	// above are its own; per "task" figures are per fire), then the idle
	// window before the first slot.
	Schedules            int      `json:"schedules,omitempty"`
	PeriodSeconds        float64  `json:"period_seconds,omitempty"`
	TargetFiresPerSec    *float64 `json:"target_fires_per_sec,omitempty"`
	InsertSeconds        *float64 `json:"insert_seconds,omitempty"`
	Fires                int      `json:"fires,omitempty"`
	FiresPerSec          *float64 `json:"fires_per_sec,omitempty"`
	Claims               int      `json:"claims,omitempty"`
	LagSamples           int      `json:"lag_samples,omitempty"`
	LagP50               *float64 `json:"lag_p50_ms,omitempty"`
	LagP99               *float64 `json:"lag_p99_ms,omitempty"`
	LagMax               *float64 `json:"lag_max_bucket_ms,omitempty"`
	IdleDBXactPerSec     *float64 `json:"idle_db_xact_per_sec,omitempty"`
	IdlePostgresCPUCores *float64 `json:"idle_postgres_cpu_cores,omitempty"`
	IdleGatewayCPUCores  *float64 `json:"idle_gateway_cpu_cores,omitempty"`

	GatewayCPUCores  *float64 `json:"gateway_cpu_cores,omitempty"`
	PostgresCPUCores *float64 `json:"postgres_cpu_cores,omitempty"`
	GatewayRSSMB     *float64 `json:"gateway_rss_mb,omitempty"`
	LoadgenCPUCores  *float64 `json:"loadgen_cpu_cores,omitempty"`
	MachineCPUCores  *float64 `json:"machine_cpu_cores,omitempty"`
	StealCPUCores    *float64 `json:"steal_cpu_cores,omitempty"`
	Checkpoints      *int64   `json:"checkpoints,omitempty"`
	AutovacuumRuns   *int64   `json:"autovacuum_runs,omitempty"`
	DBXactPerSec     *float64 `json:"db_xact_per_sec,omitempty"`
	DBXactPerTask    *float64 `json:"db_xact_per_task,omitempty"`
	// CPU milliseconds per completed task over the measured window.
	GatewayCPUMsPerTask  *float64 `json:"gateway_cpu_ms_per_task,omitempty"`
	PostgresCPUMsPerTask *float64 `json:"postgres_cpu_ms_per_task,omitempty"`

	// -compare river (compare.go).
	*compareFigures

	// Webhook*: -webhooks, every completion's event as the receiver saw it.
	WebhookEvents       *int           `json:"webhook_events,omitempty"`
	WebhookDeliveries   *int           `json:"webhook_deliveries,omitempty"`
	WebhookMismatched   *int           `json:"webhook_mismatched,omitempty"`
	WebhookDrainSeconds *float64       `json:"webhook_drain_seconds,omitempty"`
	Verified            bool           `json:"verified"`
	Verification        fmt.Stringer   `json:"verification"`
	HTTPErrors          map[string]int `json:"http_errors,omitempty"`
	PGWaits             []waitShare    `json:"pg_waits,omitempty"`
	Error               string         `json:"error,omitempty"`

	errorText string
}

// runLabel names the run of a -compare pair in the human summary.
func (r *Result) runLabel() string {
	if r.compareFigures == nil || r.Run == 0 {
		return ""
	}
	return fmt.Sprintf(" — run %d", r.Run)
}

// runList formats each run's figure for the human summary.
func runList(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return "(runs: " + strings.Join(parts, ", ") + ")"
}

// notRun stands for a verification that did not happen.
type notRun struct{}

func (notRun) String() string               { return "not run" }
func (notRun) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// printHuman writes the summary a person reads.
func (r *Result) printHuman(w io.Writer) {
	f := func(p *float64, unit string) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprintf("%g%s", *p, unit)
	}
	n := func(p *int64) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprint(*p)
	}
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-14s %s\n", label, fmt.Sprintf(format, args...))
	}
	switch r.Scenario {
	case "throughput":
		fmt.Fprintf(w, "throughput: %d tasks, %d workers, batch %d, %s%s\n", r.Tasks, r.Workers, r.Batch, completionsOf(r), r.runLabel())
		line("throughput", "%s tasks/s (%.2f s from first poll to last completion)%s", f(r.TasksPerSec, ""), r.WallSeconds, withFloor(r))
		line("requests", "%s requests/s (%d polls and completions)", f(r.RequestsPerSec, ""), r.Requests)
		line("lease call", "p50 %s  p99 %s  (%d calls that got leases, %d empty)", f(r.LeaseP50, " ms"), f(r.LeaseP99, " ms"), r.LeaseCalls, r.EmptyPolls)
		line("complete call", "p50 %s  p99 %s", f(r.CompleteP50, " ms"), f(r.CompleteP99, " ms"))
		if r.WebhookEvents != nil {
			line("webhooks", "%d task.completed events received (%d deliveries, %d retries with other bytes); the last %s after the last completion",
				*r.WebhookEvents, *r.WebhookDeliveries, *r.WebhookMismatched, f(r.WebhookDrainSeconds, " s"))
		}
	case "floor":
		fmt.Fprintf(w, "floor: %d tasks, %d workers, batch %d, %s; the throughput load generator against a server that does no work\n",
			r.Tasks, r.Workers, r.Batch, completionsOf(r))
		line("floor", "%s tasks/s, %s requests/s (%d polls and completions in %.2f s)", f(r.TasksPerSec, ""), f(r.RequestsPerSec, ""), r.Requests, r.WallSeconds)
		line("lease call", "p50 %s  p99 %s  (%d calls that got leases, %d empty)", f(r.LeaseP50, " ms"), f(r.LeaseP99, " ms"), r.LeaseCalls, r.EmptyPolls)
		line("complete call", "p50 %s  p99 %s", f(r.CompleteP50, " ms"), f(r.CompleteP99, " ms"))
		line("floor server", "%s CPU cores = %s CPU per task, peak RSS %s", f(r.FloorServerCPUCores, ""), f(r.FloorServerCPUMsPerTask, " ms"), f(r.FloorServerRSSMB, " MiB"))
		line("load generator", "%s CPU cores (this process; same machine)", f(r.LoadgenCPUCores, ""))
		line("machine", "%s CPU cores busy in all, %s stolen by the hypervisor", f(r.MachineCPUCores, ""), f(r.StealCPUCores, ""))
	case "latency":
		fmt.Fprintf(w, "latency: %d idle polls over %d workers, %d samples\n", r.Polls, r.Workers, r.Samples)
		line("wake latency", "p50 %s  p90 %s  p99 %s  max %s  (%d samples received, %d early)",
			f(r.WakeP50, " ms"), f(r.WakeP90, " ms"), f(r.WakeP99, " ms"), f(r.WakeMax, " ms"), r.SamplesReceived, r.WakeEarly)
		line("create call", "p50 %s  p99 %s", f(r.CreateP50, " ms"), f(r.CreateP99, " ms"))
		line("create → lease", "p50 %s  p99 %s  (create call sent → lease received)", f(r.EndToEndP50, " ms"), f(r.EndToEndP99, " ms"))
		line("window", "%.2f s", r.WallSeconds)
	case "results":
		fmt.Fprintf(w, "results: %d batches × %d records (%d asset, %d threat), %d workers\n",
			r.Batches, r.RecordsPerBatch, r.AssetRecords, r.ThreatRecords, r.Workers)
		line("first writes", "%s batches/s, %s records/s (%d batches acknowledged in %.2f s, %d of them on a retry)",
			f(r.BatchesPerSec, ""), f(r.RecordsPerSec, ""), r.BatchesSent, r.WallSeconds, r.RetriedBatches)
		line("batch call", "p50 %s  p99 %s", f(r.BatchP50, " ms"), f(r.BatchP99, " ms"))
		line("gateway", "%s CPU cores = %s CPU per batch, peak RSS %s", f(r.GatewayCPUCores, ""), f(r.GatewayCPUMsPerBatch, " ms"), f(r.GatewayRSSMB, " MiB"))
		line("postgres", "%s CPU cores = %s CPU per batch, %s xact/s (%s per batch); %s checkpoints, %s autovacuum runs",
			f(r.PostgresCPUCores, ""), f(r.PostgresCPUMsPerBatch, " ms"), f(r.DBXactPerSec, ""), f(r.DBXactPerBatch, ""), n(r.Checkpoints), n(r.AutovacuumRuns))
		line("load generator", "%s CPU cores (this process; same machine)", f(r.LoadgenCPUCores, ""))
		line("machine", "%s CPU cores busy in all, %s stolen by the hypervisor", f(r.MachineCPUCores, ""), f(r.StealCPUCores, ""))
		line("replays", "%s replays/s (%d in %s s), call p50 %s  p99 %s",
			f(r.ReplaysPerSec, ""), r.Replays, f(r.ReplayWallSeconds, ""), f(r.ReplayP50, " ms"), f(r.ReplayP99, " ms"))
		line("replay gateway", "%s CPU cores = %s CPU per replay", f(r.ReplayGatewayCPUCores, ""), f(r.ReplayGatewayCPUMs, " ms"))
		line("replay pg", "%s CPU cores = %s CPU per replay, %s xact/s (%s per replay); %s checkpoints, %s autovacuum runs",
			f(r.ReplayPostgresCPUCores, ""), f(r.ReplayPostgresCPUMs, " ms"), f(r.ReplayDBXactPerSec, ""), f(r.ReplayDBXactPerCall, ""),
			n(r.ReplayCheckpoints), n(r.ReplayAutovacuumRuns))
		line("replay loadgen", "%s CPU cores; machine %s busy in all, %s stolen",
			f(r.ReplayLoadgenCPUCores, ""), f(r.ReplayMachineCPUCores, ""), f(r.ReplayStealCPUCores, ""))
		line("replay/first", "latency p50 %s, p99 %s; gateway+postgres CPU per call %s (%s per replay vs %s per batch)",
			f(r.ReplayLatencyRatioP50, "×"), f(r.ReplayLatencyRatioP99, "×"), f(r.ReplayCPURatio, "×"), f(r.CPUMsPerReplay, " ms"), f(r.CPUMsPerBatch, " ms"))
	case "uploads":
		fmt.Fprintf(w, "uploads: 1 × %d MiB, then %d × %d KiB at once from %d workers\n", r.LargeMiB, r.Uploads, r.UploadKiB, r.Workers)
		line("large", "%s MiB/s open→commit (%s s: open %s, PUT %s s = %s MiB/s, commit %s)",
			f(r.LargeMiBPerSec, ""), f(r.LargeSeconds, ""), f(r.LargeOpenMs, " ms"), f(r.LargePutSeconds, ""), f(r.LargePutMiBPerSec, ""), f(r.LargeCommitMs, " ms"))
		line("large cpu", "gateway %s, postgres %s, load generator %s CPU cores; machine %s busy in all, %s stolen",
			f(r.LargeGatewayCPUCores, ""), f(r.LargePostgresCPUCores, ""), f(r.LargeLoadgenCPUCores, ""), f(r.LargeMachineCPUCores, ""), f(r.LargeStealCPUCores, ""))
		line("large rss", "gateway VmRSS %s before, peak %s (%d samples, every 50 ms)", f(r.LargeRSSBeforeMB, " MiB"), f(r.LargeRSSPeakMB, " MiB"), r.LargeRSSSamples)
		line("small", "%s MiB/s (%d of %d committed in %s s), per artifact open→commit p50 %s  p99 %s",
			f(r.SmallMiBPerSec, ""), r.SmallCommitted, r.Uploads, f(r.SmallSeconds, ""), f(r.SmallP50, " ms"), f(r.SmallP99, " ms"))
		line("small calls", "p50 open %s, PUT %s, commit %s", f(r.SmallOpenP50, " ms"), f(r.SmallPutP50, " ms"), f(r.SmallCommitP50, " ms"))
		line("small cpu", "gateway %s, postgres %s, load generator %s CPU cores; machine %s busy in all, %s stolen",
			f(r.SmallGatewayCPUCores, ""), f(r.SmallPostgresCPUCores, ""), f(r.SmallLoadgenCPUCores, ""), f(r.SmallMachineCPUCores, ""), f(r.SmallStealCPUCores, ""))
		line("small rss", "gateway VmRSS %s before, peak %s (%d samples, every 50 ms)", f(r.SmallRSSBeforeMB, " MiB"), f(r.SmallRSSPeakMB, " MiB"), r.SmallRSSSamples)
		line("gateway", "VmHWM at the end %s (peak RSS over the process's whole life)", f(r.GatewayRSSMB, " MiB"))
	case "idle":
		fmt.Fprintf(w, "idle: %d long-polls (wait_seconds %d) over %d workers and %d connections\n", r.Polls, r.WaitSeconds, r.Workers, r.Connections)
		line("ramp", "%s s to open them all, %d parked in the hub (gateway_waiting_polls) before the window", f(r.RampSeconds, ""), r.PollsParked)
		line("gateway", "%s CPU cores, VmRSS %s while parked (%s before the polls) = %s per poll",
			f(r.GatewayCPUCores, ""), f(r.GatewayRSSMB, " MiB"), f(r.GatewayRSSBeforeMB, " MiB"), f(r.RSSPerPollKiB, " KiB"))
		line("postgres", "%s CPU cores, %s xact/s; %s checkpoints, %s autovacuum runs",
			f(r.PostgresCPUCores, ""), f(r.DBXactPerSec, ""), n(r.Checkpoints), n(r.AutovacuumRuns))
		line("load generator", "%s CPU cores (this process; same machine)", f(r.LoadgenCPUCores, ""))
		line("machine", "%s CPU cores busy in all, %s stolen by the hypervisor", f(r.MachineCPUCores, ""), f(r.StealCPUCores, ""))
		line("window", "%.2f s; %d polls answered before its end and sent again", r.WallSeconds, r.Repolls)
	case "replicas":
		printReplicas(w, r)
	case "schedules":
		fmt.Fprintf(w, "schedules: %d interval schedules every %g s = %s fires/s due (created in %s s)\n",
			r.Schedules, r.PeriodSeconds, f(r.TargetFiresPerSec, ""), f(r.InsertSeconds, ""))
		line("idle", "nothing due: postgres %s xact/s, %s CPU cores; gateway %s CPU cores",
			f(r.IdleDBXactPerSec, ""), f(r.IdlePostgresCPUCores, ""), f(r.IdleGatewayCPUCores, ""))
		line("firing", "%s fires/s sustained (%d fires in %.2f s, %d claims)", f(r.FiresPerSec, ""), r.Fires, r.WallSeconds, r.Claims)
		line("lag", "slot due → run committed: p50 %s  p99 %s  max ≤ %s  (%d fires, gateway histogram)",
			f(r.LagP50, " ms"), f(r.LagP99, " ms"), f(r.LagMax, " ms"), r.LagSamples)
		line("gateway", "%s CPU cores = %s CPU per fire", f(r.GatewayCPUCores, ""), f(r.GatewayCPUMsPerTask, " ms"))
		line("postgres", "%s CPU cores = %s CPU per fire, %s xact/s; %s checkpoints, %s autovacuum runs",
			f(r.PostgresCPUCores, ""), f(r.PostgresCPUMsPerTask, " ms"), f(r.DBXactPerSec, ""), n(r.Checkpoints), n(r.AutovacuumRuns))
		line("machine", "%s CPU cores busy in all, %s stolen by the hypervisor", f(r.MachineCPUCores, ""), f(r.StealCPUCores, ""))
	case "backlog":
		fmt.Fprintf(w, "backlog: %d lease cycles per phase, 1 worker; backlog %d tasks of %d other organizations + %d unmatched in its own\n",
			r.Samples, r.BacklogTasks, backlogOrgs, r.UnmatchedTasks)
		line("no backlog", "lease p50 %s  p99 %s", f(r.EmptyLeaseP50, " ms"), f(r.EmptyLeaseP99, " ms"))
		line("backlog", "lease p50 %s  p99 %s  (inserted in %s s)", f(r.LeaseP50, " ms"), f(r.LeaseP99, " ms"), f(r.BacklogInsertSeconds, ""))
		line("ratio", "p50 %s  p99 %s  (%d lease calls measured, %d empty answers)", f(r.RatioP50, "×"), f(r.RatioP99, "×"), r.LeaseCalls, r.EmptyPolls)
	case "fairness":
		fmt.Fprintf(w, "fairness: A has %d pending tasks, B gets %d one at a time; %d workers serve both, batch %d\n",
			r.Tasks, r.Samples, r.Workers, r.Batch)
		line("lease cycles", "p50 %s  max %s  (lease answers, all workers, from B's create sent to its lease)", n(r.FairnessCyclesP50), n(r.FairnessCyclesMax))
		line("rounds", "p50 %s  max %s  (the most of those answers any one worker received)", n(r.FairnessRoundsP50), n(r.FairnessRoundsMax))
		line("passed over", "p50 %s  max %s  (calls sent after B's task existed, answered without it)", n(r.FairnessPassedOverP50), n(r.FairnessPassedOverMax))
		line("wait", "p50 %s  max %s  (create returned → lease received; %d of %d received)",
			f(r.FairnessWaitP50, " ms"), f(r.FairnessWaitMax, " ms"), r.SamplesReceived, r.Samples)
		line("run", "%.2f s, %d lease calls answered", r.WallSeconds, r.LeaseCalls)
	case "river":
		fmt.Fprintf(w, "river: %d no-op jobs, %d workers, fetch cooldown %g ms, poll interval %g ms, pool %d, River %s%s\n",
			r.Tasks, r.Workers, r.RiverFetchCooldownMs, r.RiverFetchPollMs, r.RiverMaxConns, r.RiverVersion, r.runLabel())
		line("throughput", "%s jobs/s (%.2f s from the client's start to the last completion; inserted in %s s)",
			f(r.TasksPerSec, ""), r.WallSeconds, f(r.RiverInsertSeconds, ""))
		line("river", "%s CPU cores = %s CPU per job (its process: client and no-op workers)", f(r.RiverCPUCores, ""), f(r.RiverCPUMsPerJob, " ms"))
	case "throughput-vs-river":
		fmt.Fprintf(w, "throughput vs River: %d run(s) each, alternating; %d tasks, gateway with %d workers, batch %d\n",
			r.Runs, r.Tasks, r.Workers, r.Batch)
		line("gateway", "%s tasks/s median %s, postgres CPU %s per task", f(r.GatewayTasksPerSec, ""), runList(r.GatewayRunsTasksPerSec), f(r.GatewayPGCPUMsPerTask, " ms"))
		line("river", "%s jobs/s median %s, postgres CPU %s per job", f(r.RiverJobsPerSec, ""), runList(r.RiverRunsJobsPerSec), f(r.RiverPGCPUMsPerJob, " ms"))
		line("gateway/river", "%s throughput, %s postgres CPU per task", f(r.GatewayRiverRatio, "×"), f(r.PGCPUPerTaskRatio, "×"))
		if r.FloorRatio != nil {
			line("gateway/floor", "%s (floor median %s tasks/s)", f(r.FloorRatio, "×"), f(r.FloorTasksPerSec, ""))
		}
	}
	if r.Scenario == "throughput" || r.Scenario == "latency" || r.Scenario == "river" {
		if r.Scenario != "river" {
			cpuVsFloor := ""
			if r.FloorCPURatio != nil {
				cpuVsFloor = fmt.Sprintf(" (%.1f× the floor server's)", *r.FloorCPURatio)
			}
			line("gateway", "%s CPU cores = %s CPU per task%s, peak RSS %s", f(r.GatewayCPUCores, ""), f(r.GatewayCPUMsPerTask, " ms"), cpuVsFloor, f(r.GatewayRSSMB, " MiB"))
		}
		line("postgres", "%s CPU cores = %s CPU per task, %s xact/s (%s per task); %s checkpoints, %s autovacuum runs",
			f(r.PostgresCPUCores, ""), f(r.PostgresCPUMsPerTask, " ms"), f(r.DBXactPerSec, ""), f(r.DBXactPerTask, ""), n(r.Checkpoints), n(r.AutovacuumRuns))
		line("load generator", "%s CPU cores (this process; same machine)", f(r.LoadgenCPUCores, ""))
		line("machine", "%s CPU cores busy in all, %s stolen by the hypervisor", f(r.MachineCPUCores, ""), f(r.StealCPUCores, ""))
	}
	if r.compareFigures != nil && len(r.LoadAvg) == 3 {
		line("load average", "%g %g %g (1, 5, 15 min, when the run began)", r.LoadAvg[0], r.LoadAvg[1], r.LoadAvg[2])
	}
	if r.Verification == nil {
		r.Verification = notRun{}
	}
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

// webhookGatewayArgs lets the gateway post to the bench's loopback
// receiver, and gives it the key that seals the receivers' signing secrets
// (benchSecretsKey) in a file.
func webhookGatewayArgs(webhooks bool) ([]string, error) {
	if !webhooks {
		return nil, nil
	}
	kek, err := benchSecretsKey()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "bench-secrets-*.key")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.WriteString(kek.Encode()); err != nil {
		return nil, err
	}
	return []string{"-webhooks-allow-private", "-secrets-key-file", f.Name()}, nil
}
