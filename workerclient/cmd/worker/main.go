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
// Every setting can also come from an environment variable named WORKER_
// and the flag's name (-state-dir: WORKER_STATE_DIR); the names older
// versions read (GATEWAY_URL, CA_CERT, WORKER_ENROLLMENT_TOKEN,
// WORKER_WAIT_SECONDS, LOG_LEVEL) still work. A flag wins over the
// environment, which wins over -env FILE, a file of KEY=VALUE lines such as
// the .dev/env `make run` writes. -h lists every flag with its variables.
//
//	worker -check -env .dev/env   # one authenticated call: exit 0 when the gateway accepts the worker
//	worker -version
//
// Logs are JSON on stderr.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/worker-gateway/gateway/internal/buildinfo"
	"github.com/worker-gateway/gateway/internal/envfile"
	"github.com/worker-gateway/gateway/internal/tlsclient"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient"
)

const softwareVersion = "reference-worker/0.1.0"

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// envPrefix names the environment variable of every setting:
// WORKER_<FLAG NAME>, dashes as underscores.
const envPrefix = "WORKER"

// envAliases are the variables earlier versions read, still honoured after
// the WORKER_ one.
var envAliases = map[string][]string{
	"gateway":      {"GATEWAY_URL"},
	"ca":           {"CA_CERT"},
	"enroll-token": {"WORKER_ENROLLMENT_TOKEN"},
	"wait":         {"WORKER_WAIT_SECONDS"},
	"log-level":    {"LOG_LEVEL"},
}

// commandLineOnly are the flags no environment variable sets: they choose
// what the command does, and a variable such as WORKER_VERSION may well
// mean something else on a machine.
var commandLineOnly = map[string]bool{"env": true, "check": true, "version": true}

// options are the parsed flags.
type options struct {
	gateway, cert, key, ca, enrollToken, stateDir string
	slots, wait                                   int
	drain                                         time.Duration
	level, capabilities                           string
	envFile                                       string
	check, version                                bool
	// explicitEnrollment: -state-dir or -enroll-token was on the command
	// line, not only in the environment; explicitCert: -cert or -key was.
	explicitEnrollment, explicitCert bool
}

func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.gateway, "gateway", "", "gateway base `URL`, e.g. https://127.0.0.1:8443")
	fs.StringVar(&o.cert, "cert", "", "client certificate PEM `file`")
	fs.StringVar(&o.key, "key", "", "client key PEM `file`")
	fs.StringVar(&o.ca, "ca", "", "PEM `file` of the CA that signed the gateway's certificate; "+
		"empty: system roots (with -state-dir: plus the CA saved there by enrollment)")
	fs.StringVar(&o.enrollToken, "enroll-token", "",
		"one-time enrollment `token`, used when -cert and -key are not given and -state-dir holds no certificate yet "+
			"(prefer the environment: other users can read a command line)")
	fs.StringVar(&o.stateDir, "state-dir", "",
		"`directory` of the enrolled identity (worker.key, worker.pem, ca.pem), used when -cert and -key are not given")
	fs.IntVar(&o.slots, "slots", 4, "tasks run at once")
	fs.IntVar(&o.wait, "wait", 20, "long-poll wait in `seconds`")
	fs.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "on shutdown, how long running tasks may finish")
	fs.StringVar(&o.level, "log-level", "info", "`level`: debug, info, warn or error")
	fs.StringVar(&o.capabilities, "capabilities", "",
		"extra capabilities to advertise, a `JSON` object such as {\"region\": \"eu\"}; \"plugins\" is always the plugins this worker has")
	fs.StringVar(&o.envFile, "env", "", "read settings from a `file` of KEY=VALUE (or export KEY=VALUE) lines, "+
		"such as .dev/env; its keys are the variables listed here, others are ignored")
	fs.BoolVar(&o.check, "check", false, "make one authenticated call to the gateway and exit: 0 when it accepts the worker")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.Usage = func() { usage(fs) }
	return fs
}

// envNames are the variables that set flag name, the WORKER_ one first.
func envNames(name string) []string {
	if commandLineOnly[name] {
		return nil
	}
	primary := envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	return append([]string{primary}, envAliases[name]...)
}

