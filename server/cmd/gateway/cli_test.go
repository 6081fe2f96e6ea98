package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peterbourgon/ff/v3/ffcli"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/buildinfo"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
)

// runCLI runs a command line in-process and returns stdout, stderr and the
// exit status.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := newCLI(&out, &errOut).run(context.Background(), args)
	return out.String(), errOut.String(), code
}

// unsetEnv removes variables for the test (restored after it).
func unsetEnv(t *testing.T, names ...string) {
	for _, n := range names {
		t.Setenv(n, "")
		require.NoError(t, os.Unsetenv(n))
	}
}

// ctlVars are the environment variables gateway ctl reads.
var ctlVars = []string{"GATEWAY_URL", "GATEWAY_TOKEN", "GATEWAY_CA", "CA_CERT", "GATEWAY_ENV", "GATEWAY_JSON"}

// adminCtl is gateway ctl against a test gateway with its admin token,
// trusting its CA (written to caFile), in an environment without ctl's
// variables.
type adminCtl struct {
	t      *testing.T
	g      *harness.Gateway
	caFile string
}

func newAdminCtl(t *testing.T, g *harness.Gateway) adminCtl {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, g.CA.CertPEM, 0o600))
	unsetEnv(t, ctlVars...)
	return adminCtl{t: t, g: g, caFile: caFile}
}

// run runs a ctl command: its output, error output and exit code.
func (c adminCtl) run(args ...string) (string, string, int) {
	c.t.Helper()
	return runCLI(c.t, append([]string{"ctl", "--url", c.g.URL, "--token", c.g.AdminToken, "--ca", c.caFile}, args...)...)
}

// ok runs a ctl command that must succeed and returns its output.
func (c adminCtl) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	require.Equal(c.t, 0, code, "ctl %v: %s", args, errOut)
	return out
}

// commandPaths lists every command of the table with its flag set.
func commandPaths() map[string]*flag.FlagSet {
	a := newCLI(&bytes.Buffer{}, &bytes.Buffer{})
	paths := map[string]*flag.FlagSet{}
	var walk func(prefix []string, c *ffcli.Command)
	walk = func(prefix []string, c *ffcli.Command) {
		paths[strings.Join(prefix, " ")] = c.FlagSet
		for _, s := range c.Subcommands {
			walk(append(append([]string{}, prefix...), s.Name), s)
		}
	}
	walk(nil, a.build(rootCommand(a), "gateway", nil, nil))
	return paths
}

// TestHelpEveryCommand: -h on every command and subcommand exits 0 without
// a database or any connection setting, and names every flag with its
// environment variable.
func TestHelpEveryCommand(t *testing.T) {
	unsetEnv(t, "DATABASE_URL", "GATEWAY_DATABASE_URL", "GATEWAY_URL", "GATEWAY_TOKEN", "CA_CERT")
	paths := commandPaths()
	require.Greater(t, len(paths), 40, "the table has every command")
	for path, fs := range paths {
		for _, help := range []string{"-h", "--help"} {
			args := append(strings.Fields(path), help)
			out, errOut, code := runCLI(t, args...)
			require.Equal(t, 0, code, "gateway %s: %s", strings.Join(args, " "), errOut)
			require.Contains(t, out, "USAGE\n  gateway", path)
			fs.VisitAll(func(f *flag.Flag) {
				require.Contains(t, out, "\n  -"+f.Name, "%s -h lists -%s", path, f.Name)
				require.Contains(t, out, envVarName(f.Name), "%s -h names the variable of -%s", path, f.Name)
			})
		}
	}
	// Old names are listed as the aliases they are.
	out, _, _ := runCLI(t, "serve", "-h")
	require.Contains(t, out, "env: GATEWAY_DATABASE_URL, DATABASE_URL")
	require.Contains(t, out, "env: GATEWAY_S3_BUCKET, S3_BUCKET")
	require.Contains(t, out, "env: GATEWAY_LOG_LEVEL, LOG_LEVEL")
	out, _, _ = runCLI(t, "ctl", "tasks", "get", "-h")
	require.Contains(t, out, "env: GATEWAY_CA, CA_CERT")
	// -h after a positional argument, too.
	_, _, code := runCLI(t, "ctl", "tasks", "get", "11111111-1111-1111-1111-111111111111", "-h")
	require.Equal(t, 0, code)
}

