package main

import (
	"context"
	"fmt"

	"github.com/worker-gateway/gateway/migrations"
)

func migrateCommand(a *cli) *command {
	// databaseURL defines the one flag both subcommands take.
	databaseURL := func(fs *flagSet) *string {
		url := fs.String("database-url", "", "PostgreSQL URL")
		fs.alias("database-url", "DATABASE_URL")
		return url
	}
	need := func(url string) error {
		if url == "" {
			return usageError{"migrate needs -database-url or $GATEWAY_DATABASE_URL"}
		}
		return nil
	}
	return &command{name: "migrate", short: "apply or inspect the database schema migrations", sub: []*command{
		{name: "up", short: "apply the embedded migrations", setup: func(fs *flagSet) execFunc {
			url := databaseURL(fs)
			return func(ctx context.Context, _ []string) error {
				if err := need(*url); err != nil {
					return err
				}
				if err := migrations.Up(ctx, *url); err != nil {
					return err
				}
				v, _, err := migrations.Version(*url)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "database at version %d\n", v)
				return nil
			}
		}},
		{name: "version", short: "print the database's schema version and this binary's latest", setup: func(fs *flagSet) execFunc {
			url := databaseURL(fs)
			return func(context.Context, []string) error {
				if err := need(*url); err != nil {
					return err
				}
				v, dirty, err := migrations.Version(*url)
				if err != nil {
					return err
				}
				latest, _ := migrations.Latest()
				fmt.Fprintf(a.stdout, "database at version %d (dirty=%t); this binary's latest is %d\n", v, dirty, latest)
				return nil
			}
		}},
	}}
}
