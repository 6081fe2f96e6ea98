package store_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// TestDatabaseFunctionsHaveOneSource: every function of the database's
// own (not an extension's) is defined in migrations/functions, once, and
// its body in the database is that file's.
func TestDatabaseFunctionsHaveOneSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	defs, err := migrations.Functions()
	require.NoError(t, err)
	source := map[string]migrations.Function{}
	for _, f := range defs {
		_, twice := source[f.Name]
		require.False(t, twice, "function %s is defined twice in migrations/functions", f.Name)
		source[f.Name] = f
	}

	rows, err := pool.Query(ctx, `
		SELECT p.proname, p.prosrc FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace
			AND NOT EXISTS (SELECT 1 FROM pg_depend d
				WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')`)
	require.NoError(t, err)
	bodies := map[string]string{}
	func() {
		defer rows.Close()
		for rows.Next() {
			var name, body string
			require.NoError(t, rows.Scan(&name, &body))
			_, overloaded := bodies[name]
			require.False(t, overloaded, "function %s is overloaded", name)
			bodies[name] = body
		}
		require.NoError(t, rows.Err())
	}()
	for name, body := range bodies {
		f, ok := source[name]
		if !ok {
			t.Errorf("the database's function %s has no definition in migrations/functions", name)
			continue
		}
		require.Equal(t, f.Body, body, "function %s: the database's body is not migrations/functions/%s", name, f.File)
	}
	for name, f := range source {
		_, ok := bodies[name]
		require.True(t, ok, "migrations/functions/%s defines %s, which the database lacks", f.File, name)
	}
}

// TestTriggerConditionsSpellGoStates: the triggers' WHEN clauses, which
// live in the migrations that made them, name only states Go defines, and
// the schedule wake-up fires on exactly the final ones.
func TestTriggerConditionsSpellGoStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	rows, err := pool.Query(ctx, `
		SELECT tg.tgname, c.relname, pg_get_triggerdef(tg.oid) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
		WHERE NOT tg.tgisinternal AND c.relname IN ('worker_tasks', 'scans')`)
	require.NoError(t, err)
	defer rows.Close()
	literal := regexp.MustCompile(`'([^']*)'::text`)
	var taskStates, scanStates []string
	for _, s := range []store.TaskState{store.TaskPending, store.TaskLeased, store.TaskRunning, store.TaskCancelling,
		store.TaskCancelled, store.TaskCompleted, store.TaskRetryWait, store.TaskFailedTerminal} {
		taskStates = append(taskStates, string(s))
	}
	for _, s := range []store.ScanState{store.ScanPending, store.ScanRunning, store.ScanCompleted, store.ScanFailed, store.ScanCancelled} {
		scanStates = append(scanStates, string(s))
	}
	seen := 0
	for rows.Next() {
		var name, table, def string
		require.NoError(t, rows.Scan(&name, &table, &def))
		known := taskStates
		if table == "scans" {
			known = scanStates
		}
		var named []string
		for _, m := range literal.FindAllStringSubmatch(def, -1) {
			require.Contains(t, known, m[1], "trigger %s: %q is no state of %s in Go", name, m[1], table)
			named = append(named, m[1])
		}
		if name == "worker_tasks_wake_schedule" {
			seen++
			slices.Sort(named)
			final := []string{string(store.TaskCompleted), string(store.TaskCancelled), string(store.TaskFailedTerminal)}
			slices.Sort(final)
			for _, s := range final {
				require.True(t, store.TaskState(s).IsFinal())
			}
			require.Equal(t, final, named, "trigger %s: %s", name, def)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, seen, "trigger worker_tasks_wake_schedule not found")
}

// TestDatabaseTriggersAreListed: the schema's triggers are the ones
// store.DatabaseTriggers tells the reader of a statement about.
func TestDatabaseTriggersAreListed(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	rows, err := pool.Query(context.Background(), `
		SELECT tg.tgname, c.relname, p.proname FROM pg_trigger tg
		JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_proc p ON p.oid = tg.tgfoid
		WHERE NOT tg.tgisinternal ORDER BY tg.tgname`)
	require.NoError(t, err)
	var inDatabase []store.DatabaseTrigger
	func() {
		defer rows.Close()
		for rows.Next() {
			var tr store.DatabaseTrigger
			require.NoError(t, rows.Scan(&tr.Name, &tr.Table, &tr.Function))
			inDatabase = append(inDatabase, tr)
		}
		require.NoError(t, rows.Err())
	}()
	var listed []store.DatabaseTrigger
	for _, tr := range store.DatabaseTriggers {
		require.NotEmpty(t, tr.Effect, tr.Name)
		tr.Effect = ""
		listed = append(listed, tr)
	}
	slices.SortFunc(listed, func(a, b store.DatabaseTrigger) int { return strings.Compare(a.Name, b.Name) })
	require.Equal(t, listed, inDatabase)
}
