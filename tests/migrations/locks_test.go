package migrations_test

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store/storetest"
)

// workerLabelsMigration alters worker_tasks: it needs ACCESS EXCLUSIVE on
// the hot table.
const workerLabelsMigration = 19

// holdTasksLock opens a transaction that reads worker_tasks, as a long
// lease transaction or report would, and holds its lock until release.
func holdTasksLock(t *testing.T, url string) (release func()) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE worker_tasks IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Commit(context.Background())) }
}

// TestMigrationTimesOutOnAHeldLockAndRetries: a migration that needs
// ACCESS EXCLUSIVE on worker_tasks while a transaction holds a lock on it
// gives up after lock_timeout (rather than queue every lease behind it),
// its file rolls back, and it is tried again; once the lock is released
// it applies, and the schema ends current and clean.
func TestMigrationTimesOutOnAHeldLockAndRetries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	before, err := migrations.Previous(workerLabelsMigration)
	require.NoError(t, err)
	require.NoError(t, migrations.UpTo(ctx, url, before))
	release := holdTasksLock(t, url)

	type timeout struct {
		version uint
		attempt int
	}
	var timeouts []timeout
	err = migrations.UpWith(ctx, url, migrations.Options{LockTimeout: 100 * time.Millisecond, Attempts: 5,
		OnLockTimeout: func(version uint, attempt int) {
			timeouts = append(timeouts, timeout{version, attempt})
			// Between the tries the schema is back before the migration, clean.
			v, dirty, err := migrations.Version(url)
			require.NoError(t, err)
			require.Equal(t, before, v)
			require.False(t, dirty)
			if attempt == 1 {
				release()
			}
		}})
	require.NoError(t, err)
	require.Equal(t, []timeout{{workerLabelsMigration, 1}}, timeouts)

	latest, err := migrations.Latest()
	require.NoError(t, err)
	v, dirty, err := migrations.Version(url)
	require.NoError(t, err)
	require.Equal(t, latest, v)
	require.False(t, dirty)
}

// TestMigrationLockRetriesAreBounded: a lock that is never released makes
// the step fail after its attempts, saying why, and leaves the schema
// before the migration and clean, to be run again.
func TestMigrationLockRetriesAreBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	before, err := migrations.Previous(workerLabelsMigration)
	require.NoError(t, err)
	require.NoError(t, migrations.UpTo(ctx, url, before))
	holdTasksLock(t, url)

	tries := 0
	err = migrations.UpWith(ctx, url, migrations.Options{LockTimeout: 50 * time.Millisecond, Attempts: 3,
		OnLockTimeout: func(uint, int) { tries++ }})
	require.ErrorContains(t, err, "lock timeout")
	require.Equal(t, 2, tries, "retried after the first two timeouts, given up after the third")
	v, dirty, err := migrations.Version(url)
	require.NoError(t, err)
	require.Equal(t, before, v)
	require.False(t, dirty)
}

