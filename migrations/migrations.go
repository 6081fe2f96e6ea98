// Package migrations holds the gateway's schema migrations, embedded in the
// binary, and applies them with golang-migrate. A schema change is split in
// two so that replicas of two releases serve side by side on one schema:
//
//   - Expand migrations, the numbered files here (NNNNNN_name.up.sql, table
//     schema_migrations), applied by `gateway migrate up` before any replica
//     of the new release starts. They only add: tables, nullable or
//     defaulted columns, indexes built CONCURRENTLY on the hot tables,
//     functions beside the old ones, relaxed constraints (DROP NOT NULL).
//     Data is written in shapes both releases read. lint_test.go refuses a
//     file from 000025 on that drops, renames, changes a type, adds a NOT
//     NULL column without a default or builds a plain index on a hot table.
//   - Contract migrations, in contract/ (table schema_contract_migrations),
//     applied only by `gateway migrate up --contract`, after every replica
//     runs the new release. They drop and rename what no supported release
//     still reads. A contract file is numbered by the expand version it
//     requires (the release's newest numbered migration) and its first line
//     states it: `-- requires: expand 24`. The step refuses to run before
//     the binary's own expand migrations are applied. A release without a
//     contract file leaves the contract version where it was: it removed
//     nothing an older release reads.
//
// Functions are neither: each has one current definition in
// functions/*.sql, which Up applies after the expand migrations when the
// database is at this release's expand version (functions.go says why and
// how a body changes).
//
// The readiness window. A release knows Latest(), the expand version it was
// built with. On a database at expand version e, contracted up to c, a
// replica is ready when
//
//	Latest() <= e   (its own expand migrations have run), and
//	c <= Latest()   (no contract step has removed what it reads).
//
// (e counts as e-1 while golang-migrate marks e dirty, which it does for
// the whole run of e's file: the schema is still the one before it.)
// So release N's replicas stay ready on N+1's expanded schema until N+1's
// contract step runs, and N+1's replicas are ready on that same schema —
// N's tables and columns still in place — from the moment its expand
// migrations ran. Releases are upgraded one at a time: N+1's contract step
// runs before N+2's expand migrations.
//
// Locks. Every transactional file runs after `SET lock_timeout` (5s): a
// statement that waits longer for a lock on a hot table fails, the file's
// transaction rolls back, and the step is retried (a bounded number of
// times) rather than stalling every lease behind its queued ACCESS
// EXCLUSIVE request. A file whose first line is `-- migrate: no-transaction`
// holds exactly one statement, sent alone so that PostgreSQL runs it outside
// a transaction block: a CREATE INDEX CONCURRENTLY (IF NOT EXISTS). Such a
// file is not retried; when it fails it leaves the version dirty and
// possibly an INVALID index, which the operator drops (DROP INDEX
// CONCURRENTLY) before `gateway migrate force` and a new run. Backfills
// belong in Go code run in resumable batches outside the migration, not in
// a migration's transaction: a sweep by predicate over a small table (as
// store.SealWebhookSecrets), or RunBackfill (backfill.go), which walks a
// large table by key and records its progress in schema_backfills, so that
// a run stopped half-way resumes where it stopped. A transactional file may
// refuse to run (RAISE EXCEPTION, saying what to do first): its
// transaction rolls back, its version is set back, and the step can be run
// again once that is done.
package migrations

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
)

// The expand migrations (this directory) and the contract migrations
// (contract/).
var (
	//go:embed *.sql
	files embed.FS
	//go:embed contract
	contractFiles embed.FS
)

// ContractTable is the version table of the contract migrations.
const ContractTable = "schema_contract_migrations"

// Options tune how migrations are applied; the zero value is the default.
type Options struct {
	// LockTimeout bounds every lock wait of a transactional file (5s).
	LockTimeout time.Duration
	// Attempts bounds the tries of a file that timed out waiting for a lock (10).
	Attempts int
	// OnLockTimeout, when set, is called after a file's attempt timed out
	// waiting for a lock, before it is tried again.
	OnLockTimeout func(version uint, attempt int)
}

func (o Options) withDefaults() Options {
	if o.LockTimeout <= 0 {
		o.LockTimeout = 5 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 10
	}
	return o
}

