// Command gateway is Worker Gateway's one server binary: serve a replica,
// migrate the database, run administrative tasks, drive the control plane
// over the API, or start a complete development system.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := newCLI(os.Stdout, os.Stderr)
	slog.SetDefault(a.logger)
	a.isDefault = true
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// rootCommand is the command table.
func rootCommand(a *cli) *command {
	return &command{
		name:  "gateway",
		short: "gateway — durable task leasing for remote workers",
		long: "Every flag can also be set by an environment variable, GATEWAY_<FLAG> (-database-url:\n" +
			"GATEWAY_DATABASE_URL); -h on a command lists them, with the older names still read.",
		sub: []*command{
			serveCommand(a),
			migrateCommand(a),
			secretsCommand(a),
			adminCommand(a),
			ctlCommand(a),
			devCommand(a),
			healthcheckCommand(a),
			versionCommand(a),
		},
	}
}
