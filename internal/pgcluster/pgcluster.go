// Package pgcluster starts and stops a private PostgreSQL cluster for
// development and tests.
//
// A cluster lives in one directory: the data directory is Dir/data, the unix
// socket sits in Dir itself and the server log is Dir/postgres.log. The server
// listens on 127.0.0.1 only and trusts every local connection as the
// superuser "postgres", so it must never hold anything that matters.
//
// PostgreSQL refuses to run as root. When the calling process is root (as in
// CI containers), the cluster directory is handed to the "postgres" user and
// every PostgreSQL program is run through runuser(1); when PostgreSQL is not
// installed at all, root installs it from the distribution's packages.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/pgproc"
)

// Options configures Start.
type Options struct {
	// Dir is the cluster directory; the data directory, the unix socket and
	// the log live under it. It is created if missing. If it already holds an
	// initialised data directory, that one is reused, so a development server
	// keeps its data across restarts.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Durable keeps PostgreSQL's crash-safety defaults. When false (tests),
	// fsync, synchronous_commit and full_page_writes are turned off: a
	// throwaway cluster does not need to survive a power loss, and tests run
	// much faster without flushing.
	Durable bool
	// MaxConnections is the server's max_connections; 0 means 300, enough
	// for many parallel tests that each hold a small pool.
	MaxConnections int
	// Logf, when set, receives progress messages.
	Logf func(format string, args ...any)
	// InitdbCache, when set, is a directory where one freshly initialised
	// data directory per PostgreSQL version is kept and copied into new
	// clusters instead of running initdb each time: initdb takes seconds
	// (mostly importing collations), a copy takes milliseconds, which
	// matters when every test binary starts its own cluster. Any problem
	// with the cache falls back to a plain initdb.
	InitdbCache string
	// Settings are extra server settings ("name=value"), passed as -c
	// options after the ones this package sets (for example
	// "shared_preload_libraries=pg_stat_statements" for a benchmark).
	Settings []string
}

// defaultMaxConnections is used when Options.MaxConnections is 0.
const defaultMaxConnections = 300

// readyTimeout bounds how long Start, Restart and Resume wait for the server
// to accept connections, on top of whatever deadline the caller's ctx has.
const readyTimeout = 30 * time.Second

// maxSocketPath is the longest unix socket path used. The kernel limit is 107
// bytes (sun_path); PostgreSQL refuses longer paths, so past this the unix
// socket is switched off and only TCP is used.
const maxSocketPath = 100

// Cluster is a running (or stopped) private PostgreSQL cluster. Its methods
// are safe for concurrent use.
type Cluster struct {
	dir     string
	dataDir string
	logPath string
	port    int
	opts    Options
	binDir  string
	// runAs is the "postgres" account when this process is root: PostgreSQL
	// programs must then run as that user. Nil otherwise.
	runAs *pgproc.Account

	// mu serialises the state-changing methods (start, stop, restart).
	mu      sync.Mutex
	running bool
}

// Start prepares and starts a cluster in opts.Dir and returns once it accepts
// connections. It installs PostgreSQL when running as root and it is missing,
// runs initdb when the directory holds no data directory yet, and stops a
// postmaster left running from the same directory by a killed earlier run.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgcluster: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = defaultMaxConnections
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		port:    opts.Port,
		opts:    opts,
	}

	if c.binDir, err = findBinDir(ctx, opts.Logf); err != nil {
		return nil, err
	}
	if c.runAs, err = pgproc.RunAs(); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	if err := c.stopStale(ctx); err != nil {
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.start(ctx); err != nil {
		// A server that started but never became reachable would
		// otherwise outlive the failed Start.
		_ = c.stop(context.WithoutCancel(ctx), "immediate")
		return nil, err
	}
	return c, nil
}

// URL returns a connection URL for database on this cluster, as superuser.
func (c *Cluster) URL(database string) string { return pgproc.URL(c.port, database) }

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Dir returns the cluster directory; it is also the unix socket directory
// (usable as psql's -h) unless its path was too long for a socket.
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the server log file.
func (c *Cluster) LogPath() string { return c.logPath }

