// Package migrations holds the gateway's numbered, forward-only SQL
// migrations, embedded in the binary, and applies them with golang-migrate.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed *.sql
var files embed.FS

// Up applies every migration not yet applied. Each file wraps itself in
// BEGIN/COMMIT, and golang-migrate holds an advisory lock, so replicas starting
// together migrate once.
func Up(ctx context.Context, databaseURL string) error {
	return run(ctx, databaseURL, "migrate up", func(m *migrate.Migrate) error { return m.Up() })
}

// UpTo applies the migrations up to and including version, so a test can
// put data in the schema as it was before a migration and then move it
// across.
func UpTo(ctx context.Context, databaseURL string, version uint) error {
	return run(ctx, databaseURL, fmt.Sprintf("migrate to %d", version), func(m *migrate.Migrate) error { return m.Migrate(version) })
}

// run applies migrations with step, stopping gracefully (between
// migrations) when ctx ends; having nothing to do is not an error.
func run(ctx context.Context, databaseURL, what string, step func(*migrate.Migrate) error) error {
	m, err := open(databaseURL)
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

// Previous is the version of the embedded migration just before version.
func Previous(version uint) (uint, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	return src.Prev(version)
}

// Version reports the applied version and whether a failed migration left the
// schema dirty. Version 0 means no migration has run.
func Version(databaseURL string) (version uint, dirty bool, err error) {
	m, err := open(databaseURL)
	if err != nil {
		return 0, false, err
	}
	defer closeMigrate(m)
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return version, dirty, err
}

// Latest is the highest migration version embedded in this binary, so
// /readyz can tell whether the database schema is current.
func Latest() (uint, error) {
	src, err := iofs.New(files, ".")
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

func open(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, pgx5URL(databaseURL))
	if err != nil {
		return nil, fmt.Errorf("open migration target: %w", err)
	}
	return m, nil
}

func closeMigrate(m *migrate.Migrate) {
	_, _ = m.Close()
}

// pgx5URL rewrites a postgres:// URL to the scheme golang-migrate's pgx v5
// driver registers.
func pgx5URL(databaseURL string) string {
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if strings.HasPrefix(databaseURL, prefix) {
			return "pgx5://" + strings.TrimPrefix(databaseURL, prefix)
		}
	}
	return databaseURL
}
