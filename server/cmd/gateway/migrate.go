package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/worker-gateway/gateway/migrations"
)

func runMigrate(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: gateway migrate up|version [-database-url URL]")
	}
	fs := flag.NewFlagSet("migrate", flag.ExitOnError)
	url := fs.String("database-url", env("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	_ = fs.Parse(args[1:])
	if *url == "" {
		return fmt.Errorf("migrate needs -database-url or $DATABASE_URL")
	}
	switch args[0] {
	case "up":
		if err := migrations.Up(ctx, *url); err != nil {
			return err
		}
		v, _, err := migrations.Version(*url)
		if err != nil {
			return err
		}
		fmt.Printf("database at version %d\n", v)
	case "version":
		v, dirty, err := migrations.Version(*url)
		if err != nil {
			return err
		}
		latest, _ := migrations.Latest()
		fmt.Printf("database at version %d (dirty=%t); this binary's latest is %d\n", v, dirty, latest)
	default:
		return fmt.Errorf("unknown migrate command %q", args[0])
	}
	return nil
}