// CreateDatabase creates database name, cloned from template, or from
// PostgreSQL's default template when template is "". The error wraps the
// server's *pgconn.PgError, so callers can inspect its SQLSTATE.
func (c *Cluster) CreateDatabase(ctx context.Context, name string, template string) error {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: create database %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgcluster: create database %q: %w", name, err)
	}
	return nil
}

// Stop shuts the server down cleanly (pg_ctl stop -m fast: active sessions
// are disconnected) and waits for it to exit. Stopping a stopped cluster is a
// no-op.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop(context.Background(), "fast")
}

// StopImmediate kills the server without a clean shutdown (pg_ctl stop -m
// immediate), as a crash would; the next start runs crash recovery. For fault
// tests; Resume starts it again.
func (c *Cluster) StopImmediate() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop(context.Background(), "immediate")
}

// Resume starts a stopped cluster again on the same port and waits until it
// accepts connections. Resuming a running cluster is a no-op.
func (c *Cluster) Resume(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return nil
	}
	return c.start(ctx)
}

// Restart stops the server with the given pg_ctl shutdown mode ("smart",
// "fast" or "immediate"; "immediate" simulates a crash for fault tests), starts
// it again on the same port and waits until it accepts connections.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if !slices.Contains([]string{"smart", "fast", "immediate"}, mode) {
		return fmt.Errorf("pgcluster: unknown shutdown mode %q", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(ctx, mode); err != nil {
		return err
	}
	return c.start(ctx)
}

// StopStale stops a postmaster that still runs from the cluster directory dir
// although the process that started it is gone (for example a test binary
// killed by a timeout), and removes its stale lock files. It does nothing when
// no server runs from dir.
func StopStale(ctx context.Context, dir string, logf func(format string, args ...any)) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		opts:    Options{Logf: logf},
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if c.binDir, err = findBinDir(ctx, logf); err != nil {
		return err
	}
	if c.runAs, err = pgproc.RunAs(); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return c.stopStale(ctx)
}

// start launches the postmaster and waits until it accepts connections.
// c.mu must be held. With an automatically chosen port, a port taken by
// someone else between choosing and binding is retried with another one.
func (c *Cluster) start(ctx context.Context) error {
	pickPort := c.port == 0
	for attempt := 1; ; attempt++ {
		if pickPort {
			port, err := pgproc.FreePort()
			if err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
			c.port = port
		}
		logStart := pgproc.FileSize(c.logPath)
		err := c.pgCtl(ctx, "start", "-w", "-t", strconv.Itoa(int(readyTimeout/time.Second)),
			"-D", c.dataDir, "-l", c.logPath, "-o", c.serverOptions())
		if err == nil {
			break
		}
		newLog := pgproc.ReadFrom(c.logPath, logStart)
		if pickPort && attempt < 5 && strings.Contains(newLog, "could not bind") {
			c.opts.Logf("pgcluster: port %d was taken, trying another", c.port)
			continue
		}
		return fmt.Errorf("pgcluster: start server: %w\nserver log:\n%s", err, pgproc.Tail(newLog, 30))
	}
	c.running = true
	c.opts.Logf("pgcluster: server running on 127.0.0.1:%d (data %s)", c.port, c.dataDir)
	return c.waitReady(ctx)
}

// stop shuts the server down with the given pg_ctl mode. c.mu must be held.
func (c *Cluster) stop(ctx context.Context, mode string) error {
	if !c.running {
		return nil
	}
	err := c.pgCtl(ctx, "stop", "-w", "-D", c.dataDir, "-m", mode)
	if err != nil && c.status(ctx) == statusStopped {
		// The server died on its own (or was stopped behind our back):
		// the goal, a stopped server, is reached anyway.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgcluster: stop server (-m %s): %w", mode, err)
	}
	c.running = false
	c.opts.Logf("pgcluster: server stopped (-m %s)", mode)
	return nil
}

