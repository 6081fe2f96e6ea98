package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
)

// These tests set environment variables (t.Setenv): not parallel.

// clearEnv unsets every variable the worker reads, for the test.
func clearEnv(t *testing.T) {
	t.Helper()
	fs := newFlagSet(&options{}, &bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) {
		for _, name := range envNames(f.Name) {
			t.Setenv(name, "")
			require.NoError(t, os.Unsetenv(name))
		}
	})
	for _, name := range []string{"WORKER_ENV", "WORKER_CHECK", "WORKER_VERSION"} {
		t.Setenv(name, "")
	}
}

func TestFlagsComeFromTheEnvironment(t *testing.T) {
	clearEnv(t)
	t.Setenv("WORKER_GATEWAY", "https://gw.example:8443")
	t.Setenv("WORKER_SLOTS", "7")
	t.Setenv("WORKER_DRAIN_TIMEOUT", "5s")
	t.Setenv("WORKER_STATE_DIR", "/var/lib/w")
	o, err := parse(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "https://gw.example:8443", o.gateway)
	assert.Equal(t, 7, o.slots)
	assert.Equal(t, 5*time.Second, o.drain)
	assert.Equal(t, "/var/lib/w", o.stateDir)
	assert.Equal(t, 20, o.wait, "defaults stay")
	assert.False(t, o.explicitEnrollment, "from the environment, not the command line")
}

