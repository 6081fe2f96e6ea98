package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Resource figures come from the kernel and from PostgreSQL's statistics,
// read before and after each measured window:
//
//   - CPU time of a process: utime+stime in /proc/<pid>/stat, in clock ticks.
//   - PostgreSQL's CPU time: the postmaster's own utime+stime, plus its
//     cutime+cstime (backends that already exited and were reaped), plus the
//     utime+stime of its live children (every backend, the checkpointer, the
//     WAL writer, autovacuum, ... are direct children of the postmaster).
//   - Peak resident memory: VmHWM in /proc/<pid>/status.
//   - Transactions: xact_commit + xact_rollback of the database in
//     pg_stat_database. Backends publish these counters when they go idle,
//     but at most once a second; what a backend did in the second after its
//     last flush stays pending until it runs another statement or has been
//     idle for 10 s (PostgreSQL 15+, PGSTAT_IDLE_INTERVAL). So readings are
//     taken after an 11 s settle with the load stopped: a 1.5 s settle missed
//     about the last second of every backend's work (measured: ~150 of the
//     transactions of a 2 s window arrived 7–8 s after the reading).

// clockTick is USER_HZ, the unit of the /proc/<pid>/stat CPU fields. It is
// 100 on every Linux architecture (it is part of the kernel's ABI towards
// user space), and reading it through sysconf would need cgo.
const clockTick = time.Second / 100

// statSettle is how long to wait for backends to publish their statistics
// before reading pg_stat_database: longer than PostgreSQL's 10 s
// PGSTAT_IDLE_INTERVAL, after which an idle backend flushes what is pending.
const statSettle = 11 * time.Second

// procStat is the part of /proc/<pid>/stat the benchmark needs.
type procStat struct {
	ppid     int
	cpu      time.Duration // utime + stime
	childCPU time.Duration // cutime + cstime: children waited for
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// or parentheses itself: fields are counted after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	num := func(field int) int64 {
		v, _ := strconv.ParseInt(f[field-3], 10, 64)
		return v
	}
	return procStat{
		ppid:     int(num(4)),
		cpu:      time.Duration(num(14)+num(15)) * clockTick,
		childCPU: time.Duration(num(16)+num(17)) * clockTick,
	}, nil
}

// processCPU is the CPU time a process has used so far.
func processCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	return st.cpu, err
}

// clusterCPU is the CPU time used so far by a PostgreSQL cluster: the
// postmaster, its reaped children and its live children.
func clusterCPU(postmaster int) (time.Duration, error) {
	root, err := readProcStat(postmaster)
	if err != nil {
		return 0, err
	}
	total := root.cpu + root.childCPU
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.ppid != postmaster {
			continue // gone meanwhile, or not ours
		}
		total += st.cpu
	}
	return total, nil
}

// machineCPU reads the machine's busy CPU time (user + nice + system + irq +
// softirq, all cores) and the time stolen by the hypervisor, from the first
// line of /proc/stat. Busy time includes the gateway, PostgreSQL and the
// load generator: what is left over is everything else on the machine.
func machineCPU() (busy, steal time.Duration, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, errors.New("/proc/stat is empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, errors.New("/proc/stat: unexpected first line")
	}
	num := func(i int) time.Duration {
		v, _ := strconv.ParseInt(fields[i], 10, 64)
		return time.Duration(v) * clockTick
	}
	// cpu user nice system idle iowait irq softirq steal ...
	return num(1) + num(2) + num(3) + num(6) + num(7), num(8), nil
}

// postmasterPID reads the postmaster's pid from the first line of a data
// directory's postmaster.pid.
func postmasterPID(dataDir string) (int, error) {
	f, err := os.Open(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, fmt.Errorf("%s/postmaster.pid is empty", dataDir)
	}
	return strconv.Atoi(strings.TrimSpace(sc.Text()))
}

// peakRSSMB returns a process's peak resident set (VmHWM), or its current
// one (VmRSS) when the kernel does not report a peak, in MiB.
func peakRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	var rss float64
	for line := range strings.SplitSeq(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmHWM" && key != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 64)
		if err != nil {
			continue
		}
		if key == "VmHWM" {
			return kb / 1024, nil
		}
		rss = kb / 1024
	}
	if rss == 0 {
		return 0, fmt.Errorf("/proc/%d/status: no VmHWM or VmRSS", pid)
	}
	return rss, nil
}