func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `Usage: worker [flags]

The reference scanner worker of the Worker Gateway: leases scanner_plugin tasks
and runs them until SIGINT or SIGTERM, then drains.

A flag on the command line wins over its environment variables (the first
named is the WORKER_ one; the others are older names), which win over -env FILE.

`)
	fs.VisitAll(func(f *flag.Flag) {
		name, help := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  -%s", f.Name)
		if name != "" {
			fmt.Fprintf(w, " %s", name)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(help, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		if env := envNames(f.Name); len(env) > 0 {
			fmt.Fprintf(w, "\n    \tenv: %s", strings.Join(env, ", "))
		} else {
			fmt.Fprint(w, "\n    \tcommand line only")
		}
		fmt.Fprintln(w)
	})
}

// parse reads the flags from args, then the environment, then the -env
// file, each only for the flags not set yet.
func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := newFlagSet(o, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// The settings, apart from the command-line-only flags, sharing their
	// values: ff fills those the command line left unset from WORKER_*.
	settings := flag.NewFlagSet("worker", flag.ContinueOnError)
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	var setErr error
	fs.VisitAll(func(f *flag.Flag) {
		if commandLineOnly[f.Name] {
			return
		}
		settings.Var(f.Value, f.Name, f.Usage)
		if explicit[f.Name] && setErr == nil {
			setErr = settings.Set(f.Name, f.Value.String()) // marks it set: ff leaves it alone
		}
	})
	if setErr != nil {
		return nil, setErr
	}
	if err := ff.Parse(settings, nil, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return nil, err
	}
	isSet := func(name string) bool {
		set := false
		settings.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		return set
	}
	var err error
	settings.VisitAll(func(f *flag.Flag) {
		for _, alias := range envAliases[f.Name] {
			if v := os.Getenv(alias); v != "" && err == nil && !isSet(f.Name) {
				if e := settings.Set(f.Name, v); e != nil {
					err = fmt.Errorf("environment variable %s: %w", alias, e)
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if o.envFile != "" {
		vars, err := envfile.Read(o.envFile)
		if err != nil {
			return nil, fmt.Errorf("-env: %w", err)
		}
		for _, v := range vars {
			name := flagForEnv(v.Key)
			if name == "" || settings.Lookup(name) == nil || isSet(name) {
				continue
			}
			if err := settings.Set(name, v.Value); err != nil {
				return nil, fmt.Errorf("-env %s: %s: %w", o.envFile, v.Key, err)
			}
		}
	}
	// Enrollment settings are ignored when -cert or -key is given, unless
	// given on the command line too (then it is an error, see identity).
	o.explicitEnrollment = explicit["state-dir"] || explicit["enroll-token"]
	o.explicitCert = explicit["cert"] || explicit["key"]
	return o, nil
}

// flagForEnv is the flag a variable sets, or "".
func flagForEnv(key string) string {
	for name := range envAliases {
		for _, alias := range envAliases[name] {
			if alias == key {
				return name
			}
		}
	}
	if rest, ok := strings.CutPrefix(key, envPrefix+"_"); ok && rest != "" {
		return strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
	}
	return ""
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, versionLine())
		return nil
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	caps, err := capabilities(o.capabilities)
	if err != nil {
		return err
	}
	cfg := workerclient.Config{
		GatewayURL:      o.gateway,
		CAFile:          o.ca,
		Slots:           o.slots,
		WaitSeconds:     o.wait,
		DrainTimeout:    o.drain,
		Capabilities:    caps,
		SoftwareVersion: softwareVersion,
		Handler:         handle(log),
		Logger:          log,
	}
	if err := identity(o, &cfg); err != nil {
		return err
	}
	w, err := workerclient.NewWorker(cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.check {
		return check(ctx, w, o.gateway, stdout)
	}
	go func() {
		<-ctx.Done()
		log.Info("signal received: draining (signal again to quit at once)")
		stop() // a second signal gets the default behaviour
	}()
	return w.Run(ctx) // Run logs why it stopped
}

// identity chooses the worker's identity: the certificate files when -cert
// or -key is given, else enrollment into -state-dir. Both on the command
// line are an error; otherwise the command line wins and the other from
// the environment is ignored (a sourced .dev/env exports WORKER_CERT).
func identity(o *options, cfg *workerclient.Config) error {
	if (o.cert != "" || o.key != "") && (o.explicitCert || !o.explicitEnrollment) {
		if o.explicitEnrollment {
			return errors.New("give either -cert and -key, or -state-dir (with -enroll-token on first start), not both")
		}
		cfg.CertFile, cfg.KeyFile = o.cert, o.key
		return nil
	}
	if o.stateDir == "" {
		return errors.New("no identity: give -cert and -key, or -state-dir (with -enroll-token on first start)")
	}
	cfg.StateDir, cfg.EnrollmentToken = o.stateDir, o.enrollToken
	return nil
}

// capabilities is what the worker advertises: its plugins, plus extra.
func capabilities(extra string) (map[string]any, error) {
	caps := map[string]any{}
	if extra != "" {
		if err := json.Unmarshal([]byte(extra), &caps); err != nil {
			return nil, fmt.Errorf("-capabilities: want a JSON object: %w", err)
		}
		if caps == nil {
			return nil, errors.New("-capabilities: want a JSON object, not null")
		}
		if _, ok := caps["plugins"]; ok {
			return nil, errors.New(`-capabilities: "plugins" is set by the worker: the plugins it has`)
		}
	}
	caps["plugins"] = pluginNames()
	return caps, nil
}

// versionLine is the version -version prints: the release (stamped by
// the build, or the module's version), the VCS revision it was built from
// and the Go version.
func versionLine() string {
	bi := buildinfo.Read()
	line := fmt.Sprintf("worker %s %s", bi.Module, bi.Version)
	if bi.Revision != "" {
		line += " revision " + bi.Revision
		if bi.Modified {
			line += " (modified)"
		}
		if bi.Time != "" {
			line += " of " + bi.Time
		}
	}
	return line + " " + bi.GoVersion + " (" + softwareVersion + ")"
}

// check makes one authenticated call and says whether the gateway accepts
// the worker, with a hint at the likely cause when it does not.
func check(ctx context.Context, w *workerclient.Worker, gateway string, stdout io.Writer) error {
	res, err := w.Check(ctx)
	if err != nil {
		return fmt.Errorf("check failed: %s: %w", checkHint(err), err)
	}
	who := res.CommonName
	if who == "" {
		who = "(unknown certificate name)"
	}
	fmt.Fprintf(stdout, "ok: authenticated as worker %s at %s\n", who, gateway)
	return nil
}

func checkHint(err error) string {
	var (
		apiErr   *workerclient.APIError
		hostErr  x509.HostnameError
		recordHd tls.RecordHeaderError
		opErr    *net.OpError
		dnsErr   *net.DNSError
	)
	switch {
	case errors.Is(err, workerclient.ErrNotEnrolled):
		return "not enrolled yet"
	case errors.As(err, &apiErr) && apiErr.Code == problem.WorkerRevoked:
		return "the gateway has revoked this worker; it needs a new identity"
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
		return "the gateway refused the worker's certificate (not registered, replaced, or expired): " +
			"register it, or enroll with -state-dir and -enroll-token"
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusForbidden:
		return "the gateway knows the worker but refuses it"
	case errors.As(err, &apiErr):
		return "the gateway answered with an error"
	case errors.As(err, &hostErr):
		return "the gateway's certificate is not for this host name: use the name it was issued for in -gateway"
	case tlsclient.Untrusted(err):
		return "the gateway's certificate is not trusted (CA mismatch?): -ca (WORKER_CA, CA_CERT) must name the CA that signed it"
	case errors.As(err, &recordHd):
		return "the gateway does not speak TLS at this address: check -gateway"
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		return "the gateway ended the TLS handshake: it did not accept the worker's certificate"
	case errors.Is(err, context.DeadlineExceeded):
		return "the gateway did not answer in time"
	case errors.As(err, &dnsErr), errors.As(err, &opErr):
		return "the gateway is unreachable: check -gateway and the network"
	}
	return "the call failed"
}
