package ha

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
)

// pgBinDir is the PostgreSQL whose pg_auto_failover extension Debian
// packages (postgresql-15-auto-failover).
const pgBinDir = "/usr/lib/postgresql/15/bin"

// formationDatabase is the gateway's database on the formation.
const formationDatabase = "gateway"

// Monitor settings that make a failover take seconds rather than the
// defaults' half a minute: health checks every second, a node unhealthy
// after 3 s without a report, and the old primary given 3 s to demote
// itself before the standby is promoted anyway (it is dead: nobody is
// left to demote).
var monitorSettings = map[string]string{
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "1000",
	"pgautofailover.health_check_max_retries":          "1",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "3000",
	"pgautofailover.primary_demote_timeout":            "3000",
	"pgautofailover.startup_grace_period":              "3000",
}

// formation is a pg_auto_failover formation of real processes under a
// temporary directory: a monitor and two PostgreSQL nodes, a primary and
// a synchronous standby. pg_autoctl refuses to run as root; as root it
// runs as user postgres.
type formation struct {
	t       *testing.T
	dir     string
	cred    *syscall.Credential
	env     []string
	monitor *keeper
	nodes   []*keeper
}

// keeper is one pg_autoctl process and the PostgreSQL it runs.
type keeper struct {
	name   string
	pgdata string
	port   int
	cmd    *exec.Cmd
	done   chan struct{}
}

// requireFormationTools installs pg_auto_failover when it is missing and
// this is root, and skips the test when it cannot be.
func requireFormationTools(t *testing.T) {
	t.Helper()
	harness.RequirePackages(t, map[string]string{
		"pg_autoctl": "pg-auto-failover-cli",
		"/usr/share/postgresql/15/extension/pgautofailover.control": "postgresql-15-auto-failover",
		filepath.Join(pgBinDir, "pg_ctl"):                           "postgresql-15",
	})
}

// startFormation creates the monitor and two nodes and returns once the
// first is primary and the second its synchronous standby.
func startFormation(t *testing.T) *formation {
	t.Helper()
	requireFormationTools(t)
	parent := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		parent = "/dev/shm"
	}
	dir, err := os.MkdirTemp(parent, "gateway-pgaf-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	f := &formation{t: t, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root needs user postgres")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		f.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	// pg_autoctl keeps its configuration and state under XDG directories;
	// PG_REGRESS_SOCK_DIR is where it puts PostgreSQL's unix sockets, and
	// PGHOST where its own local connections look for them.
	f.env = []string{
		"HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "state"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "run"), "PG_REGRESS_SOCK_DIR=" + dir, "PGHOST=" + dir,
		"PATH=" + pgBinDir + ":" + os.Getenv("PATH"), "LANG=C", "LC_ALL=C",
	}
	t.Cleanup(f.destroy)
	began := time.Now()

	f.monitor = &keeper{name: "monitor", pgdata: filepath.Join(dir, "monitor"), port: freePort(t)}
	f.run("create", "monitor", "--pgdata", f.monitor.pgdata, "--pgport", strconv.Itoa(f.monitor.port),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", filepath.Join(pgBinDir, "pg_ctl"))
	f.start(f.monitor, "run", "--pgdata", f.monitor.pgdata)
	f.tuneMonitor()
	t.Logf("monitor up after %s", time.Since(began).Round(time.Millisecond))

	for i := range 2 {
		n := &keeper{name: fmt.Sprintf("node%d", i+1), pgdata: filepath.Join(dir, fmt.Sprintf("node%d", i+1)), port: freePort(t)}
		f.nodes = append(f.nodes, n)
		f.start(n, "create", "postgres", "--pgdata", n.pgdata, "--pgport", strconv.Itoa(n.port),
			"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", n.name, "--auth", "trust", "--no-ssl",
			"--dbname", formationDatabase, "--monitor", f.monitorURL("autoctl_node"),
			"--pgctl", filepath.Join(pgBinDir, "pg_ctl"), "--run")
		if i == 0 {
			f.waitState(n, 60*time.Second, "single")
			t.Logf("%s single after %s", n.name, time.Since(began).Round(time.Millisecond))
		}
	}
	f.waitSettled(2 * time.Minute)
	return f
}