// TestHelpBinaryWithoutDatabase runs the built binary, as an operator
// would, with no database configured.
func TestHelpBinaryWithoutDatabase(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gateway")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, args := range [][]string{
		{"-h"}, {"admin", "-h"}, {"admin", "bootstrap-token", "-h"}, {"migrate", "-h"}, {"migrate", "up", "-h"},
		{"serve", "-h"}, {"ctl", "-h"}, {"ctl", "tasks", "logs", "-h"}, {"dev", "-h"}, {"version"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "gateway %v: %s", args, out)
	}
	// A missing command is a usage mistake, shown on stderr.
	cmd := exec.Command(bin, "admin")
	cmd.Env = []string{}
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &ee)
	require.Equal(t, 2, ee.ExitCode())
}

// TestEnvSetsFlags: each flag from GATEWAY_<FLAG> or its older name, the
// command line winning over both and the new name over the old.
func TestEnvSetsFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		flag string
		want string
	}{
		{"prefix", nil, map[string]string{"GATEWAY_DATABASE_URL": "postgres://new"}, "database-url", "postgres://new"},
		{"old name", nil, map[string]string{"DATABASE_URL": "postgres://old"}, "database-url", "postgres://old"},
		{"prefix over old", nil, map[string]string{"DATABASE_URL": "postgres://old", "GATEWAY_DATABASE_URL": "postgres://new"}, "database-url", "postgres://new"},
		{"flag over env", []string{"-database-url", "postgres://flag"}, map[string]string{"GATEWAY_DATABASE_URL": "postgres://new"}, "database-url", "postgres://flag"},
		{"flag without env before", nil, map[string]string{"GATEWAY_MAX_POLLS": "7"}, "max-polls", "7"},
		{"duration", nil, map[string]string{"GATEWAY_HEARTBEAT_INTERVAL": "3s"}, "heartbeat-interval", "3s"},
		{"bool", nil, map[string]string{"GATEWAY_LEASE_GROUP_COMMIT": "false"}, "lease-group-commit", "false"},
		{"S3 old name", nil, map[string]string{"S3_BUCKET": "b"}, "s3-bucket", "b"},
		{"S3 TLS off", nil, map[string]string{"S3_TLS": "false"}, "s3-tls", "false"},
		{"log level old name", nil, map[string]string{"LOG_LEVEL": "debug"}, "log-level", "DEBUG"},
		{"validate responses", nil, map[string]string{"GATEWAY_VALIDATE_RESPONSES": "true"}, "validate-responses", "true"},
		{"dev state dir old name", nil, map[string]string{"STATE_DIR": "/s"}, "state-dir", "/s"},
		{"dev worker bin old name", nil, map[string]string{"WORKER_BIN": "/w"}, "worker-bin", "/w"},
		{"empty is unset", nil, map[string]string{"GATEWAY_LISTEN": ""}, "listen", "127.0.0.1:8443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newFlagSet("dev")
			devFlags(fs, new(slog.LevelVar))
			require.NoError(t, fs.Parse(tc.args))
			require.NoError(t, applyEnv([]*flagSet{fs}, mapEnv(tc.env)))
			require.Equal(t, tc.want, fs.Lookup(tc.flag).Value.String())
		})
	}

	fs := newFlagSet("serve")
	serveFlags(fs, new(slog.LevelVar))
	err := applyEnv([]*flagSet{fs}, mapEnv(map[string]string{"GATEWAY_MAX_POLLS": "many"}))
	require.ErrorContains(t, err, `invalid value "many" for $GATEWAY_MAX_POLLS (flag -max-polls)`)
}

func mapEnv(m map[string]string) lookupFunc {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestEnvThroughCommands runs commands with the process environment: the
// admin commands reach a real database named by the old DATABASE_URL or
// by GATEWAY_DATABASE_URL.
func TestEnvThroughCommands(t *testing.T) {
	db := storetest.NewDatabase(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"old name", map[string]string{"DATABASE_URL": db}, nil},
		{"prefix wins", map[string]string{"GATEWAY_DATABASE_URL": db, "DATABASE_URL": "postgres://nowhere.invalid/x"}, nil},
		{"flag wins", map[string]string{"GATEWAY_DATABASE_URL": "postgres://nowhere.invalid/x"}, []string{"-database-url", db}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unsetEnv(t, "DATABASE_URL", "GATEWAY_DATABASE_URL", "GATEWAY_NAME")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			t.Setenv("GATEWAY_NAME", "from-env-"+strings.ReplaceAll(tc.name, " ", "-"))
			out, errOut, code := runCLI(t, append([]string{"admin", "create-organization"}, tc.args...)...)
			require.Equal(t, 0, code, errOut)
			require.Regexp(t, `^[0-9a-f-]{36}\n$`, out)
		})
	}
	// migrate version reads it as well.
	unsetEnv(t, "GATEWAY_DATABASE_URL")
	t.Setenv("DATABASE_URL", db)
	out, errOut, code := runCLI(t, "migrate", "version")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "database at version")
}