// Up applies every expand migration not yet applied. golang-migrate holds
// an advisory lock, so replicas starting together migrate once.
func Up(ctx context.Context, databaseURL string) error {
	return UpWith(ctx, databaseURL, Options{})
}

// UpWith is Up with options. After the numbered migrations it applies the
// current definitions of the database's functions (functions.go).
func UpWith(ctx context.Context, databaseURL string, opts Options) error {
	if err := upFS(ctx, databaseURL, files, ".", "", opts); err != nil {
		return err
	}
	return applyFunctions(ctx, databaseURL, opts)
}

// UpFS is UpWith with the expand migrations of fsys/dir in place of the
// embedded ones (a test's).
func UpFS(ctx context.Context, databaseURL string, fsys fs.FS, dir string, opts Options) error {
	return upFS(ctx, databaseURL, fsys, dir, "", opts)
}

// UpTo applies the migrations up to and including version, so a test can
// put data in the schema as it was before a migration and then move it
// across. It leaves the functions as those migrations defined them.
func UpTo(ctx context.Context, databaseURL string, version uint) error {
	return run(ctx, databaseURL, "", files, ".", Options{}.withDefaults(),
		fmt.Sprintf("migrate to %d", version), func(m *migrate.Migrate) error { return m.Migrate(version) })
}

// upFS applies the migrations of fsys/dir, retrying a file that timed out
// waiting for a lock. The file's transaction rolled back, so its version,
// which golang-migrate left dirty, is set back before the next try.
func upFS(ctx context.Context, databaseURL string, fsys fs.FS, dir, table string, opts Options) error {
	opts = opts.withDefaults()
	latest, err := latestOf(fsys, dir)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := run(ctx, databaseURL, table, fsys, dir, opts, "migrate up", func(m *migrate.Migrate) error { return stepUp(ctx, m, latest) })
		refused := refusedByFile(err)
		if !lockTimedOut(err) && !refused {
			return err
		}
		version, rollbackErr := forceBack(databaseURL, table, fsys, dir)
		if rollbackErr != nil {
			return fmt.Errorf("%w; then: %w", err, rollbackErr)
		}
		if refused {
			return err // changed nothing: run it again once what it names is done
		}
		if attempt >= opts.Attempts || ctx.Err() != nil {
			return fmt.Errorf("%w (gave up on migration %d after %d attempts, each waiting at most lock_timeout %s for its locks; run it again when the tables are quieter)",
				err, version, attempt, opts.LockTimeout)
		}
		if opts.OnLockTimeout != nil {
			opts.OnLockTimeout(version, attempt)
		}
	}
}

