package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// -compare river: River (github.com/riverqueue/river), the Go job queue on
// PostgreSQL, drains as many no-op jobs as the throughput scenario's tasks
// on the same private PostgreSQL cluster, in a database of its own. The
// command that drives River lives in scripts/bench/compare/river, a Go
// module of its own so River never enters the gateway's go.mod; it is built
// with `go build` into the stack's directory and run as a child process.

// riverConfig is River's side of the comparison.
type riverConfig struct {
	workers           int
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
	maxConns          int // 0: pgx's default, as river bench
}

// compareConfig is `-scenario throughput -compare river`.
type compareConfig struct {
	runs       int
	throughput throughputConfig
	river      riverConfig
	timeLimit  time.Duration // per run
	// floor runs and reports the floor before each gateway run (nil:
	// none, or it returns nil).
	floor func(context.Context) *Result
}

// compareFigures are the keys only -compare river produces, embedded in
// Result (absent from other scenarios' JSON).
type compareFigures struct {
	// Every run of a pair, gateway and river: which one (1…runs) and the
	// machine's load average (1, 5, 15 min) when it began.
	Run     int       `json:"run,omitempty"`
	LoadAvg []float64 `json:"load_avg,omitempty"`

	// A river run: tasks_per_sec, postgres_cpu_ms_per_task, … are per job.
	RiverCPUCores        *float64 `json:"river_cpu_cores,omitempty"`
	RiverCPUMsPerJob     *float64 `json:"river_cpu_ms_per_job,omitempty"`
	RiverInsertSeconds   *float64 `json:"river_insert_seconds,omitempty"`
	RiverFetchCooldownMs float64  `json:"river_fetch_cooldown_ms,omitempty"`
	RiverFetchPollMs     float64  `json:"river_fetch_poll_interval_ms,omitempty"`
	RiverMaxConns        int      `json:"river_max_conns,omitempty"`
	RiverVersion         string   `json:"river_version,omitempty"`

	// The summary (scenario "throughput-vs-river"): medians over the runs.
	Runs                   int       `json:"runs,omitempty"`
	GatewayRunsTasksPerSec []float64 `json:"gateway_runs_tasks_per_sec,omitempty"`
	RiverRunsJobsPerSec    []float64 `json:"river_runs_jobs_per_sec,omitempty"`
	GatewayTasksPerSec     *float64  `json:"gateway_tasks_per_sec,omitempty"`
	RiverJobsPerSec        *float64  `json:"river_jobs_per_sec,omitempty"`
	GatewayRiverRatio      *float64  `json:"gateway_river_ratio,omitempty"`
	GatewayPGCPUMsPerTask  *float64  `json:"gateway_postgres_cpu_ms_per_task,omitempty"`
	RiverPGCPUMsPerJob     *float64  `json:"river_postgres_cpu_ms_per_job,omitempty"`
	PGCPUPerTaskRatio      *float64  `json:"postgres_cpu_per_task_ratio,omitempty"`
}

