// Package pgbouncer runs a private PgBouncer in front of a PostgreSQL
// server, for tests: transaction pooling by default, trust authentication,
// listening on 127.0.0.1 only, every database of the server reachable under
// its own name.
//
// PgBouncer refuses to run as root; when the calling process is root, it is
// run as the "postgres" user (the account PostgreSQL's packages create), as
// internal/pgcluster runs PostgreSQL.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/worker-gateway/gateway/internal/pgproc"
)

// Options configures Start.
type Options struct {
	// Dir holds the configuration, the log and the pid file; it is created
	// if missing. Every directory above it must be reachable by user
	// postgres when running as root (os.MkdirTemp("", …) is).
	Dir string
	// ServerHost and ServerPort are PostgreSQL's address.
	ServerHost string
	ServerPort int
	// PoolMode is "session", "transaction" (the default) or "statement".
	PoolMode string
	// PoolSize is the number of server connections per database and user;
	// 0 means 20.
	PoolSize int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit of cmd, once done is closed

	stopOnce sync.Once
}

// readyTimeout bounds the wait for PgBouncer to accept connections.
const readyTimeout = 15 * time.Second

// Binary is the pgbouncer executable: on PATH, else where Debian puts it
// (/usr/sbin, which a non-root PATH often lacks). "" when not installed.
func Binary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/sbin/pgbouncer"); err == nil && !fi.IsDir() {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// Start writes the configuration, starts PgBouncer and returns once it
// accepts connections.
func Start(ctx context.Context, opts Options) (*Bouncer, error) {
	bin := Binary()
	if bin == "" {
		return nil, errors.New("pgbouncer: not installed (Debian package pgbouncer)")
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = 20
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	if err := pgproc.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	runAs, err := pgproc.RunAs()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	var lastErr error
	for range 5 { // a port taken between choosing and binding is retried
		port, err := pgproc.FreePort()
		if err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
		b, err := start(ctx, bin, dir, port, opts, runAs)
		if err == nil {
			return b, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin, dir string, port int, opts Options, runAs *pgproc.Account) (*Bouncer, error) {
	// With trust authentication PgBouncer checks no password but still
	// wants to know the user.
	files := map[string]string{
		"userlist.txt":  `"postgres" ""` + "\n",
		"pgbouncer.ini": config(dir, port, opts),
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	var cred *syscall.Credential
	if runAs != nil {
		if err := runAs.Chown(dir); err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
		cred = runAs.Credential()
	}
	logPath := filepath.Join(dir, "pgbouncer.log")
	logStart := pgproc.FileSize(logPath)
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	// Killed with the test binary, whatever way it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	b := &Bouncer{dir: dir, port: port, cmd: cmd, done: make(chan struct{})}
	go func() {
		b.err = cmd.Wait()
		close(b.done)
	}()
	if err := pgproc.WaitReady(ctx, b.URL("postgres"), readyTimeout, b.done); err != nil {
		if errors.Is(err, pgproc.ErrExited) {
			err = fmt.Errorf("exited: %w", b.err)
		} else {
			err = fmt.Errorf("does not accept connections on port %d: %w", b.port, err)
		}
		_ = b.Stop()
		return nil, fmt.Errorf("pgbouncer: %w\nlog:\n%s", err, pgproc.Tail(pgproc.ReadFrom(logPath, logStart), 30))
	}
	return b, nil
}

// config is pgbouncer.ini. server_reset_query is left at its default,
// which transaction pooling does not run: whatever a client leaves on a
// server connection, the next client gets, as in production.
func config(dir string, port int, opts Options) string {
	return fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 2000
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, opts.ServerHost, opts.ServerPort, port, filepath.Join(dir, "userlist.txt"), opts.PoolMode, opts.PoolSize,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
}

// URL is a connection URL for database through PgBouncer, as postgres.
func (b *Bouncer) URL(database string) string { return pgproc.URL(b.port, database) }

// Route rewrites a URL of the server behind PgBouncer into the same
// database through PgBouncer.
func (b *Bouncer) Route(serverURL string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("pgbouncer: %w", err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return u.String(), nil
}

// Port is PgBouncer's port on 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// LogPath is PgBouncer's log file.
func (b *Bouncer) LogPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

// Stop shuts PgBouncer down (SIGTERM: at once, closing every connection)
// and waits for it to exit.
func (b *Bouncer) Stop() error {
	b.stopOnce.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	return nil
}