// waitReady polls until a real connection succeeds. pg_ctl -w already waits
// for the postmaster to report readiness, but polling with the client used by
// the product proves the TCP listener and authentication work too.
func (c *Cluster) waitReady(ctx context.Context) error {
	if err := pgproc.WaitReady(ctx, c.URL("postgres"), readyTimeout, nil); err != nil {
		return fmt.Errorf("pgcluster: server on port %d does not accept connections: %w\nserver log:\n%s",
			c.port, err, pgproc.Tail(pgproc.ReadFrom(c.logPath, 0), 30))
	}
	return nil
}

// serverOptions returns the postgres command-line options passed through
// pg_ctl -o. They are given on every start rather than written into
// postgresql.conf so that a reused data directory always gets the settings
// of the current Options (port, durability).
func (c *Cluster) serverOptions() string {
	settings := []string{
		"listen_addresses=127.0.0.1",
		"port=" + strconv.Itoa(c.port),
		"max_connections=" + strconv.Itoa(c.opts.MaxConnections),
	}
	socket := filepath.Join(c.dir, ".s.PGSQL."+strconv.Itoa(c.port))
	if len(socket) < maxSocketPath && !strings.ContainsAny(c.dir, `"`) {
		// Double quotes make PostgreSQL read the path as one list element
		// even if it contains spaces or commas.
		settings = append(settings, `unix_socket_directories="`+c.dir+`"`)
	} else {
		// Everything connects over TCP anyway; the socket is a convenience
		// for psql -h, not worth a path the kernel rejects.
		settings = append(settings, "unix_socket_directories=")
	}
	if !c.opts.Durable {
		settings = append(settings, "fsync=off", "synchronous_commit=off", "full_page_writes=off")
	}
	settings = append(settings, c.opts.Settings...)
	// pg_ctl hands this string to /bin/sh, hence the shell quoting.
	var b strings.Builder
	for i, s := range settings {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("-c ")
		b.WriteString(shellQuote(s))
	}
	return b.String()
}

// prepareDir creates the cluster directory and, when running as root, makes
// it usable by the postgres user: the directory and everything in it are
// handed to postgres, and ancestors that others cannot traverse (such as the
// 0700 directories os.MkdirTemp makes) get the search bit so that postgres
// can reach the directory at all.
func (c *Cluster) prepareDir() error {
	if err := pgproc.MkdirAll(c.dir); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	// A data directory without PG_VERSION is what an initdb killed midway
	// leaves behind; initdb refuses a non-empty directory, so start over.
	if _, err := os.Stat(c.dataDir); err == nil {
		if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
			c.opts.Logf("pgcluster: removing incomplete data directory %s", c.dataDir)
			if err := os.RemoveAll(c.dataDir); err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
		}
	}
	if c.runAs == nil {
		return nil
	}
	for d := filepath.Dir(c.dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			c.opts.Logf("pgcluster: adding o+x to %s so that user postgres can reach %s", d, c.dir)
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
		}
	}
	if err := c.runAs.Chown(c.dir); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// initdb creates the data directory unless it already exists, from the
// initdb cache when one is configured.
func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		c.opts.Logf("pgcluster: reusing data directory %s", c.dataDir)
		return nil
	}
	if c.opts.InitdbCache != "" {
		err := c.copyFromCache(ctx)
		if err == nil {
			return nil
		}
		c.opts.Logf("pgcluster: initdb cache not used: %v", err)
		if err := os.RemoveAll(c.dataDir); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	c.opts.Logf("pgcluster: initdb %s", c.dataDir)
	return c.runInitdb(ctx, c.dataDir)
}

// runInitdb runs initdb into dataDir. Trust authentication and a fixed
// superuser name keep connection URLs simple; the C locale makes initdb
// independent of the machine's locale settings (an unset or uninstalled
// locale would make it fail) and sorting deterministic.
func (c *Cluster) runInitdb(ctx context.Context, dataDir string) error {
	out, err := c.run(ctx, "initdb", "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8",
		"--locale=C", "-D", dataDir)
	if err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	return nil
}