// runCompareRiver alternates gateway and River runs (gateway first), hands
// each run's result to emit as soon as it is known, and returns the
// summary: medians of both rates and of the PostgreSQL CPU per task, and
// their ratios gateway ÷ River.
func runCompareRiver(ctx context.Context, s *Stack, c compareConfig, logf func(string, ...any), emit func(*Result, error)) (*Result, error) {
	sum := &Result{Scenario: "throughput-vs-river", Tasks: c.throughput.tasks, Workers: c.throughput.workers,
		Batch: c.throughput.batch, CompleteMany: c.throughput.completeMany, Next: c.throughput.next, compareFigures: &compareFigures{Runs: c.runs}}
	if s.cluster == nil {
		return sum, errors.New("-compare river needs the private stack (River gets a database on its cluster)")
	}
	logf("compare: building scripts/bench/compare/river")
	bin, err := s.buildRiver(ctx)
	if err != nil {
		return sum, err
	}
	riverURL, err := s.riverDatabase(ctx)
	if err != nil {
		return sum, err
	}
	riverPool, err := pgxpool.New(ctx, riverURL)
	if err != nil {
		return sum, err
	}
	defer riverPool.Close()

	var gwRates, rvRates, gwPG, rvPG, floorRates []float64
	allVerified := true
	for run := 1; run <= c.runs && ctx.Err() == nil; run++ {
		var floor *Result
		if c.floor != nil {
			if floor = c.floor(ctx); floor != nil && floor.Verified && floor.Error == "" {
				floorRates = appendFigure(floorRates, floor.TasksPerSec)
			}
		}
		load := loadAvg()
		runCtx, cancel := context.WithTimeout(ctx, c.timeLimit)
		logf("compare: run %d of %d: gateway", run, c.runs)
		r, err := runThroughput(runCtx, s, c.throughput, logf)
		cancel()
		applyFloor(r, floor)
		r.compareFigures = &compareFigures{Run: run, LoadAvg: load}
		emit(r, err)
		if err != nil {
			return sum, fmt.Errorf("gateway run %d: %w", run, err)
		}
		allVerified = allVerified && r.Verified
		gwRates = appendFigure(gwRates, r.TasksPerSec)
		gwPG = appendFigure(gwPG, r.PostgresCPUMsPerTask)

		load = loadAvg()
		runCtx, cancel = context.WithTimeout(ctx, c.timeLimit)
		logf("compare: run %d of %d: river", run, c.runs)
		r, err = runRiver(runCtx, s, bin, riverURL, riverPool, c.throughput.tasks, c.river, logf)
		cancel()
		r.Run, r.LoadAvg = run, load
		emit(r, err)
		if err != nil {
			return sum, fmt.Errorf("river run %d: %w", run, err)
		}
		allVerified = allVerified && r.Verified
		rvRates = appendFigure(rvRates, r.TasksPerSec)
		rvPG = appendFigure(rvPG, r.PostgresCPUMsPerTask)
	}
	summarizeComparison(sum, gwRates, rvRates, gwPG, rvPG)
	if len(floorRates) == c.runs {
		sum.FloorTasksPerSec = median(floorRates, 1)
		sum.FloorRatio = ratio(sum.GatewayTasksPerSec, sum.FloorTasksPerSec)
	}
	sum.Verified = allVerified && len(gwRates) == c.runs && len(rvRates) == c.runs
	sum.Verification = compareVerdict{ok: sum.Verified, runs: c.runs}
	if ctx.Err() != nil {
		return sum, errors.New(stopReason(ctx))
	}
	return sum, nil
}

// summarizeComparison fills in the medians and ratios from the runs'
// figures (rates in tasks or jobs per second, PostgreSQL CPU in ms per
// task or job).
func summarizeComparison(sum *Result, gwRates, rvRates, gwPG, rvPG []float64) {
	f := sum.compareFigures
	f.GatewayRunsTasksPerSec, f.RiverRunsJobsPerSec = gwRates, rvRates
	f.GatewayTasksPerSec, f.RiverJobsPerSec = median(gwRates, 1), median(rvRates, 1)
	f.GatewayRiverRatio = ratio(f.GatewayTasksPerSec, f.RiverJobsPerSec)
	f.GatewayPGCPUMsPerTask, f.RiverPGCPUMsPerJob = median(gwPG, 3), median(rvPG, 3)
	f.PGCPUPerTaskRatio = ratio(f.GatewayPGCPUMsPerTask, f.RiverPGCPUMsPerJob)
}

// median of vs rounded to places, or nil when vs is empty; an even count
// takes the mean of the middle two. vs is not modified.
func median(vs []float64, places int) *float64 {
	if len(vs) == 0 {
		return nil
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return ptr(round(m, places))
}

func appendFigure(vs []float64, v *float64) []float64 {
	if v == nil {
		return vs
	}
	return append(vs, *v)
}

// compareVerdict says whether every run of the comparison was verified.
type compareVerdict struct {
	ok   bool
	runs int
}

func (v compareVerdict) String() string {
	if v.ok {
		return fmt.Sprintf("OK: all %d gateway and %d river runs verified", v.runs, v.runs)
	}
	return "FAILED: see the runs above"
}

func (v compareVerdict) MarshalJSON() ([]byte, error) { return json.Marshal(v.ok) }

// buildRiver builds the River command from its own module into the stack's
// directory, once per benchmark process.
func (s *Stack) buildRiver(ctx context.Context) (string, error) {
	bin := filepath.Join(s.dir, "river-bench")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, "scripts", "bench", "compare", "river")
	// Its own go.mod decides, whatever workspace the caller has set.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build scripts/bench/compare/river: %w\n%s", err, out)
	}
	return bin, nil
}