// usage is one reading of every resource counter; a zero pid means the
// figure is not available (an external deployment without -gateway-pid or
// -postgres-data).
type usage struct {
	at         time.Time
	gatewayCPU time.Duration
	pgCPU      time.Duration
	selfCPU    time.Duration // the load generator (this process)
	// The whole machine, from /proc/stat: busy (user, nice, system, irq,
	// softirq) and stolen by the hypervisor for other guests.
	machineBusy, machineSteal time.Duration
	haveMachine               bool
	xacts                     int64
	haveGW                    bool
	havePG                    bool
	haveXacts                 bool
	// Background work in the database: checkpoints (timed or requested)
	// and autovacuum/autoanalyze runs on the database's tables.
	checkpoints, autovacuums int64
	haveMaint                bool
}

// readCPU fills in the instant and the CPU counters.
func (s *Stack) readCPU() usage {
	u := readProcessCPU(s.gatewayPIDs())
	if pid := s.PostmasterPID(); pid > 0 {
		if cpu, err := clusterCPU(pid); err == nil {
			u.pgCPU, u.havePG = cpu, true
		}
	}
	return u
}

// readProcessCPU reads the instant, this process's and the machine's CPU,
// and the CPU of the processes in the gateway's place (every replica, or
// the floor server), summed.
func readProcessCPU(gatewayPIDs []int) usage {
	u := usage{at: time.Now()}
	u.selfCPU, _ = processCPU(os.Getpid())
	if busy, steal, err := machineCPU(); err == nil {
		u.machineBusy, u.machineSteal, u.haveMachine = busy, steal, true
	}
	for _, pid := range gatewayPIDs {
		cpu, err := processCPU(pid)
		if err != nil {
			u.gatewayCPU, u.haveGW = 0, false
			break
		}
		u.gatewayCPU += cpu
		u.haveGW = true
	}
	return u
}

// readXacts adds the transaction counter of the gateway's database to a
// reading.
func (s *Stack) readXacts(ctx context.Context, u *usage) {
	s.readXactsIn(ctx, s.Pool, u)
}

// readXactsIn adds the transaction counter of pool's database (and its
// tables' autovacuum runs, and the cluster's checkpoints) to a reading.
func (s *Stack) readXactsIn(ctx context.Context, pool *pgxpool.Pool, u *usage) {
	// One statement, so a reading is one transaction (applyUsage subtracts
	// it).
	var xacts, ckpts, avs *int64
	err := pool.QueryRow(ctx, `SELECT
		(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
		(`+s.checkpointSQL(ctx)+`),
		(SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_all_tables)`).Scan(&xacts, &ckpts, &avs)
	if err != nil {
		return
	}
	if xacts != nil {
		u.xacts, u.haveXacts = *xacts, true
	}
	if ckpts != nil && avs != nil {
		u.checkpoints, u.autovacuums, u.haveMaint = *ckpts, *avs, true
	}
}

// checkpointSQL counts the cluster's checkpoints so far: pg_stat_bgwriter
// up to PostgreSQL 16, pg_stat_checkpointer from 17. The version comes from
// the connection's startup parameters, so finding it runs no transaction.
func (s *Stack) checkpointSQL(ctx context.Context) string {
	s.ckptOnce.Do(func() {
		s.ckptSQL = `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`
		c, err := s.Pool.Acquire(ctx)
		if err != nil {
			return
		}
		defer c.Release()
		v := c.Conn().PgConn().ParameterStatus("server_version")
		if major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0]); err == nil && major >= 17 {
			s.ckptSQL = `SELECT num_timed + num_requested FROM pg_stat_checkpointer`
		}
	})
	return s.ckptSQL
}

// beginWindow settles the statistics and takes the opening reading of a
// measured window.
func (s *Stack) beginWindow(ctx context.Context) usage {
	sleepCtx(ctx, statSettle)
	if pgStatements > 0 {
		_, _ = s.Pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
		_, _ = s.Pool.Exec(ctx, `SELECT pg_stat_reset()`) // this database's table and index counters
		// The resets' own transactions reach the counters up to a second
		// later: let them land before the opening reading.
		sleepCtx(ctx, statSettle)
	}
	u := s.readCPU()
	s.readXacts(ctx, &u)
	return u
}

