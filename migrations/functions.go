package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
)

// The database's functions have one current definition each, in
// functions/*.sql (one file per function, named after it; 00_from_go.gen.sql
// is generated from Go's constants by store.SQLFromGo). A numbered
// migration does not define a function: Up applies every file, in name
// order, after the numbered migrations, each a CREATE OR REPLACE, so a body
// changes by editing its file. The definitions in older numbered migrations
// are history, replaced by these.
//
// The step runs only when the database is at this release's expand version
// exactly: on a schema a newer release expanded, the bodies are that
// release's, and a replica of this one restarting beside it during the
// upgrade leaves them alone. So a release that changes a body carries a
// numbered migration too (a COMMENT will do), and the bodies it replaces
// must serve the previous release's replicas until they are gone, as an
// expand migration's changes do. It runs in one transaction under an
// advisory lock, so replicas starting together replace each function once
// at a time (concurrent CREATE OR REPLACE of one function fails).
//
//go:embed functions/*.sql
var functionFiles embed.FS

// functionsLock is the advisory lock (class, key) the functions step holds.
const functionsLock = "1801, 1"

// Function is one function's current definition.
type Function struct {
	Name string // its name (unqualified, in the public schema)
	File string // the file under functions/ that defines it
	Body string // the text between its $$ quotes: what pg_proc.prosrc holds
}

var functionDef = regexp.MustCompile(`(?s)CREATE OR REPLACE FUNCTION ([a-z0-9_]+)\(.*?\bAS \$\$(.*?)\$\$`)

// Functions lists the current definitions, in the order they are applied.
func Functions() ([]Function, error) {
	names, err := fs.Glob(functionFiles, "functions/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Function
	for _, name := range names {
		body, err := fs.ReadFile(functionFiles, name)
		if err != nil {
			return nil, err
		}
		for _, m := range functionDef.FindAllStringSubmatch(string(body), -1) {
			out = append(out, Function{Name: m[1], File: path.Base(name), Body: m[2]})
		}
	}
	return out, nil
}

// applyFunctions applies functions/*.sql when the database is at expand
// version latest (see above).
func applyFunctions(ctx context.Context, databaseURL string, opts Options) error {
	latest, err := Latest()
	if err != nil {
		return err
	}
	version, dirty, err := Version(databaseURL)
	if err != nil {
		return err
	}
	if dirty || version != latest {
		return nil
	}
	names, err := fs.Glob(functionFiles, "functions/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("apply functions: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", opts.withDefaults().LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock("+functionsLock+")"); err != nil {
			return fmt.Errorf("apply functions: %w", err)
		}
		for _, name := range names {
			body, err := fs.ReadFile(functionFiles, name)
			if err != nil {
				return err
			}
			// Simple protocol: a file is several statements.
			if _, err := tx.Exec(ctx, string(body), pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("apply %s: %w", name, err)
			}
		}
		return nil
	})
}