func TestOlderEnvironmentNamesStillWork(t *testing.T) {
	clearEnv(t)
	t.Setenv("GATEWAY_URL", "https://old.example")
	t.Setenv("CA_CERT", "/old/ca.pem")
	t.Setenv("WORKER_ENROLLMENT_TOKEN", "wge_old")
	t.Setenv("WORKER_WAIT_SECONDS", "9")
	t.Setenv("LOG_LEVEL", "debug")
	t.Setenv("WORKER_CERT", "/old/worker.pem") // the old name is the new one
	o, err := parse(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, options{gateway: "https://old.example", ca: "/old/ca.pem", enrollToken: "wge_old", wait: 9,
		level: "debug", cert: "/old/worker.pem", slots: 4, drain: 30 * time.Second}, *o)

	// The WORKER_ name wins over an alias, and the command line over both.
	t.Setenv("WORKER_GATEWAY", "https://new.example")
	t.Setenv("WORKER_WAIT", "11")
	o, err = parse([]string{"-wait", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "https://new.example", o.gateway)
	assert.Equal(t, 3, o.wait)
}

func TestBadEnvironmentValuesAreErrors(t *testing.T) {
	clearEnv(t)
	t.Setenv("WORKER_SLOTS", "many")
	_, err := parse(nil, &bytes.Buffer{})
	require.ErrorContains(t, err, "WORKER_SLOTS")
	clearEnv(t)
	t.Setenv("WORKER_WAIT_SECONDS", "long")
	_, err = parse(nil, &bytes.Buffer{})
	require.ErrorContains(t, err, "WORKER_WAIT_SECONDS")
}

func TestCommandLineOnlyFlagsIgnoreTheEnvironment(t *testing.T) {
	clearEnv(t)
	t.Setenv("WORKER_VERSION", "1.2.3") // a variable that means something else here
	t.Setenv("WORKER_CHECK", "true")
	t.Setenv("WORKER_ENV", "production")
	o, err := parse(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.False(t, o.version)
	assert.False(t, o.check)
	assert.Empty(t, o.envFile)
}

func TestEnvFile(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(path, []byte(`# written by make run
export GATEWAY_URL=https://127.0.0.1:8443
export GATEWAY_TOKEN='not a worker setting'
CA_CERT="/dev/pki/ca.pem"
WORKER_CERT=/dev/pki/worker.pem
WORKER_KEY=/dev/pki/worker-key.pem
WORKER_SLOTS=2
WORKER_ID=0193f1a2-9b22-7c3d-9e4f-2a3b4c5d6e7f
DATABASE_URL=postgres://x
WORKER_CHECK=true
`), 0o600))
	t.Setenv("WORKER_SLOTS", "6") // the environment wins over the file
	o, err := parse([]string{"-env", path, "-key", "/cli/key.pem"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.0.1:8443", o.gateway)
	assert.Equal(t, "/dev/pki/ca.pem", o.ca)
	assert.Equal(t, "/dev/pki/worker.pem", o.cert)
	assert.Equal(t, "/cli/key.pem", o.key, "the command line wins over the file")
	assert.Equal(t, 6, o.slots)
	assert.False(t, o.check, "the file sets no command-line-only flag")

	require.NoError(t, os.WriteFile(path, []byte("WORKER_SLOTS\n"), 0o600))
	_, err = parse([]string{"-env", path}, &bytes.Buffer{})
	require.ErrorContains(t, err, "want KEY=value")
	_, err = parse([]string{"-env", filepath.Join(t.TempDir(), "missing")}, &bytes.Buffer{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestHelpListsEveryFlagWithItsVariables(t *testing.T) {
	clearEnv(t)
	var out, errOut bytes.Buffer
	err := run([]string{"-h"}, &out, &errOut)
	require.ErrorIs(t, err, flag.ErrHelp)
	help := errOut.String()
	for _, want := range []string{
		"-gateway URL", "env: WORKER_GATEWAY, GATEWAY_URL", "env: WORKER_CA, CA_CERT",
		"env: WORKER_ENROLL_TOKEN, WORKER_ENROLLMENT_TOKEN", "env: WORKER_WAIT, WORKER_WAIT_SECONDS",
		"env: WORKER_LOG_LEVEL, LOG_LEVEL", "env: WORKER_SLOTS", "env: WORKER_CAPABILITIES",
		"-check", "-version", "-env file",
	} {
		assert.Contains(t, help, want)
	}
	assert.Equal(t, 3, strings.Count(help, "command line only"), "-env, -check, -version")
}

func TestVersion(t *testing.T) {
	clearEnv(t)
	var out bytes.Buffer
	require.NoError(t, run([]string{"-version"}, &out, &bytes.Buffer{}), "no gateway needed")
	assert.Contains(t, out.String(), "github.com/worker-gateway/gateway")
	assert.Contains(t, out.String(), "go1.")
}

func TestCapabilities(t *testing.T) {
	caps, err := capabilities(`{"region": "eu"}`)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"region": "eu", "plugins": pluginNames()}, caps)
	caps, err = capabilities("")
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"plugins": pluginNames()}, caps)
	for _, bad := range []string{`[1]`, `null`, `{"plugins": ["nmap"]}`, `{`} {
		_, err := capabilities(bad)
		assert.Error(t, err, bad)
	}
}

func TestIdentityChoice(t *testing.T) {
	clearEnv(t)
	t.Setenv("WORKER_STATE_DIR", "/var/lib/w") // from the environment: ignored with -cert
	o, err := parse([]string{"-cert", "c.pem", "-key", "k.pem"}, &bytes.Buffer{})
	require.NoError(t, err)
	o2 := *o
	o2.explicitEnrollment = true
	assert.Error(t, identity(&o2, new(workerclient.Config)), "explicit -state-dir with -cert is an error")
	cfg := new(workerclient.Config)
	require.NoError(t, identity(o, cfg))
	assert.Equal(t, "c.pem", cfg.CertFile)
	assert.Empty(t, cfg.StateDir)

	// A certificate from the environment gives way to -state-dir on the
	// command line.
	clearEnv(t)
	t.Setenv("WORKER_CERT", "c.pem")
	t.Setenv("WORKER_KEY", "k.pem")
	o, err = parse([]string{"-state-dir", "/var/lib/w", "-enroll-token", "wge_x"}, &bytes.Buffer{})
	require.NoError(t, err)
	cfg = new(workerclient.Config)
	require.NoError(t, identity(o, cfg))
	assert.Empty(t, cfg.CertFile)
	assert.Equal(t, "/var/lib/w", cfg.StateDir)
	assert.Equal(t, "wge_x", cfg.EnrollmentToken)
}
