package migrations_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store/storetest"
)

// probeRows is the size of the table the test backfills.
const probeRows = 250

// TestBackfillResumesAfterAKill: a backfill's session is killed
// (pg_terminate_backend) after its fourth batch changed its rows and before
// that batch committed with its progress. The run fails; the rows of the
// first three batches are changed and recorded, the fourth's are not. The
// next run resumes after the third batch — not from the start — and
// changes every row exactly once; a finished backfill does not run again.
func TestBackfillResumesAfterAKill(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `CREATE TABLE backfill_probe (id int PRIMARY KEY, changed int NOT NULL DEFAULT 0);
		INSERT INTO backfill_probe (id) SELECT generate_series(1, `+strconv.Itoa(probeRows)+`)`)
	require.NoError(t, err)

	var afters []string // where each batch began
	kill := 4           // the batch whose session is killed; 0: none
	b := migrations.Backfill{Name: "probe", BatchSize: 20,
		Batch: func(ctx context.Context, tx pgx.Tx, after string, size int) (string, int, error) {
			afters = append(afters, after)
			from := 0
			if after != "" {
				from, _ = strconv.Atoi(after)
			}
			var last, n int
			err := tx.QueryRow(ctx, `WITH changed AS (
				UPDATE backfill_probe SET changed = changed + 1
				WHERE id IN (SELECT id FROM backfill_probe WHERE id > $1 ORDER BY id LIMIT $2) RETURNING id)
				SELECT coalesce(max(id), 0), count(*) FROM changed`, from, size).Scan(&last, &n)
			if err != nil {
				return "", 0, err
			}
			if len(afters) == kill {
				var pid int
				require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
				var gone bool
				require.NoError(t, conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&gone))
				require.True(t, gone, "the runner's session is killed")
			}
			return strconv.Itoa(last), n, nil
		}}

	_, err = migrations.RunBackfill(ctx, url, b, migrations.Options{})
	require.Error(t, err, "the run whose session was killed fails")
	require.Equal(t, []string{"", "20", "40", "60"}, afters)
	var lastKey string
	var rowsDone int64
	var finished bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT last_key, rows_done, finished_at IS NOT NULL FROM `+migrations.BackfillTable+
		` WHERE name = 'probe'`).Scan(&lastKey, &rowsDone, &finished))
	require.Equal(t, "60", lastKey, "three batches committed with their progress")
	require.EqualValues(t, 60, rowsDone)
	require.False(t, finished)
	require.Equal(t, map[int]int{1: 60, 0: probeRows - 60}, changedCounts(t, conn), "the killed batch rolled back")

	afters, kill = nil, 0
	began := time.Now()
	p, err := migrations.RunBackfill(ctx, url, b, migrations.Options{})
	require.NoError(t, err)
	require.Equal(t, "60", afters[0], "the next run resumes after the last committed batch")
	require.True(t, p.Finished)
	require.EqualValues(t, probeRows, p.Rows)
	require.Equal(t, (probeRows-60+19)/20, p.Batches)
	require.Equal(t, map[int]int{1: probeRows}, changedCounts(t, conn), "every row changed exactly once")
	t.Logf("resumed run: %d batches in %s", p.Batches, time.Since(began).Round(time.Millisecond))

	afters = nil
	p, err = migrations.RunBackfill(ctx, url, b, migrations.Options{})
	require.NoError(t, err)
	require.Empty(t, afters, "a finished backfill does not run again")
	require.True(t, p.Finished)
}

// changedCounts counts the probe rows by how many times they were changed.
func changedCounts(t *testing.T, conn *pgx.Conn) map[int]int {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT changed, count(*)::int FROM backfill_probe GROUP BY changed`)
	require.NoError(t, err)
	out := map[int]int{}
	var changed, n int
	_, err = pgx.ForEachRow(rows, []any{&changed, &n}, func() error { out[changed] = n; return nil })
	require.NoError(t, err)
	return out
}

// TestBackfillWaitsBoundedForLocks: a batch waits at most lock_timeout for
// a lock another transaction holds, is tried again a bounded number of
// times and then gives up, changing nothing; once the lock is released the
// backfill runs.
func TestBackfillWaitsBoundedForLocks(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `CREATE TABLE backfill_probe (id int PRIMARY KEY, changed int NOT NULL DEFAULT 0);
		INSERT INTO backfill_probe (id) SELECT generate_series(1, 30)`)
	require.NoError(t, err)
	tries := 0
	b := migrations.Backfill{Name: "locked", BatchSize: 20,
		Batch: func(ctx context.Context, tx pgx.Tx, after string, size int) (string, int, error) {
			tries++
			from := 0
			if after != "" {
				from, _ = strconv.Atoi(after)
			}
			var last, n int
			err := tx.QueryRow(ctx, `WITH changed AS (
				UPDATE backfill_probe SET changed = changed + 1
				WHERE id IN (SELECT id FROM backfill_probe WHERE id > $1 ORDER BY id LIMIT $2) RETURNING id)
				SELECT coalesce(max(id), 0), count(*) FROM changed`, from, size).Scan(&last, &n)
			return strconv.Itoa(last), n, err
		}}

	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `LOCK TABLE backfill_probe IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	opts := migrations.Options{LockTimeout: 100 * time.Millisecond, Attempts: 3}
	_, err = migrations.RunBackfill(ctx, url, b, opts)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "the batch gave up waiting for the lock")
	require.Equal(t, 3, tries, "tried Attempts times")
	require.NoError(t, holder.Rollback(ctx))
	require.Equal(t, map[int]int{0: 30}, changedCounts(t, conn))

	p, err := migrations.RunBackfill(ctx, url, b, opts)
	require.NoError(t, err)
	require.True(t, p.Finished)
	require.Equal(t, map[int]int{1: 30}, changedCounts(t, conn))
}
