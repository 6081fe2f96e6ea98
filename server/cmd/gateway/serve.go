package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/server"
)

// serveConfig is what `gateway serve` (and `gateway dev`) need to run a
// replica.
type serveConfig struct {
	databaseURL string
	listen      string
	tlsCert     string
	tlsKey      string
	migrate     bool
	server      server.Config
	drain       time.Duration
	maxConns    int
}

func serveFlags(fs *flag.FlagSet) *serveConfig {
	c := &serveConfig{server: server.DefaultConfig()}
	fs.StringVar(&c.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	fs.StringVar(&c.listen, "listen", env("GATEWAY_LISTEN", "127.0.0.1:8443"), "TLS listen address ($GATEWAY_LISTEN)")
	fs.StringVar(&c.tlsCert, "tls-cert", env("GATEWAY_TLS_CERT", ""), "server certificate PEM ($GATEWAY_TLS_CERT)")
	fs.StringVar(&c.tlsKey, "tls-key", env("GATEWAY_TLS_KEY", ""), "server key PEM ($GATEWAY_TLS_KEY)")
	fs.BoolVar(&c.migrate, "migrate", env("GATEWAY_MIGRATE", "") == "true", "apply migrations before serving ($GATEWAY_MIGRATE=true)")
	fs.DurationVar(&c.server.MaxWait, "max-wait", c.server.MaxWait, "longest long-poll wait")
	fs.DurationVar(&c.server.DefaultWait, "default-wait", c.server.DefaultWait, "long-poll wait when the worker gives none")
	fs.DurationVar(&c.server.HeartbeatInterval, "heartbeat-interval", c.server.HeartbeatInterval, "longest heartbeat interval told to workers; online = seen within 3 intervals")
	fs.DurationVar(&c.server.SweepIdleInterval, "sweep-idle-interval", c.server.SweepIdleInterval, "lease sweep interval when no expiry is known to be due sooner")
	fs.IntVar(&c.server.Limits.PollsPerWorker, "polls-per-worker", c.server.Limits.PollsPerWorker, "concurrent long-polls per worker")
	fs.IntVar(&c.server.Limits.MaxPolls, "max-polls", c.server.Limits.MaxPolls, "concurrent long-polls per replica")
	fs.Int64Var(&c.server.Limits.TaskBody, "max-task-body", c.server.Limits.TaskBody, "largest task creation body (bounds a task's payload), bytes")
	fs.Int64Var(&c.server.Limits.ResultBody, "max-result-body", c.server.Limits.ResultBody, "largest result batch body, bytes")
	fs.IntVar(&c.server.Limits.RecordsPerBatch, "max-batch-records", c.server.Limits.RecordsPerBatch, "most records in one result batch")
	fs.DurationVar(&c.drain, "drain", 30*time.Second, "how long in-flight requests may finish on shutdown")
	fs.IntVar(&c.maxConns, "db-max-conns", 20, "database pool size")
	return c
}

func runServe(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	c := serveFlags(fs)
	_ = fs.Parse(args)
	if c.databaseURL == "" || c.tlsCert == "" || c.tlsKey == "" {
		return fmt.Errorf("serve needs -database-url, -tls-cert and -tls-key")
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	return serve(ctx, c, ln, logger)
}

// serve runs one replica on ln until ctx ends.
func serve(ctx context.Context, c *serveConfig, ln net.Listener, logger *slog.Logger) error {
	if c.migrate {
		if err := migrations.Up(ctx, c.databaseURL); err != nil {
			return err
		}
	}
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return fmt.Errorf("load TLS key pair: %w", err)
	}
	poolCfg, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return err
	}
	poolCfg.MaxConns = int32(c.maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	c.server.Logger = logger
	srv, err := server.New(pool, c.server)
	if err != nil {
		return err
	}
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(bgCtx, c.databaseURL) })
	logger.Info("gateway serving", "address", ln.Addr().String())
	err = srv.Serve(ctx, ln, server.TLSConfig(cert), c.drain)
	stopBackground()
	wg.Wait()
	logger.Info("gateway stopped")
	return err
}
