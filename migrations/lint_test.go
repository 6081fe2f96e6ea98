package migrations

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4/source"
	"github.com/stretchr/testify/require"
)

// grandfathered are the expand migrations that ran before the expand rule
// (DESIGN.md section 17): some drop, rebuild indexes or tighten columns.
// No file joins this list.
var grandfathered = []uint{1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 24}

// firstWithoutFunctions is the first numbered migration that may not
// define a function (functions.go): those before it are history.
const firstWithoutFunctions = 31

var defineFunction = regexp.MustCompile(`(?i)\bCREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b`)

// hotTables are written by every lease, heartbeat and completion: a lock
// that queues behind a long transaction on one of them stops the fleet.
var hotTables = []string{"worker_tasks", "worker_task_queue", "worker_task_attempts"}

// TestExpandMigrationsOnlyAdd lints every numbered migration from 000025
// on (the package documentation says why), and every contract migration's
// header.
func TestExpandMigrationsOnlyAdd(t *testing.T) {
	t.Parallel()
	problems, err := lintDir(files, ".")
	require.NoError(t, err)
	require.Empty(t, problems, "expand migrations may only add; drops, renames and tightening belong in migrations/contract (see the package documentation)")

	latest, err := Latest()
	require.NoError(t, err)
	contracts, err := ContractRequirements(contractFiles, "contract")
	require.NoError(t, err)
	for version, requires := range contracts {
		require.LessOrEqual(t, requires, latest, "contract migration %d requires an expand version this release does not carry", version)
	}
}

// TestLintMigrationsDir lints the migrations of another tree (a branch to
// merge): LINT_MIGRATIONS_DIR=/path/to/migrations go test ./migrations -run TestLintMigrationsDir -v
func TestLintMigrationsDir(t *testing.T) {
	dir := os.Getenv("LINT_MIGRATIONS_DIR")
	if dir == "" {
		t.Skip("LINT_MIGRATIONS_DIR not set")
	}
	problems, err := lintDir(os.DirFS(dir), ".")
	require.NoError(t, err)
	for _, p := range problems {
		t.Log(p)
	}
	require.Empty(t, problems)
}