// monitorURL is the monitor's database as user.
func (f *formation) monitorURL(user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/pg_auto_failover?sslmode=disable", user, f.monitor.port)
}

// nodeURL is node's own database, directly.
func (f *formation) nodeURL(n *keeper) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, formationDatabase)
}

// URL is the gateways' multi-host URL: pgx tries the nodes in turn and
// keeps the one that accepts writes.
func (f *formation) URL() string {
	hosts := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), formationDatabase)
}

// run runs a pg_autoctl command to its end.
func (f *formation) run(args ...string) {
	f.t.Helper()
	cmd := f.command(args...)
	out, err := cmd.CombinedOutput()
	require.NoError(f.t, err, "pg_autoctl %s:\n%s", strings.Join(args, " "), tail(out))
}

func (f *formation) command(args ...string) *exec.Cmd {
	cmd := exec.Command("pg_autoctl", args...)
	cmd.Dir = f.dir
	cmd.Env = append(os.Environ(), f.env...)
	// Its own process group: PostgreSQL and the keeper's services are
	// its children, so a kill of the group is a crash of the whole node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// start runs a long-lived pg_autoctl for k, logging to <pgdata>.log.
func (f *formation) start(k *keeper, args ...string) {
	f.t.Helper()
	log, err := os.OpenFile(k.pgdata+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(f.t, err)
	defer log.Close()
	cmd := f.command(args...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(f.t, cmd.Start())
	k.cmd, k.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(k.done)
	}()
}

// tuneMonitor applies monitorSettings once the monitor accepts connections.
func (f *formation) tuneMonitor() {
	f.t.Helper()
	var conn *pgx.Conn
	harness.WaitFor(f.t, 60*time.Second, "the monitor", func() bool {
		var err error
		conn, err = pgx.Connect(context.Background(), f.monitorURL("postgres"))
		return err == nil
	})
	defer conn.Close(context.Background())
	for name, value := range monitorSettings {
		_, err := conn.Exec(context.Background(), fmt.Sprintf("ALTER SYSTEM SET %s = %s", name, value))
		require.NoError(f.t, err)
	}
	_, err := conn.Exec(context.Background(), "SELECT pg_reload_conf()")
	require.NoError(f.t, err)
}

// nodeState is a node as the monitor sees it.
type nodeState struct{ reported, goal string }

// states reads every node's reported and assigned state from the monitor.
func (f *formation) states() (map[string]nodeState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.monitorURL("postgres"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node`)
	if err != nil {
		return nil, err
	}
	out := map[string]nodeState{}
	for rows.Next() {
		var name string
		var s nodeState
		if err := rows.Scan(&name, &s.reported, &s.goal); err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, rows.Err()
}

// waitState waits until the monitor has k reported in one of states, and
// assigned the same.
func (f *formation) waitState(k *keeper, timeout time.Duration, states ...string) {
	f.t.Helper()
	harness.WaitFor(f.t, timeout, k.name+" in state "+strings.Join(states, " or "), func() bool {
		st, err := f.states()
		if err != nil {
			return false
		}
		s := st[k.name]
		for _, want := range states {
			if s.reported == want && s.goal == want {
				return true
			}
		}
		return false
	})
}

// waitSettled waits until one node is primary and every other one is its
// secondary: replication synchronous again. Meanwhile it asks the primary
// for a checkpoint every second: pg_basebackup, which builds a standby
// that cannot rewind, otherwise waits for a spread checkpoint (minutes).
func (f *formation) waitSettled(timeout time.Duration) {
	f.t.Helper()
	last := time.Time{}
	harness.WaitFor(f.t, timeout, "a primary with a synchronous secondary", func() bool {
		if time.Since(last) > time.Second {
			last = time.Now()
			if p := f.primary(); p != nil {
				f.exec(p, "CHECKPOINT")
			}
		}
		st, err := f.states()
		if err != nil {
			return false
		}
		primaries, secondaries := 0, 0
		for _, s := range st {
			switch {
			case s.reported == "primary" && s.goal == "primary":
				primaries++
			case s.reported == "secondary" && s.goal == "secondary":
				secondaries++
			}
		}
		return primaries == 1 && secondaries == len(f.nodes)-1
	})
}

// primary is the node the monitor has as (wait_)primary, or nil.
func (f *formation) primary() *keeper {
	st, err := f.states()
	if err != nil {
		return nil
	}
	for _, n := range f.nodes {
		if s := st[n.name]; (s.reported == "primary" || s.reported == "wait_primary") && s.goal == s.reported {
			return n
		}
	}
	return nil
}

// exec runs sql on node n, best effort.
func (f *formation) exec(n *keeper, sql string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.nodeURL(n))
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, sql)
}

// crash makes node n fail as a machine would: with how "kill", every
// process of the node (keeper and PostgreSQL) gets SIGKILL; with
// "immediate", the keeper gets SIGKILL, then PostgreSQL is stopped with
// pg_ctl stop -m immediate (its backends quit without a checkpoint, as in a
// crash). Either way the node stays down: no keeper restarts PostgreSQL.
func (f *formation) crash(n *keeper, how string) {
	f.t.Helper()
	pgid := n.cmd.Process.Pid
	switch how {
	case "kill":
		require.NoError(f.t, syscall.Kill(-pgid, syscall.SIGKILL))
	case "immediate":
		for _, pid := range groupMembers(pgid) {
			if cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); bytes.Contains(cmdline, []byte("pg_autoctl")) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		cmd := exec.Command(filepath.Join(pgBinDir, "pg_ctl"), "stop", "-D", n.pgdata, "-m", "immediate", "-w")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
		cmd.Dir = f.dir
		out, err := cmd.CombinedOutput()
		require.NoError(f.t, err, "pg_ctl stop -m immediate:\n%s", out)
	default:
		f.t.Fatalf("unknown crash %q", how)
	}
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		f.t.Fatalf("%s's keeper still runs after the crash", n.name)
	}
	harness.WaitFor(f.t, 30*time.Second, n.name+"'s processes gone", func() bool { return len(groupMembers(pgid)) == 0 })
}

// rejoin runs node n's keeper again: the monitor has it rewind and follow
// the new primary as its standby.
func (f *formation) rejoin(n *keeper) {
	f.t.Helper()
	f.start(n, "run", "--pgdata", n.pgdata)
}

// destroy kills every process of the formation and removes its directory.
func (f *formation) destroy() {
	for _, k := range append([]*keeper{f.monitor}, f.nodes...) {
		if k == nil || k.cmd == nil {
			continue
		}
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
	}
	// A postmaster left by the "immediate" crash path is stopped with
	// its node's group; any other straggler goes now.
	for _, k := range append([]*keeper{f.monitor}, f.nodes...) {
		if k == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(k.pgdata, "postmaster.pid")); err == nil {
			cmd := exec.Command(filepath.Join(pgBinDir, "pg_ctl"), "stop", "-D", k.pgdata, "-m", "immediate")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
			cmd.Dir = f.dir
			_ = cmd.Run()
		}
	}
	if f.t.Failed() {
		f.t.Logf("pg_auto_failover logs kept in %s", f.dir)
		return
	}
	_ = os.RemoveAll(f.dir)
}

// groupMembers are the live processes of process group pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if !bytes.Contains(stat, []byte(") Z ")) { // a zombie is gone
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(out []byte) string {
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}