func TestMissingSettingsAreUsageErrors(t *testing.T) {
	unsetEnv(t, "DATABASE_URL", "GATEWAY_DATABASE_URL", "GATEWAY_URL", "GATEWAY_TOKEN", "GATEWAY_ENV")
	for _, args := range [][]string{
		{"migrate", "up"},
		{"admin", "create-organization", "-name", "x"},
		{"serve"},
		{"ctl", "orgs", "list"},
	} {
		_, errOut, code := runCLI(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serv"}, `did you mean "gateway serve"?`},
		{[]string{"migrat", "up"}, `did you mean "gateway migrate"?`},
		{[]string{"admin", "bootstrap"}, `did you mean "gateway admin bootstrap-token"?`},
		{[]string{"ctl", "tasks", "lsit"}, `did you mean "gateway ctl tasks list"?`},
		{[]string{"ctl", "org", "list"}, `did you mean "gateway ctl orgs"?`},
		{[]string{"ctl", "workers", "frobnicate"}, `unknown command "gateway ctl workers frobnicate"`},
	} {
		_, errOut, code := runCLI(t, tc.args...)
		require.Equal(t, 2, code, "%v", tc.args)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
	}
	_, errOut, _ := runCLI(t, "ctl", "workers", "frobnicate")
	require.NotContains(t, errOut, "did you mean")

	require.Equal(t, "list", suggest("lsit", []string{"list", "get"}))
	require.Equal(t, "", suggest("zzz", []string{"list", "get"}))
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	writeVersion(&b, buildinfo.Info{GoVersion: "go1.26.1", Module: "github.com/worker-gateway/gateway", Version: "v1.2.3",
		Revision: "8b25f3d0", Modified: true, Time: "2026-12-01T22:00:00Z", Tags: "devstack"})
	require.Equal(t, ""+
		"gateway v1.2.3\n"+
		"module    github.com/worker-gateway/gateway\n"+
		"revision  8b25f3d0 (modified)\n"+
		"committed 2026-12-01T22:00:00Z\n"+
		"tags      devstack\n"+
		"go        go1.26.1\n", b.String())

	out, errOut, code := runCLI(t, "version")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^gateway \S+\nmodule    \S+\nrevision  \S+.*\n(?s:.*)go        go1\.\d+`, out)
}

// TestVersionStamped builds the two binaries as a release build does, the
// version and revision given to the linker (an image's build context has
// no .git), and reads them back from every place that shows them.
func TestVersionStamped(t *testing.T) {
	t.Parallel()
	const version, revision = "v9.8.7-1-gdeadbee", "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef"
	ldflags := "-X github.com/worker-gateway/gateway/internal/buildinfo.Version=" + version +
		" -X github.com/worker-gateway/gateway/internal/buildinfo.Revision=" + revision
	dir := t.TempDir()
	for _, pkg := range []string{".", "../../../workerclient/cmd/worker"} {
		out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", dir, pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		out, err := exec.Command(filepath.Join(dir, "gateway"), args...).CombinedOutput()
		require.NoError(t, err, "gateway %v: %s", args, out)
		require.Contains(t, string(out), "gateway "+version+"\n", "gateway %v", args)
		require.Contains(t, string(out), "revision  "+revision+"\n", "gateway %v", args)
	}
	out, err := exec.Command(filepath.Join(dir, "worker"), "-version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), version+" revision "+revision)
}

func TestTokenScopesValidated(t *testing.T) {
	t.Parallel()
	_, errOut, code := runCLI(t, "ctl", "tokens", "create", "--url", "https://127.0.0.1:1", "--token", "t",
		"--name", "ci", "--scopes", "producer,writer")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown token scope "writer": scopes are admin, producer, reader`)

	// admin names it before connecting to any database.
	_, errOut, code = runCLI(t, "admin", "bootstrap-token", "-scopes", "admin,root", "-database-url", "postgres://nowhere.invalid/x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown token scope "root"`)

	scopes, err := parseScopes(" admin, reader ,")
	require.NoError(t, err)
	require.Equal(t, []string{"admin", "reader"}, scopes)
	_, err = parseScopes(",")
	require.ErrorContains(t, err, "no token scope")
}