func lintDir(fsys fs.FS, dir string) ([]string, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, e := range entries {
		m, err := source.DefaultParse(e.Name())
		if err != nil || e.IsDir() || slices.Contains(grandfathered, m.Version) {
			continue
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		for _, p := range lintExpand(string(body)) {
			problems = append(problems, fmt.Sprintf("%s: %s", e.Name(), p))
		}
		if m.Version >= firstWithoutFunctions && defineFunction.MatchString(string(body)) {
			problems = append(problems, e.Name()+": defines a function: functions have one current definition, in migrations/functions (functions.go)")
		}
	}
	return problems, nil
}

var (
	lineComment  = regexp.MustCompile(`--[^\n]*`)
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	dollarTag    = regexp.MustCompile(`\$[A-Za-z_0-9]*\$`)
	quoted       = regexp.MustCompile(`'(?:[^']|'')*'`)
	space        = regexp.MustCompile(`\s+`)

	dropAny       = regexp.MustCompile(`\bDROP\b`)
	dropNotNull   = regexp.MustCompile(`\bDROP NOT NULL\b`)
	rename        = regexp.MustCompile(`\bRENAME\b`)
	changeType    = regexp.MustCompile(`\bALTER (?:COLUMN )?\S+ (?:SET DATA )?TYPE\b`)
	setNotNull    = regexp.MustCompile(`\bSET NOT NULL\b`)
	addColumn     = regexp.MustCompile(`\bADD (?:COLUMN )?(?:IF NOT EXISTS )?\S+ [^,]*`)
	notNull       = regexp.MustCompile(`\bNOT NULL\b`)
	hasDefault    = regexp.MustCompile(`\bDEFAULT\b`)
	createIndex   = regexp.MustCompile(`\bCREATE (?:UNIQUE )?INDEX\b`)
	concurrently  = regexp.MustCompile(`\bCONCURRENTLY\b`)
	onTable       = regexp.MustCompile(`\bON (?:ONLY )?(\S+)`)
	alterTable    = regexp.MustCompile(`^ALTER TABLE (?:IF EXISTS )?(?:ONLY )?(\S+)`)
	addConstraint = regexp.MustCompile(`\bADD (?:CONSTRAINT \S+ )?(CHECK|FOREIGN KEY|UNIQUE|PRIMARY KEY|EXCLUDE)\b`)
	notValid      = regexp.MustCompile(`\bNOT VALID\b`)
	usingIndex    = regexp.MustCompile(`\bUSING INDEX\b`)
)

// statements splits a file into its statements, upper-cased, with comments,
// string literals and dollar-quoted bodies (functions: their text is not
// schema) blanked, and whitespace collapsed.
func statements(sql string) []string {
	sql = blockComment.ReplaceAllString(lineComment.ReplaceAllString(sql, " "), " ")
	var b strings.Builder
	for {
		loc := dollarTag.FindStringIndex(sql)
		if loc == nil {
			b.WriteString(sql)
			break
		}
		tag := sql[loc[0]:loc[1]]
		end := strings.Index(sql[loc[1]:], tag)
		if end < 0 {
			b.WriteString(sql)
			break
		}
		b.WriteString(sql[:loc[0]] + " $BODY$ ")
		sql = sql[loc[1]+end+len(tag):]
	}
	sql = quoted.ReplaceAllString(b.String(), "''")
	var out []string
	for s := range strings.SplitSeq(sql, ";") {
		s = strings.TrimSpace(space.ReplaceAllString(strings.ToUpper(s), " "))
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// lintExpand says what in an expand migration is not expand-only.
func lintExpand(sql string) []string {
	var problems []string
	noTx := strings.TrimSpace(strings.SplitN(sql, "\n", 2)[0]) == noTransaction
	stmts := statements(sql)
	if noTx && (len(stmts) != 1 || !createIndex.MatchString(stmts[0]) || !concurrently.MatchString(stmts[0])) {
		problems = append(problems, "a "+noTransaction+" file holds exactly one CREATE INDEX CONCURRENTLY")
	}
	for _, s := range stmts {
		if strings.HasPrefix(s, "SET ") || s == "BEGIN" || s == "COMMIT" {
			continue
		}
		problems = append(problems, lintStatement(s, noTx)...)
	}
	return problems
}

func lintStatement(s string, noTx bool) []string {
	var problems []string
	say := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...)+": "+abbreviate(s))
	}
	if dropAny.MatchString(dropNotNull.ReplaceAllString(s, "")) {
		say("drops (only DROP NOT NULL relaxes; a drop is a contract migration)")
	}
	if rename.MatchString(s) {
		say("renames (add the new name beside the old; drop the old in a contract migration)")
	}
	if changeType.MatchString(s) {
		say("changes a column's type (add a column of the new type and write both)")
	}
	if setNotNull.MatchString(s) {
		say("tightens a column to NOT NULL (add a NOT VALID CHECK, validate it later)")
	}
	if strings.HasPrefix(s, "ALTER TABLE") || strings.HasPrefix(s, "CREATE TABLE") {
		// CREATE TABLE's columns are new: NOT NULL is fine there.
		if strings.HasPrefix(s, "ALTER TABLE") {
			for _, add := range addColumn.FindAllString(s, -1) {
				if addConstraint.MatchString(add) || strings.HasPrefix(add, "ADD CONSTRAINT") {
					continue
				}
				if notNull.MatchString(add) && !hasDefault.MatchString(add) {
					say("adds a NOT NULL column without a default (the older release inserts without it)")
				}
			}
		}
	}
	if concurrently.MatchString(s) && !noTx {
		say("runs CONCURRENTLY inside a transaction (put it alone in a file whose first line is %q)", noTransaction)
	}
	if createIndex.MatchString(s) && !concurrently.MatchString(s) {
		if m := onTable.FindStringSubmatch(s); m != nil && isHot(m[1]) {
			say("builds an index on hot table %s without CONCURRENTLY", strings.ToLower(m[1]))
		}
	}
	if m := alterTable.FindStringSubmatch(s); m != nil && isHot(m[1]) {
		for _, c := range addConstraint.FindAllStringSubmatch(s, -1) {
			switch c[1] {
			case "CHECK", "FOREIGN KEY":
				if !notValid.MatchString(s) {
					say("adds a %s constraint to hot table %s without NOT VALID (it scans under the lock; VALIDATE it in a later file)", c[1], strings.ToLower(m[1]))
				}
			default:
				if !usingIndex.MatchString(s) {
					say("adds a %s constraint to hot table %s, building its index under the lock (build it CONCURRENTLY, then ADD CONSTRAINT … USING INDEX)", c[1], strings.ToLower(m[1]))
				}
			}
		}
	}
	return problems
}

