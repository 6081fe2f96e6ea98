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
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for range 5 { // a port taken between choosing and binding is retried
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		b, err := start(ctx, bin, dir, port, opts, cred)
		if err == nil {
			return b, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin, dir string, port int, opts Options, cred *syscall.Credential) (*Bouncer, error) {
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
	if cred != nil {
		if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(dir, "pgbouncer.log")
	logStart := fileSize(logPath)
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
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, fmt.Errorf("pgbouncer: %w\nlog:\n%s", err, readFrom(logPath, logStart))
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

// waitReady polls until a connection through PgBouncer runs a query.
func (b *Bouncer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		select {
		case <-b.done:
			return fmt.Errorf("exited: %w", b.err)
		default:
		}
		conn, err := pgx.Connect(ctx, b.URL("postgres"))
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("does not accept connections on port %d: %w", b.port, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is a connection URL for database through PgBouncer, as postgres.
func (b *Bouncer) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

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

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: running as root requires the postgres user: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgbouncer: user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom is the end of a log from offset on, for an error.
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	s := string(b[offset:])
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return strings.TrimSpace(s)
}