// riverDatabase creates the database River works in (once) and returns
// its URL.
func (s *Stack) riverDatabase(ctx context.Context) (string, error) {
	if err := s.cluster.CreateDatabase(ctx, "river", ""); err != nil && !strings.Contains(err.Error(), "already exists") {
		return "", err
	}
	return s.cluster.URL("river"), nil
}

// riverLine is one JSON line of the River command: "inserted" once the jobs
// exist, "done" once the last completion was persisted.
type riverLine struct {
	Event               string  `json:"event"`
	Jobs                int     `json:"jobs"`
	InsertSeconds       float64 `json:"insert_seconds"`
	Completed           int     `json:"completed"`
	Failed              int     `json:"failed"`
	Seconds             float64 `json:"seconds"`
	JobsPerSec          float64 `json:"jobs_per_sec"`
	Workers             int     `json:"workers"`
	FetchCooldownMs     float64 `json:"fetch_cooldown_ms"`
	FetchPollIntervalMs float64 `json:"fetch_poll_interval_ms"`
	MaxConns            int     `json:"max_conns"`
	RiverVersion        string  `json:"river_version"`
}

func parseRiverLine(line string) (riverLine, error) {
	var l riverLine
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		return l, fmt.Errorf("river command wrote %q: %w", line, err)
	}
	if l.Event != "inserted" && l.Event != "done" {
		return l, fmt.Errorf("river command wrote an unknown event %q", l.Event)
	}
	return l, nil
}

// riverChild is a running River command.
type riverChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its standard output, line by line; closed at EOF
	exited chan struct{}
	log    string
}

func startRiver(bin, logPath string, args []string) (*riverChild, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	// As the gateway: its own process group (Ctrl-C reaches only the
	// benchmark, which stops it), and it dies with the benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start river command: %w", err)
	}
	c := &riverChild{cmd: cmd, stdin: stdin, lines: make(chan string, 4), exited: make(chan struct{}), log: logPath}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// next waits for the command's next line, which must be event want.
func (c *riverChild) next(ctx context.Context, want string) (riverLine, error) {
	select {
	case <-ctx.Done():
		return riverLine{}, errors.New(stopReason(ctx))
	case line, ok := <-c.lines:
		if !ok {
			<-c.exited
			return riverLine{}, fmt.Errorf("river command ended (%s) before %q\nriver log (%s):\n%s",
				c.cmd.ProcessState, want, c.log, tailFile(c.log, 20))
		}
		l, err := parseRiverLine(line)
		if err == nil && l.Event != want {
			err = fmt.Errorf("river command wrote %q, expected %q", l.Event, want)
		}
		return l, err
	}
}

// stop waits for the command to end by itself (it stops its client after
// the last job), then sends SIGTERM, then SIGKILL.
func (c *riverChild) stop(wait time.Duration) error {
	_ = c.stdin.Close()
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			_ = c.cmd.Process.Signal(sig)
		}
		select {
		case <-c.exited:
			if !c.cmd.ProcessState.Success() {
				return fmt.Errorf("river command: %s\nriver log (%s):\n%s", c.cmd.ProcessState, c.log, tailFile(c.log, 20))
			}
			return nil
		case <-time.After(wait):
		}
	}
	<-c.exited
	return errors.New("river command did not stop")
}

