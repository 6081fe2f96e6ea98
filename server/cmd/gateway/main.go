// Command gateway is Worker Gateway's one server binary: serve a replica,
// migrate the database, run administrative tasks, or start a complete
// development system.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const usage = `gateway — durable task leasing for remote Workers

Usage:
  gateway serve     [flags]   serve one replica (TLS)
  gateway migrate   up|version [flags]
  gateway admin     bootstrap-token|create-organization|create-worker|assign|issue-dev-certs [flags]
  gateway ctl       <resource> <verb> [flags]   manage orgs, workers, tokens and tasks over the REST API
  gateway dev       [flags]   start a complete development system (used by make run)

Every flag can also be set by environment variable; run a subcommand with -h to see them.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	slog.SetDefault(logger)

	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = runServe(ctx, args, logger)
	case "migrate":
		err = runMigrate(ctx, args)
	case "admin":
		err = runAdmin(ctx, args)
	case "dev":
		err = runDev(ctx, args, logger)
	case "ctl":
		if code := runCtl(ctx, args, os.Stdout, os.Stderr); code != 0 {
			stop()
			os.Exit(code)
		}
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// env returns an environment variable or a default, for flag defaults.
func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
