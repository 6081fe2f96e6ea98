// Command worker is the reference scanner worker: it connects to a Worker
// Gateway with its client certificate, advertises the plugins it has and runs
// scanner_plugin tasks until SIGINT or SIGTERM, then drains.
//
// Plugins: echo, sleep and fail (for tests of the runtime), and the scanner
// plugins dns-resolve, tcp-connect and http-probe (plugin_*.go), which report
// assets and threats as results, write what they probe to the attempt's log,
// and upload a report.json artifact counting the records they emitted by
// kind and asset type (report.go).
//
//	worker -gateway https://127.0.0.1:8443 -cert worker.crt -key worker.key -ca ca.crt
//
// Every flag has an environment variable: GATEWAY_URL, WORKER_CERT,
// WORKER_KEY, CA_CERT, WORKER_SLOTS, WORKER_WAIT_SECONDS,
// WORKER_DRAIN_TIMEOUT and LOG_LEVEL. Logs are JSON on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/worker-gateway/gateway/workerclient"
)

const softwareVersion = "reference-worker/0.1.0"

func main() {
	err := run(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	gateway := fs.String("gateway", os.Getenv("GATEWAY_URL"), "gateway base URL, e.g. https://127.0.0.1:8443 ($GATEWAY_URL)")
	cert := fs.String("cert", os.Getenv("WORKER_CERT"), "client certificate PEM file ($WORKER_CERT)")
	key := fs.String("key", os.Getenv("WORKER_KEY"), "client key PEM file ($WORKER_KEY)")
	ca := fs.String("ca", os.Getenv("CA_CERT"), "PEM file of the CA that signed the gateway's certificate ($CA_CERT); empty: system roots")
	slots := fs.Int("slots", envInt("WORKER_SLOTS", 4), "tasks run at once ($WORKER_SLOTS)")
	wait := fs.Int("wait", envInt("WORKER_WAIT_SECONDS", 20), "long-poll wait in seconds ($WORKER_WAIT_SECONDS)")
	drain := fs.Duration("drain-timeout", envDuration("WORKER_DRAIN_TIMEOUT", 30*time.Second),
		"on shutdown, how long running tasks may finish ($WORKER_DRAIN_TIMEOUT)")
	level := fs.String("log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error ($LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	w, err := workerclient.NewWorker(workerclient.Config{
		GatewayURL:      *gateway,
		CertFile:        *cert,
		KeyFile:         *key,
		CAFile:          *ca,
		Slots:           *slots,
		WaitSeconds:     *wait,
		DrainTimeout:    *drain,
		Capabilities:    map[string]any{"plugins": pluginNames()},
		SoftwareVersion: softwareVersion,
		Handler:         handle(log),
		Logger:          log,
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		log.Info("signal received: draining (signal again to quit at once)")
		stop() // a second signal gets the default behaviour
	}()
	return w.Run(ctx) // Run logs why it stopped
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