// TestContractStep: the contract step is refused until this release's
// expand migrations are applied; a contract migration states the expand
// version it requires, and the step records how far the schema is
// contracted.
func TestContractStep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	latest, err := migrations.Latest()
	require.NoError(t, err)
	prev, err := migrations.Previous(latest)
	require.NoError(t, err)
	require.NoError(t, migrations.UpTo(ctx, url, prev))

	contract := fstest.MapFS{
		"c/000001_drop_old.up.sql": {Data: []byte("-- requires: expand 1\nCREATE TABLE contract_probe_one (id int);\n")},
	}
	require.ErrorContains(t, migrations.UpContractFS(ctx, url, contract, "c", migrations.Options{}), "run `gateway migrate up` first")

	require.NoError(t, migrations.Up(ctx, url))
	require.NoError(t, migrations.UpContractFS(ctx, url, contract, "c", migrations.Options{}))
	c, dirty, err := migrations.ContractVersion(url)
	require.NoError(t, err)
	require.Equal(t, uint(1), c)
	require.False(t, dirty)
	// Again: nothing to do.
	require.NoError(t, migrations.UpContractFS(ctx, url, contract, "c", migrations.Options{}))

	bad := fstest.MapFS{"c/000002_x.up.sql": {Data: []byte("DROP TABLE contract_probe_one;\n")}}
	require.ErrorContains(t, migrations.UpContractFS(ctx, url, bad, "c", migrations.Options{}), "-- requires: expand 2")
	ahead := fstest.MapFS{"c/999999_x.up.sql": {Data: []byte("-- requires: expand 999999\nDROP TABLE contract_probe_one;\n")}}
	require.ErrorContains(t, migrations.UpContractFS(ctx, url, ahead, "c", migrations.Options{}), "requires expand version 999999")

	// The binary's own contract migrations, on a database of their own:
	// applied, and the schema is contracted up to the newest of them.
	own := storetest.NewEmptyDatabase(t)
	require.ErrorContains(t, migrations.UpContract(ctx, own), "run `gateway migrate up` first")
	require.NoError(t, migrations.Up(ctx, own))
	require.NoError(t, migrations.UpContract(ctx, own))
	c, dirty, err = migrations.ContractVersion(own)
	require.NoError(t, err)
	require.False(t, dirty)
	require.Positive(t, c)
	require.LessOrEqual(t, c, latest)
}

// TestConcurrentIndexOutsideATransaction: a file marked no-transaction
// holding one CREATE INDEX CONCURRENTLY is sent alone, so PostgreSQL runs
// it outside a transaction block and the index is built valid, beside
// transactional files that run under lock_timeout.
func TestConcurrentIndexOutsideATransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	fsys := fstest.MapFS{
		"m/000001_table.up.sql":  {Data: []byte("BEGIN;\nCREATE TABLE probe (x int);\nCOMMIT;\n")},
		"m/000002_index.up.sql":  {Data: []byte("-- migrate: no-transaction\n-- The index reads use.\nCREATE INDEX CONCURRENTLY IF NOT EXISTS probe_x_idx ON probe (x);\n")},
		"m/000003_column.up.sql": {Data: []byte("ALTER TABLE probe ADD COLUMN y int NULL;\n")},
	}
	require.NoError(t, migrations.UpFS(ctx, url, fsys, "m", migrations.Options{}))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var valid bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'probe_x_idx'::regclass`).Scan(&valid))
	require.True(t, valid)
	var version int
	var dirty bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty))
	require.Equal(t, 3, version)
	require.False(t, dirty)
}

// TestLockTimeoutEndsWithTheFile: the lock_timeout a migration runs under
// does not outlive its file: the next step's wait for the advisory lock
// another replica's migration holds is not cut short by it.
func TestLockTimeoutEndsWithTheFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	fsys := fstest.MapFS{
		"m/000001_a.up.sql": {Data: []byte("CREATE TABLE probe_a (x int)")}, // no ";" at the end
		"m/000002_b.up.sql": {Data: []byte("CREATE TABLE probe_b (setting text);\nINSERT INTO probe_b SELECT current_setting('lock_timeout');\n-- the end")},
		// Not wrapped: it runs with what the session holds after 000002.
		"m/000003_c.up.sql": {Data: []byte("-- migrate: no-transaction\nCREATE TABLE probe_c AS SELECT current_setting('lock_timeout') AS setting")},
	}
	require.NoError(t, migrations.UpFS(ctx, url, fsys, "m", migrations.Options{LockTimeout: 1234 * time.Millisecond}))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var setting string
	require.NoError(t, conn.QueryRow(ctx, `SELECT setting FROM probe_b`).Scan(&setting))
	require.Equal(t, "1234ms", setting)
	require.NoError(t, conn.QueryRow(ctx, `SELECT setting FROM probe_c`).Scan(&setting))
	require.Equal(t, "0", setting)
}