// stepUp applies the migrations one at a time up to latest. One at a time:
// golang-migrate's m.Up reads the next files ahead, and when one fails the
// goroutines buffering the others are never read and stay. A schema
// already past latest (the next release's expand migrations) is left as
// it is: whether this release serves on it is the readiness rule's call.
func stepUp(ctx context.Context, m *migrate.Migrate, latest uint) error {
	for ctx.Err() == nil {
		version, dirty, err := m.Version()
		switch {
		case errors.Is(err, migrate.ErrNilVersion):
		case err != nil:
			return err
		case dirty:
			return migrate.ErrDirty{Version: int(version)} //nolint:gosec // migration versions are small
		case version >= latest:
			return migrate.ErrNoChange
		}
		if err := m.Steps(1); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// lockTimedOut: err is a statement's lock_timeout (SQLSTATE 55P03).
func lockTimedOut(err error) bool {
	var dbErr database.Error
	return errors.As(err, &dbErr) && isLockTimeout(dbErr.OrigErr)
}

// refusedByFile: err is a migration file's own refusal (RAISE EXCEPTION,
// SQLSTATE P0001: a precondition it checks, as contract/000030 does), whose
// transaction rolled back.
func refusedByFile(err error) bool {
	var dbErr database.Error
	var pgErr *pgconn.PgError
	return errors.As(err, &dbErr) && errors.As(dbErr.OrigErr, &pgErr) && pgErr.Code == "P0001"
}

// forceBack sets the version table back from the dirty version whose
// transactional file rolled back to the migration before it, clean, and
// returns the dirty version.
func forceBack(databaseURL, table string, fsys fs.FS, dir string) (uint, error) {
	m, err := open(databaseURL, table, fsys, dir, Options{}.withDefaults())
	if err != nil {
		return 0, err
	}
	defer closeMigrate(m)
	version, dirty, err := m.Version()
	if err != nil || !dirty {
		return version, fmt.Errorf("after a lock timeout the schema is at %d (dirty=%t): %w", version, dirty, err)
	}
	if noTx, err := isNoTransaction(fsys, dir, version); err != nil || noTx {
		return version, fmt.Errorf("migration %d runs outside a transaction and stays dirty: %w", version, err)
	}
	src, err := iofs.New(fsys, dir)
	if err != nil {
		return version, err
	}
	defer src.Close()
	prev, err := src.Prev(version)
	if err != nil {
		return version, m.Force(-1) //nolint:nilerr // the first migration: back to no version
	}
	return version, m.Force(int(prev)) //nolint:gosec // migration versions are small
}

func isNoTransaction(fsys fs.FS, dir string, version uint) (bool, error) {
	src, err := iofs.New(fsys, dir)
	if err != nil {
		return false, err
	}
	defer src.Close()
	r, _, err := src.ReadUp(version)
	if err != nil {
		return false, err
	}
	defer r.Close()
	body, err := io.ReadAll(r)
	return firstLine(body) == noTransaction, err
}

// run applies migrations with step, stopping gracefully (between
// migrations) when ctx ends; having nothing to do is not an error.
func run(ctx context.Context, databaseURL, table string, fsys fs.FS, dir string, opts Options, what string, step func(*migrate.Migrate) error) error {
	m, err := open(databaseURL, table, fsys, dir, opts)
	if err != nil {
		return err
	}
	defer closeMigrate(m)
	done := make(chan error, 1)
	go func() { done <- step(m) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		m.GracefulStop <- true
		err = <-done
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// UpContract applies this release's contract migrations: run only after
// every replica runs this release (the operator's word), and refused unless
// this release's expand migrations are applied.
func UpContract(ctx context.Context, databaseURL string) error {
	return UpContractFS(ctx, databaseURL, contractFiles, "contract", Options{})
}

// UpAll applies the expand migrations and then the contract ones: the
// schema of a system that runs this release alone (a fresh `make run`, a
// test's template database, a benchmark), where no older replica serves.
func UpAll(ctx context.Context, databaseURL string) error {
	if err := Up(ctx, databaseURL); err != nil {
		return err
	}
	return UpContract(ctx, databaseURL)
}

// UpContractFS is UpContract with the contract migrations of
// contractFS/contractDir in place of the embedded ones (a test's).
func UpContractFS(ctx context.Context, databaseURL string, contractFS fs.FS, contractDir string, opts Options) error {
	latest, err := Latest()
	if err != nil {
		return err
	}
	expand, dirty, err := Version(databaseURL)
	if err != nil {
		return err
	}
	if dirty || expand < latest {
		return fmt.Errorf("contract step refused: it needs this release's expand migrations (version %d) applied, the database is at %d (dirty=%t); run `gateway migrate up` first", latest, expand, dirty)
	}
	contracts, err := ContractRequirements(contractFS, contractDir)
	if err != nil {
		return err
	}
	if len(contracts) == 0 {
		return nil // this release removes nothing
	}
	for version, requires := range contracts {
		if requires > expand {
			return fmt.Errorf("contract migration %d requires expand version %d, the database is at %d", version, requires, expand)
		}
	}
	return upFS(ctx, databaseURL, contractFS, contractDir, ContractTable, opts)
}

// requiresPrefix starts a contract migration's first line.
const requiresPrefix = "-- requires: expand "

// ContractRequirements maps each contract migration in fsys/dir to the
// expand version its first line says it requires, which must be its own
// version.
func ContractRequirements(fsys fs.FS, dir string) (map[uint]uint, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	out := map[uint]uint{}
	for _, e := range entries {
		m, err := source.DefaultParse(e.Name())
		if err != nil || e.IsDir() {
			continue
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		line := firstLine(body)
		n, err := strconv.ParseUint(strings.TrimPrefix(line, requiresPrefix), 10, 64)
		if !strings.HasPrefix(line, requiresPrefix) || err != nil || uint(n) != m.Version {
			return nil, fmt.Errorf("contract migration %s: its first line must be \"%s%d\" (the expand version it requires, its own number)", e.Name(), requiresPrefix, m.Version)
		}
		out[m.Version] = uint(n)
	}
	return out, nil
}

// Previous is the version of the embedded migration just before version.
func Previous(version uint) (uint, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	return src.Prev(version)
}

// Version reports the applied expand version and whether a failed
// migration left the schema dirty. Version 0 means no migration has run.
func Version(databaseURL string) (version uint, dirty bool, err error) {
	return versionOf(databaseURL, "", files, ".")
}

// ContractVersion reports the expand version the schema is contracted up
// to (0: never contracted).
func ContractVersion(databaseURL string) (version uint, dirty bool, err error) {
	return versionOf(databaseURL, ContractTable, contractFiles, "contract")
}

func versionOf(databaseURL, table string, fsys fs.FS, dir string) (uint, bool, error) {
	m, err := open(databaseURL, table, fsys, dir, Options{}.withDefaults())
	if err != nil {
		return 0, false, err
	}
	defer closeMigrate(m)
	version, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

// Latest is the highest expand migration version embedded in this binary:
// the schema this release was built with, which /readyz compares with the
// database's.
func Latest() (uint, error) {
	return latestOf(files, ".")
}

func latestOf(fsys fs.FS, dir string) (uint, error) {
	src, err := iofs.New(fsys, dir)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v, nil //nolint:nilerr // io.EOF-like end of the list
		}
		v = next
	}
}

// Servable is the readiness rule (see the package documentation): a
// release built with expand version latest serves on a database at expand
// version expand (dirty: its file is being applied, or failed),
// contracted up to contracted.
func Servable(latest, expand uint, dirty bool, contracted uint) (ok bool, reason string) {
	if dirty && expand > 0 {
		expand--
	}
	switch {
	case expand < latest:
		return false, "behind"
	case contracted > latest:
		return false, "contracted"
	}
	return true, "ok"
}

func open(databaseURL, table string, fsys fs.FS, dir string, opts Options) (*migrate.Migrate, error) {
	src, err := iofs.New(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	wrapped := &lockTimeoutSource{Driver: src, setting: fmt.Sprintf("SET lock_timeout = %d;\n", opts.LockTimeout.Milliseconds())}
	m, err := migrate.NewWithSourceInstance("iofs", wrapped, migrateURL(databaseURL, table))
	if err != nil {
		return nil, fmt.Errorf("open migration target: %w", err)
	}
	return m, nil
}

// noTransaction marks a file of one statement run outside a transaction.
const noTransaction = "-- migrate: no-transaction"

// lockTimeoutSource wraps each transactional file in SET lock_timeout …
// RESET lock_timeout.
type lockTimeoutSource struct {
	source.Driver
	setting string
}

func (s *lockTimeoutSource) ReadUp(version uint) (io.ReadCloser, string, error) {
	r, identifier, err := s.Driver.ReadUp(version)
	if err != nil {
		return r, identifier, err
	}
	defer r.Close()
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, "", err
	}
	if firstLine(body) != noTransaction {
		// Reset after the file: the next step's wait for golang-migrate's
		// advisory lock (another replica migrating) is not bounded by it.
		// The empty statement ends a last statement left without ";".
		body = slices.Concat([]byte(s.setting), body, []byte("\n;\nRESET lock_timeout;\n"))
	}
	return io.NopCloser(bytes.NewReader(body)), identifier, nil
}

func firstLine(body []byte) string {
	line, _, _ := bufio.NewReader(bytes.NewReader(body)).ReadLine()
	return strings.TrimSpace(string(line))
}

func closeMigrate(m *migrate.Migrate) {
	_, _ = m.Close()
}

// migrateURL rewrites a postgres:// URL to the scheme golang-migrate's pgx
// v5 driver registers, naming the version table when not the default.
func migrateURL(databaseURL, table string) string {
	u := databaseURL
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if strings.HasPrefix(u, prefix) {
			u = "pgx5://" + strings.TrimPrefix(u, prefix)
			break
		}
	}
	if table != "" {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + "x-migrations-table=" + table
	}
	return u
}