// endWindow takes the closing CPU reading at once (the window ends now),
// then runs stopLoad (the caller stops its simulated clients, so that what
// they would do during the settle is not counted), and reads the
// transaction counter after the statistics settled.
func (s *Stack) endWindow(ctx context.Context, stopLoad func()) usage {
	u := s.readCPU()
	if stopLoad != nil {
		stopLoad()
	}
	sleepCtx(ctx, statSettle)
	s.readXacts(ctx, &u)
	if pgStatements > 0 {
		s.printTopStatements(ctx, pgStatements)
		s.printRowWork(ctx)
	}
	return u
}

// printTopStatements prints the n statements that took the most database
// time (execution + planning) since the window began, from
// pg_stat_statements (flag -pg-statements).
func (s *Stack) printTopStatements(ctx context.Context, n int) {
	rows, err := s.Pool.Query(ctx, `
		SELECT calls, total_exec_time, total_plan_time, rows,
			regexp_replace(left(query, 160), '\s+', ' ', 'g')
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: pg_stat_statements: %v\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "  %-9s %-10s %-10s %-9s %s\n", "calls", "exec ms", "plan ms", "µs/call", "statement")
	for rows.Next() {
		var calls, nrows int64
		var exec, plan float64
		var query string
		if err := rows.Scan(&calls, &exec, &plan, &nrows, &query); err != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "  %-9d %-10.0f %-10.0f %-9.0f %s\n", calls, exec, plan, (exec+plan)*1000/float64(max(calls, 1)), query)
	}
}

// printRowWork prints, for the window, each busy table's row changes (with
// how many updates were HOT: no index entry written) and each busy index's
// scans and entries read — where the row work of the hot path goes (flag
// -pg-statements).
func (s *Stack) printRowWork(ctx context.Context) {
	rows, err := s.Pool.Query(ctx, `
		SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0
		ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC`)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: pg_stat_user_tables: %v\n", err)
		return
	}
	fmt.Fprintf(os.Stderr, "  %-28s %-9s %-9s %-9s %s\n", "table", "inserts", "updates", "HOT", "deletes")
	for rows.Next() {
		var name string
		var ins, upd, hot, del int64
		if rows.Scan(&name, &ins, &upd, &hot, &del) == nil {
			fmt.Fprintf(os.Stderr, "  %-28s %-9d %-9d %-9d %d\n", name, ins, upd, hot, del)
		}
	}
	rows.Close()
	rows, err = s.Pool.Query(ctx, `
		SELECT indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes
		WHERE idx_scan > 0 ORDER BY idx_tup_read DESC LIMIT 12`)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: pg_stat_user_indexes: %v\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "  %-44s %-9s %s\n", "index", "scans", "entries read")
	for rows.Next() {
		var name string
		var scans, read int64
		if rows.Scan(&name, &scans, &read) == nil {
			fmt.Fprintf(os.Stderr, "  %-44s %-9d %d\n", name, scans, read)
		}
	}
}

// applyUsage fills the resource figures of r from two readings; wall is the
// measured window (which may be shorter than the span between the readings).
func (s *Stack) applyUsage(r *Result, start, end usage, wall time.Duration, tasks int) {
	secs := wall.Seconds()
	if secs <= 0 {
		return
	}
	if start.haveGW && end.haveGW {
		r.GatewayCPUCores = ptr(round((end.gatewayCPU-start.gatewayCPU).Seconds()/secs, 3))
		r.GatewayCPUMsPerTask = msPer(end.gatewayCPU-start.gatewayCPU, true, tasks)
	}
	if start.havePG && end.havePG {
		r.PostgresCPUCores = ptr(round((end.pgCPU-start.pgCPU).Seconds()/secs, 3))
		r.PostgresCPUMsPerTask = msPer(end.pgCPU-start.pgCPU, true, tasks)
	}
	r.LoadgenCPUCores = ptr(round((end.selfCPU-start.selfCPU).Seconds()/secs, 3))
	if start.haveMachine && end.haveMachine {
		r.MachineCPUCores = ptr(round((end.machineBusy-start.machineBusy).Seconds()/secs, 3))
		r.StealCPUCores = ptr(round((end.machineSteal-start.machineSteal).Seconds()/secs, 3))
	}
	if start.haveMaint && end.haveMaint {
		r.Checkpoints, r.AutovacuumRuns = ptr(end.checkpoints-start.checkpoints), ptr(end.autovacuums-start.autovacuums)
	}
	if pid := s.GatewayPID(); pid > 0 {
		if mb, err := peakRSSMB(pid); err == nil {
			r.GatewayRSSMB = ptr(round(mb, 1))
		}
	}
	if start.haveXacts && end.haveXacts {
		// Minus the reading query of the closing reading itself.
		n := float64(end.xacts - start.xacts - 1)
		r.DBXactPerSec = ptr(round(n/secs, 1))
		if tasks > 0 {
			r.DBXactPerTask = ptr(round(n/float64(tasks), 2))
		}
	}
}

// waitSampler samples what PostgreSQL's client backends are doing (their
// wait event, "CPU" when active without one, or "idle in transaction" while
// the gateway holds a transaction open between statements) every interval,
// for a quick look at where database time goes (flag -pg-waits).
type waitSampler struct {
	mu      sync.Mutex
	counts  map[string]int
	samples int
	stop    context.CancelFunc
	done    chan struct{}
}

func startWaitSampler(ctx context.Context, pool *pgxpool.Pool, interval time.Duration) *waitSampler {
	ctx, cancel := context.WithCancel(ctx)
	ws := &waitSampler{counts: map[string]int{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(ws.done)
		every(ctx, interval, func() {
			rows, err := pool.Query(ctx, `
				SELECT CASE
					WHEN state = 'idle in transaction' THEN 'idle in transaction'
					WHEN wait_event IS NULL THEN 'CPU'
					ELSE wait_event_type || ':' || wait_event END, count(*)
				FROM pg_stat_activity
				WHERE datname = current_database() AND backend_type = 'client backend'
					AND state IN ('active', 'idle in transaction') AND pid <> pg_backend_pid()
				GROUP BY 1`)
			if err != nil {
				return
			}
			ws.mu.Lock()
			ws.samples++
			for rows.Next() {
				var k string
				var n int
				if rows.Scan(&k, &n) == nil {
					ws.counts[k] += n
				}
			}
			ws.mu.Unlock()
			rows.Close()
		})
	}()
	return ws
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// finish stops sampling and returns the average number of backends in each
// state per sample, largest first.
func (ws *waitSampler) finish() []waitShare {
	ws.stop()
	<-ws.done
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []waitShare
	if ws.samples == 0 {
		return nil
	}
	for k, n := range ws.counts {
		out = append(out, waitShare{Event: k, Backends: round(float64(n)/float64(ws.samples), 2)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Backends > out[j].Backends })
	return out
}

// waitShare is the average number of backends seen in one state.
type waitShare struct {
	Event    string  `json:"event"`
	Backends float64 `json:"avg_backends"`
}

// percentiles returns nearest-rank percentiles (p in 0..100) of ds in
// milliseconds; ds is sorted in place.
func percentiles(ds []time.Duration, ps ...float64) []float64 {
	out := make([]float64, len(ps))
	for i, d := range nearestRank(ds, ps...) {
		out[i] = round(float64(d)/float64(time.Millisecond), 2)
	}
	return out
}

// nearestRank returns nearest-rank percentiles (p in 0..100) of vs (zero
// values when vs is empty); vs is sorted in place.
func nearestRank[T cmp.Ordered](vs []T, ps ...float64) []T {
	out := make([]T, len(ps))
	if len(vs) == 0 {
		return out
	}
	slices.Sort(vs)
	for i, p := range ps {
		rank := int(p/100*float64(len(vs))+0.999999) - 1
		out[i] = vs[max(0, min(rank, len(vs)-1))]
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}

// stopReason says why a scenario's context ended.
func stopReason(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "time limit (-time-limit) reached"
	}
	return "interrupted"
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// statusMiB reads one "kB" field of /proc/<pid>/status (VmRSS, VmHWM, ...)
// in MiB.
func statusMiB(pid int, key string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, val, ok := strings.Cut(line, ":")
		if !ok || k != key {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, key, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
}

// rssSampler records the largest VmRSS of a process, read every interval.
// VmHWM cannot say what one phase of a run needed (it is the peak over the
// process's whole life), so phases sample VmRSS themselves.
type rssSampler struct {
	mu      sync.Mutex
	peak    float64
	samples int
	stop    context.CancelFunc
	done    chan struct{}
}

// startRSSSampler samples pid's VmRSS every interval until finish; nil when
// pid is unknown.
func startRSSSampler(ctx context.Context, pid int, interval time.Duration) *rssSampler {
	if pid <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	rs := &rssSampler{stop: cancel, done: make(chan struct{})}
	sample := func() {
		if mb, err := statusMiB(pid, "VmRSS"); err == nil {
			rs.mu.Lock()
			rs.peak = max(rs.peak, mb)
			rs.samples++
			rs.mu.Unlock()
		}
	}
	sample()
	go func() {
		defer close(rs.done)
		every(ctx, interval, sample)
	}()
	return rs
}

// finish takes a last sample, stops, and returns the peak VmRSS in MiB and
// how many samples it is the maximum of.
func (rs *rssSampler) finish(pid int) (peakMiB float64, samples int) {
	if rs == nil {
		return 0, 0
	}
	rs.stop()
	<-rs.done
	if mb, err := statusMiB(pid, "VmRSS"); err == nil {
		rs.peak = max(rs.peak, mb)
		rs.samples++
	}
	return rs.peak, rs.samples
}

// phaseUsage is what a measured phase cost, from two readings.
type phaseUsage struct {
	wall                       time.Duration
	gatewayCPU, pgCPU, selfCPU time.Duration
	machineBusy, machineSteal  time.Duration
	haveMachine                bool
	haveGW, havePG             bool
	xacts                      int64
	haveXacts                  bool
	checkpoints, autovacuums   int64
	haveMaint                  bool
}

func usageBetween(start, end usage, wall time.Duration) phaseUsage {
	p := phaseUsage{wall: wall, selfCPU: end.selfCPU - start.selfCPU}
	if start.haveMachine && end.haveMachine {
		p.machineBusy, p.machineSteal, p.haveMachine = end.machineBusy-start.machineBusy, end.machineSteal-start.machineSteal, true
	}
	if start.haveGW && end.haveGW {
		p.gatewayCPU, p.haveGW = end.gatewayCPU-start.gatewayCPU, true
	}
	if start.havePG && end.havePG {
		p.pgCPU, p.havePG = end.pgCPU-start.pgCPU, true
	}
	if start.haveXacts && end.haveXacts {
		// Minus the reading query of the closing reading itself.
		p.xacts, p.haveXacts = end.xacts-start.xacts-1, true
	}
	if start.haveMaint && end.haveMaint {
		p.checkpoints, p.autovacuums, p.haveMaint = end.checkpoints-start.checkpoints, end.autovacuums-start.autovacuums, true
	}
	return p
}

// cores is CPU time ÷ the phase's wall time (1.0 = one core busy).
func (p phaseUsage) cores(cpu time.Duration, have bool) *float64 {
	if !have || p.wall <= 0 {
		return nil
	}
	return ptr(round(cpu.Seconds()/p.wall.Seconds(), 3))
}

func (p phaseUsage) gatewayCores() *float64  { return p.cores(p.gatewayCPU, p.haveGW) }
func (p phaseUsage) postgresCores() *float64 { return p.cores(p.pgCPU, p.havePG) }
func (p phaseUsage) loadgenCores() *float64  { return p.cores(p.selfCPU, true) }
func (p phaseUsage) machineCores() *float64  { return p.cores(p.machineBusy, p.haveMachine) }
func (p phaseUsage) stealCores() *float64    { return p.cores(p.machineSteal, p.haveMachine) }

// msPer is CPU milliseconds per call.
func msPer(cpu time.Duration, have bool, calls int) *float64 {
	if !have || calls <= 0 {
		return nil
	}
	return ptr(round(float64(cpu)/float64(time.Millisecond)/float64(calls), 3))
}

// serverMsPer is gateway plus PostgreSQL CPU milliseconds per call: what a
// call costs the system under test.
func (p phaseUsage) serverMsPer(calls int) *float64 {
	if !p.haveGW || !p.havePG || calls <= 0 {
		return nil
	}
	return msPer(p.gatewayCPU+p.pgCPU, true, calls)
}

// maintenance is the checkpoints and autovacuum runs during the phase.
func (p phaseUsage) maintenance() (checkpoints, autovacuums *int64) {
	if !p.haveMaint {
		return nil, nil
	}
	return ptr(p.checkpoints), ptr(p.autovacuums)
}

func (p phaseUsage) xactsPerSec() *float64 {
	if !p.haveXacts || p.wall <= 0 {
		return nil
	}
	return ptr(round(float64(p.xacts)/p.wall.Seconds(), 1))
}

func (p phaseUsage) xactsPer(calls int) *float64 {
	if !p.haveXacts || calls <= 0 {
		return nil
	}
	return ptr(round(float64(p.xacts)/float64(calls), 2))
}

// ratio is a ÷ b, or nil.
func ratio(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	return ptr(round(*a / *b, 3))
}

// verdictOf names a verification's outcome in the human summary.
func verdictOf(ok bool) string {
	if ok {
		return "OK"
	}
	return "FAILED"
}
