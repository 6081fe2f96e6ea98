package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
//     pg_stat_database. Backends publish these counters when idle (at most
//     about once a second), so readings are taken after a short settle.

// clockTick is USER_HZ, the unit of the /proc/<pid>/stat CPU fields. It is
// 100 on every Linux architecture (it is part of the kernel's ABI towards
// user space), and reading it through sysconf would need cgo.
const clockTick = time.Second / 100

// statSettle is how long to wait for backends to publish their statistics
// before reading pg_stat_database.
const statSettle = 1500 * time.Millisecond

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

// dbXacts is the database's committed plus rolled-back transaction count.
func dbXacts(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// usage is one reading of every resource counter; a zero pid means the
// figure is not available (an external deployment without -gateway-pid or
// -postgres-data).
type usage struct {
	at         time.Time
	gatewayCPU time.Duration
	pgCPU      time.Duration
	selfCPU    time.Duration // the load generator (this process)
	xacts      int64
	haveGW     bool
	havePG     bool
	haveXacts  bool
}

// readCPU fills in the instant and the CPU counters.
func (s *Stack) readCPU() usage {
	u := usage{at: time.Now()}
	u.selfCPU, _ = processCPU(os.Getpid())
	if pid := s.GatewayPID(); pid > 0 {
		if cpu, err := processCPU(pid); err == nil {
			u.gatewayCPU, u.haveGW = cpu, true
		}
	}
	if pid := s.PostmasterPID(); pid > 0 {
		if cpu, err := clusterCPU(pid); err == nil {
			u.pgCPU, u.havePG = cpu, true
		}
	}
	return u
}

// readXacts adds the transaction counter to a reading.
func (s *Stack) readXacts(ctx context.Context, u *usage) {
	if n, err := dbXacts(ctx, s.Pool); err == nil {
		u.xacts, u.haveXacts = n, true
	}
}

// beginWindow settles the statistics and takes the opening reading of a
// measured window.
func (s *Stack) beginWindow(ctx context.Context) usage {
	sleepCtx(ctx, statSettle)
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
	return u
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
	}
	if start.havePG && end.havePG {
		r.PostgresCPUCores = ptr(round((end.pgCPU-start.pgCPU).Seconds()/secs, 3))
	}
	r.LoadgenCPUCores = ptr(round((end.selfCPU-start.selfCPU).Seconds()/secs, 3))
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
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
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
				continue
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
		}
	}()
	return ws
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
	if len(ds) == 0 {
		return out
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	for i, p := range ps {
		rank := int(p/100*float64(len(ds))+0.999999) - 1
		rank = max(0, min(rank, len(ds)-1))
		out[i] = round(float64(ds[rank])/float64(time.Millisecond), 2)
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