// copyFromCache copies the cached pristine data directory for this
// PostgreSQL version into c.dataDir, creating the cache entry first if
// needed. Entries are created under a temporary name and renamed into place,
// so concurrent test binaries never see a half-written one.
func (c *Cluster) copyFromCache(ctx context.Context) error {
	cache, err := filepath.Abs(c.opts.InitdbCache)
	if err != nil {
		return err
	}
	if err := pgproc.MkdirAll(cache); err != nil {
		return err
	}
	// Only trust a cache this user owns: a shared temporary directory could
	// otherwise hand us someone else's data directory.
	if fi, err := os.Stat(cache); err != nil {
		return err
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by us", cache, st.Uid)
	}
	version, err := exec.CommandContext(ctx, filepath.Join(c.binDir, "pg_ctl"), "--version").Output()
	if err != nil {
		return fmt.Errorf("pg_ctl --version: %w", err)
	}
	// The key names the exact server build: a data directory only fits the
	// major version that created it.
	key := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' {
			return r
		}
		return '_'
	}, strings.TrimSpace(string(version))+"_"+c.binDir)
	pristine := filepath.Join(cache, key)

	if _, err := os.Stat(filepath.Join(pristine, "PG_VERSION")); err != nil {
		c.opts.Logf("pgcluster: initdb into cache %s", pristine)
		tmp, err := os.MkdirTemp(cache, "tmp-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if c.runAs != nil {
			if err := os.Chown(tmp, c.runAs.UID, c.runAs.GID); err != nil {
				return err
			}
		}
		if err := c.runInitdb(ctx, filepath.Join(tmp, "data")); err != nil {
			return err
		}
		// Losing the race to another process is fine: its entry is as good.
		if err := os.Rename(filepath.Join(tmp, "data"), pristine); err != nil {
			if _, statErr := os.Stat(filepath.Join(pristine, "PG_VERSION")); statErr != nil {
				return err
			}
		}
	}
	c.opts.Logf("pgcluster: copying cached data directory into %s", c.dataDir)
	return copyTree(pristine, c.dataDir, c.runAs)
}

// copyTree copies directory src to dst (which must not exist), keeping
// permissions, and hands everything to owner when it is not nil.
func copyTree(src, dst string, owner *pgproc.Account) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected file type: %s", path)
		}
		// Mkdir and OpenFile apply the umask; PostgreSQL insists on the
		// exact modes initdb chose (0700 for the data directory).
		if info.Mode()&fs.ModeSymlink == 0 {
			if err := os.Chmod(target, info.Mode().Perm()); err != nil {
				return err
			}
		}
		if owner != nil {
			return os.Lchown(target, owner.UID, owner.GID)
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Values of pg_ctl status's exit code.
const (
	statusRunning = 0
	statusStopped = 3
	statusUnknown = -1
)

// status runs pg_ctl status and returns its exit code.
func (c *Cluster) status(ctx context.Context) int {
	_, err := c.run(ctx, "pg_ctl", "status", "-D", c.dataDir)
	if err == nil {
		return statusRunning
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == statusStopped {
		return statusStopped
	}
	return statusUnknown
}

// stopStale deals with a postmaster.pid left in the data directory. If its
// postmaster still runs (the process that started it was killed, but the
// server is detached from it), it is stopped. If it is dead, the lock files
// are removed: the PID in them may by now belong to an unrelated process,
// which would make the new postmaster refuse to start.
func (c *Cluster) stopStale(ctx context.Context) error {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	data, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if pid > 0 && isPostgres(pid) {
		c.opts.Logf("pgcluster: stopping server (pid %d) left running in %s", pid, c.dataDir)
		if _, err := c.run(ctx, "pg_ctl", "stop", "-w", "-D", c.dataDir, "-m", "fast"); err != nil {
			if out, err := c.run(ctx, "pg_ctl", "stop", "-w", "-D", c.dataDir, "-m", "immediate"); err != nil {
				return fmt.Errorf("pgcluster: stop server left running in %s: %w\n%s", c.dataDir, err, out)
			}
		}
		return nil
	}
	c.opts.Logf("pgcluster: removing stale postmaster.pid (pid %d is gone)", pid)
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgcluster: %w", err)
	}
	// The socket directory is private to this cluster, so every socket and
	// socket lock in it belonged to the dead postmaster.
	sockets, _ := filepath.Glob(filepath.Join(c.dir, ".s.PGSQL.*"))
	for _, s := range sockets {
		_ = os.Remove(s)
	}
	return nil
}

// isPostgres reports whether process pid is alive and is a PostgreSQL
// process. Checking the command line, not just liveness, keeps a recycled PID
// from making us signal an unrelated process.
func isPostgres(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		// Without /proc, trust liveness: pg_ctl stop will report a
		// mismatch if it is not our server.
		return !errors.Is(err, fs.ErrNotExist)
	}
	return bytes.Contains(cmdline, []byte("postgres")) || bytes.Contains(cmdline, []byte("postmaster"))
}

