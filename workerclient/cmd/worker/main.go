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
// Or, without -cert and -key, the worker enrolls: on first start it
// generates its key in -state-dir, sends a CSR with the one-time enrollment
// token the operator got when creating the worker, and keeps the certificate
// the gateway signs there (worker.key, worker.pem, ca.pem). Later starts
// reuse it without a token, and the worker renews it by itself while it
// runs. Prefer passing the token through the environment, where other users
// of the machine cannot read it:
//
//	WORKER_ENROLLMENT_TOKEN=wge_… worker -gateway https://127.0.0.1:8443 -state-dir /var/lib/worker -ca ca.crt
//
// Every flag has an environment variable: GATEWAY_URL, WORKER_CERT,
// WORKER_KEY, CA_CERT, WORKER_ENROLLMENT_TOKEN, WORKER_STATE_DIR,
// WORKER_SLOTS, WORKER_WAIT_SECONDS, WORKER_DRAIN_TIMEOUT and LOG_LEVEL. Logs
// are JSON on stderr.
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
	ca := fs.String("ca", os.Getenv("CA_CERT"), "PEM file of the CA that signed the gateway's certificate ($CA_CERT); "+
		"empty: system roots (with -state-dir: plus the CA saved there by enrollment)")
	enrollToken := fs.String("enroll-token", os.Getenv("WORKER_ENROLLMENT_TOKEN"),
		"one-time enrollment token, used when -cert and -key are not given and -state-dir holds no certificate yet ($WORKER_ENROLLMENT_TOKEN)")
	stateDir := fs.String("state-dir", os.Getenv("WORKER_STATE_DIR"),
		"directory of the enrolled identity (worker.key, worker.pem, ca.pem), used when -cert and -key are not given ($WORKER_STATE_DIR)")
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

	cfg := workerclient.Config{
		GatewayURL:      *gateway,
		CAFile:          *ca,
		Slots:           *slots,
		WaitSeconds:     *wait,
		DrainTimeout:    *drain,
		Capabilities:    map[string]any{"plugins": pluginNames()},
		SoftwareVersion: softwareVersion,
		Handler:         handle(log),
		Logger:          log,
	}
	if err := identity(fs, &cfg, *cert, *key, *stateDir, *enrollToken); err != nil {
		return err
	}
	w, err := workerclient.NewWorker(cfg)
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

// identity chooses the worker's identity: the certificate files when -cert
// or -key is given, else enrollment into -state-dir. Enrollment flags given
// explicitly with -cert/-key are an error; the same settings from the
// environment are ignored then.
func identity(fs *flag.FlagSet, cfg *workerclient.Config, cert, key, stateDir, token string) error {
	if cert != "" || key != "" {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "state-dir" || f.Name == "enroll-token" })
		if explicit {
			return errors.New("give either -cert and -key, or -state-dir (with -enroll-token on first start), not both")
		}
		cfg.CertFile, cfg.KeyFile = cert, key
		return nil
	}
	if stateDir == "" {
		return errors.New("no identity: give -cert and -key, or -state-dir (with -enroll-token on first start)")
	}
	cfg.StateDir, cfg.EnrollmentToken = stateDir, token
	return nil
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
