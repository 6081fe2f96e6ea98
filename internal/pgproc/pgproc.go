// Package pgproc is what the private PostgreSQL processes of development
// and tests (internal/pgcluster's server, internal/pgbouncer's bouncer)
// share: running as user postgres when this process is root, a free
// loopback port, a superuser URL on it, the wait until it accepts
// connections, and the part of a log to quote in an error.
package pgproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Account is a system user that PostgreSQL programs run as.
type Account struct {
	Name     string
	UID, GID int
}

// RunAs is the account PostgreSQL programs must run as: user postgres
// when this process is root (they refuse to run as root), nil otherwise.
func RunAs() (*Account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	return LookupAccount("postgres")
}

// LookupAccount resolves a user name to its IDs.
func LookupAccount(name string) (*Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root requires the %q user (the postgresql package creates it): %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	return &Account{Name: name, UID: uid, GID: gid}, nil
}

// Credential is the account for exec.Cmd's SysProcAttr.
func (a *Account) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(a.UID), Gid: uint32(a.GID)}
}

// Chown hands dir and everything in it to a, leaving alone what a owns
// already.
func (a *Account) Chown(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == a.UID && int(st.Gid) == a.GID {
			return nil
		}
		return os.Lchown(path, a.UID, a.GID)
	})
}

// MkdirAll creates dir and its missing parents with mode 0755: the process
// umask or a 0700 default would keep user postgres out when we are root.
func MkdirAll(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := MkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// FreePort asks the kernel for a free TCP port on loopback. The port is
// released before the caller's process binds it, so another process may
// grab it in between: callers retry with a new port when that happens.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL is a connection URL for database on 127.0.0.1:port, as the
// superuser postgres, whom the private processes trust without a password.
func URL(port int, database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// ErrExited is WaitReady's answer when the process exited before it
// accepted a connection.
var ErrExited = errors.New("exited before accepting connections")

// WaitReady polls until a connection to connURL runs a query, for at most
// timeout (on top of ctx's own deadline), or until exited is closed (nil:
// never). It returns the last connection error when it gives up.
func WaitReady(ctx context.Context, connURL string, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(connURL)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = 2 * time.Second
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			// The simple protocol: through a bouncer in transaction mode a
			// prepared statement would outlive its server connection.
			_, err = conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
			if err = errors.Join(err, conn.Close(ctx)); err == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FileSize is the size of path, 0 when it cannot be read: where a log
// stands before a start attempt, for ReadFrom.
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ReadFrom is the log at path from offset on (at most 1 MiB): the part one
// start attempt wrote, for an error.
func ReadFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