// pgCtl runs pg_ctl and folds its output into the error.
func (c *Cluster) pgCtl(ctx context.Context, args ...string) error {
	out, err := c.run(ctx, "pg_ctl", args...)
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// run runs a PostgreSQL program from the bin directory, as user postgres
// when this process is root, and returns its combined output.
func (c *Cluster) run(ctx context.Context, program string, args ...string) ([]byte, error) {
	path := filepath.Join(c.binDir, program)
	var cmd *exec.Cmd
	if c.runAs != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.runAs.Name, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// Run from the cluster directory: the caller's working directory may
	// not be accessible to user postgres, which initdb and pg_ctl dislike.
	cmd.Dir = c.dir
	// pg_ctl start redirects the postmaster's output to the log file, but
	// should a child keep our pipe open, do not wait for it forever.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// findBinDir locates the directory holding initdb, pg_ctl and postgres:
// $PG_BIN_DIR, else the directory of pg_ctl on PATH, else the newest
// /usr/lib/postgresql/<version>/bin. When none is found and this process is
// root, PostgreSQL is installed with apt-get first.
func findBinDir(ctx context.Context, logf func(string, ...any)) (string, error) {
	if dir := os.Getenv("PG_BIN_DIR"); dir != "" {
		if !isExecutable(filepath.Join(dir, "pg_ctl")) {
			return "", fmt.Errorf("pgcluster: PG_BIN_DIR=%s holds no pg_ctl", dir)
		}
		return dir, nil
	}
	if dir, ok := searchBinDir(); ok {
		return dir, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("pgcluster: PostgreSQL not found (set PG_BIN_DIR, put pg_ctl on PATH, or install the postgresql package)")
	}
	if err := installPostgres(ctx, logf); err != nil {
		return "", err
	}
	if dir, ok := searchBinDir(); ok {
		return dir, nil
	}
	return "", errors.New("pgcluster: PostgreSQL still not found after installing it")
}

// searchBinDir looks on PATH and in the Debian install location.
func searchBinDir() (string, bool) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// Debian links /usr/local/bin/pg_ctl and friends to the real
		// directory; resolve the link so that the sibling programs
		// (initdb, postgres) are found next to it.
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved
		}
		dir := filepath.Dir(p)
		if isExecutable(filepath.Join(dir, "initdb")) {
			return dir, true
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestVersion := "", -1.0
	for _, dir := range dirs {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil || !isExecutable(filepath.Join(dir, "pg_ctl")) {
			continue
		}
		if v > bestVersion {
			best, bestVersion = dir, v
		}
	}
	return best, best != ""
}

// installPostgres installs Debian's postgresql package. Only for root, on
// fresh machines: the project's own scripts cannot assume it is present.
func installPostgres(ctx context.Context, logf func(string, ...any)) error {
	logf("pgcluster: PostgreSQL not found; installing it with apt-get")
	for _, args := range [][]string{
		{"update"},
		{"install", "-y", "--no-install-recommends", "postgresql"},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("pgcluster: apt-get %s: %w\n%s", args[0], err, pgproc.Tail(out.String(), 30))
		}
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