// runRiver is one River run: the command migrates River's schema, empties
// river_job and inserts the jobs (setup, not measured); the database is
// settled as for the gateway (ANALYZE, CHECKPOINT, the statistics settle);
// then the CPU readings bracket the work only: the opening one just before
// the command is told to start its client, the closing one as soon as it
// reports the last completion. Verification in SQL: every job completed,
// each in one attempt.
func runRiver(ctx context.Context, s *Stack, bin, url string, pool *pgxpool.Pool, jobs int, c riverConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "river", Tasks: jobs, Workers: c.workers, compareFigures: &compareFigures{}}
	args := []string{"-database-url", url, "-jobs", strconv.Itoa(jobs), "-workers", strconv.Itoa(c.workers),
		"-fetch-cooldown", c.fetchCooldown.String(), "-fetch-poll-interval", c.fetchPollInterval.String(),
		"-max-conns", strconv.Itoa(c.maxConns), "-wait-start"}
	if dl, ok := ctx.Deadline(); ok {
		args = append(args, "-time-limit", time.Until(dl).Round(time.Second).String())
	}
	logf("river: migrating and inserting %d no-op jobs", jobs)
	child, err := startRiver(bin, filepath.Join(s.dir, "river.log"), args)
	if err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = child.stop(5 * time.Second)
		}
	}()
	ins, err := child.next(ctx, "inserted")
	if err != nil {
		return r, err
	}
	r.RiverInsertSeconds = ptr(round(ins.InsertSeconds, 3))
	for _, stmt := range []string{"ANALYZE river_job", "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			logf("%s: %v (continuing)", stmt, err)
		}
	}

	sleepCtx(ctx, statSettle)
	before := s.readCPU()
	s.readXactsIn(ctx, pool, &before)
	riverBefore, riverBeforeErr := processCPU(child.cmd.Process.Pid)
	logf("river: %d workers draining", c.workers)
	if _, err := io.WriteString(child.stdin, "start\n"); err != nil {
		return r, fmt.Errorf("start river client: %w", err)
	}
	done, err := child.next(ctx, "done")
	after := s.readCPU()
	riverAfter, riverErr := processCPU(child.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	stopped = true
	if err := child.stop(30 * time.Second); err != nil {
		return r, err
	}
	sleepCtx(ctx, statSettle)
	s.readXactsIn(context.WithoutCancel(ctx), pool, &after)

	wall := time.Duration(done.Seconds * float64(time.Second))
	r.WallSeconds = round(done.Seconds, 3)
	r.TasksPerSec = ptr(round(done.JobsPerSec, 1))
	r.RiverFetchCooldownMs, r.RiverFetchPollMs = done.FetchCooldownMs, done.FetchPollIntervalMs
	r.RiverMaxConns, r.RiverVersion = done.MaxConns, done.RiverVersion
	s.applyUsage(r, before, after, wall, done.Completed)
	if before.haveXacts && after.haveXacts && done.Completed > 0 {
		// River fetches and completes jobs by the thousand: a few
		// transactions per thousand jobs, which two decimals would show as 0.
		r.DBXactPerTask = ptr(round(float64(after.xacts-before.xacts-1)/float64(done.Completed), 5))
	}
	// The gateway is idle here; River's own process takes its place.
	r.GatewayCPUCores, r.GatewayCPUMsPerTask, r.GatewayRSSMB = nil, nil, nil
	if riverBeforeErr == nil && riverErr == nil && wall > 0 {
		r.RiverCPUCores = ptr(round((riverAfter-riverBefore).Seconds()/wall.Seconds(), 3))
		r.RiverCPUMsPerJob = msPer(riverAfter-riverBefore, true, done.Completed)
	}

	v, err := verifyRiver(context.WithoutCancel(ctx), pool, jobs, done.Failed)
	if err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	r.Verification = v
	r.Verified = v.ok && done.Completed == jobs
	if ctx.Err() != nil {
		return r, errors.New(stopReason(ctx))
	}
	return r, nil
}

// riverVerification is the database's view of a River run.
type riverVerification struct {
	Jobs        int `json:"jobs"`
	Completed   int `json:"completed"`
	Reattempted int `json:"jobs_attempted_more_than_once"`
	Failed      int `json:"failed_events"`
	want        int
	ok          bool
}

func (v riverVerification) String() string {
	return fmt.Sprintf("%s: %d jobs (%d wanted), %d completed, %d attempted more than once, %d failure events",
		verdictOf(v.ok), v.Jobs, v.want, v.Completed, v.Reattempted, v.Failed)
}

// verifyRiver checks that river_job holds exactly the run's jobs, every one
// completed in its first attempt.
func verifyRiver(ctx context.Context, pool *pgxpool.Pool, want, failed int) (riverVerification, error) {
	v := riverVerification{want: want, Failed: failed}
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE attempt <> 1)
		FROM river_job`).Scan(&v.Jobs, &v.Completed, &v.Reattempted)
	v.ok = err == nil && v.Jobs == want && v.Completed == want && v.Reattempted == 0 && failed == 0
	return v, err
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes, or nil.
func loadAvg() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	l, err := parseLoadAvg(string(b))
	if err != nil {
		return nil
	}
	return l
}

// parseLoadAvg reads the first three fields of /proc/loadavg.
func parseLoadAvg(s string) ([]float64, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return nil, fmt.Errorf("/proc/loadavg: %q", s)
	}
	out := make([]float64, 3)
	for i := range out {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/loadavg: %w", err)
		}
		out[i] = v
	}
	return out, nil
}