func isHot(table string) bool {
	table = strings.Trim(strings.ToLower(strings.TrimPrefix(strings.ToLower(table), "public.")), `"`)
	return slices.Contains(hotTables, table)
}

func abbreviate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// TestLintRules: what the lint refuses and what it lets through.
func TestLintRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sql  string
		want string // a fragment of the one problem; "" for none
	}{
		{"CREATE TABLE t (id bigint NOT NULL PRIMARY KEY);", ""},
		{"ALTER TABLE t ADD COLUMN c text NULL;", ""},
		{"ALTER TABLE t ADD COLUMN c integer NOT NULL DEFAULT 0;", ""},
		{"ALTER TABLE webhook_targets ALTER COLUMN secret DROP NOT NULL, ADD COLUMN k bytea NULL;", ""},
		{"CREATE INDEX t_c_idx ON t (c);", ""},
		{"CREATE OR REPLACE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN DROP TABLE x; END $$;", ""},
		{"-- drop the old one later\nCOMMENT ON TABLE t IS 'we never DROP this';", ""},
		{"-- migrate: no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS worker_tasks_x_idx ON worker_tasks (x);", ""},
		{"ALTER TABLE worker_tasks ADD CONSTRAINT c CHECK (x > 0) NOT VALID;", ""},
		{"ALTER TABLE worker_tasks ADD CONSTRAINT u UNIQUE USING INDEX u_idx;", ""},
		{"DROP TABLE t;", "drops"},
		{"DROP INDEX CONCURRENTLY t_idx;", "drops"},
		{"ALTER TABLE t DROP COLUMN c;", "drops"},
		{"ALTER TABLE t DROP CONSTRAINT k;", "drops"},
		{"ALTER TABLE t ALTER COLUMN c DROP DEFAULT;", "drops"},
		{"ALTER TABLE t RENAME COLUMN a TO b;", "renames"},
		{"ALTER TABLE t RENAME TO u;", "renames"},
		{"ALTER TABLE t ALTER COLUMN c TYPE bigint;", "type"},
		{"ALTER TABLE t ALTER c SET DATA TYPE bigint;", "type"},
		{"ALTER TABLE t ALTER COLUMN c SET NOT NULL;", "NOT NULL"},
		{"ALTER TABLE t ADD COLUMN c text NOT NULL;", "without a default"},
		{"alter table t add c text not null;", "without a default"},
		{"CREATE INDEX worker_tasks_x_idx ON worker_tasks (x);", "without CONCURRENTLY"},
		{"CREATE UNIQUE INDEX q ON public.worker_task_queue (x);", "without CONCURRENTLY"},
		{"CREATE INDEX CONCURRENTLY a_idx ON worker_task_attempts (x);", "inside a transaction"},
		{"-- migrate: no-transaction\nCREATE INDEX CONCURRENTLY a ON t (x); CREATE INDEX CONCURRENTLY b ON t (y);", "exactly one"},
		{"ALTER TABLE worker_task_attempts ADD CONSTRAINT c CHECK (x > 0);", "NOT VALID"},
		{"ALTER TABLE worker_tasks ADD CONSTRAINT f FOREIGN KEY (o) REFERENCES orgs (id);", "NOT VALID"},
		{"ALTER TABLE worker_tasks ADD CONSTRAINT u UNIQUE (x);", "USING INDEX"},
	} {
		got := lintExpand(c.sql)
		if c.want == "" {
			require.Empty(t, got, c.sql)
			continue
		}
		require.NotEmpty(t, got, c.sql)
		require.Contains(t, got[0], c.want, c.sql)
	}
}

// TestLintRefusesWhatOldMigrationsDid: run over the grandfathered files,
// the lint names what made each upgrade an outage.
func TestLintRefusesWhatOldMigrationsDid(t *testing.T) {
	t.Parallel()
	require.Equal(t, uint(24), slices.Max(grandfathered), "the list is closed: later files follow the rule")
	for _, c := range []struct {
		file, want string
	}{
		{"000013_live_lease_index.up.sql", "drops"},
		{"000019_worker_labels.up.sql", "drops"},
		{"000024_worker_live_attempts_index.up.sql", "without CONCURRENTLY"},
		{"000024_worker_live_attempts_index.up.sql", "NOT VALID"},
	} {
		body, err := fs.ReadFile(files, c.file)
		require.NoError(t, err)
		require.Contains(t, strings.Join(lintExpand(string(body)), "\n"), c.want, c.file)
	}
}
