package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Docker cannot run here: these tests read the container files and run the
// command lines they give the gateway binary through the real CLI.

// gatewayArgs is a health check's command line as the gateway binary sees
// it, or nil when the command is not the gateway's.
func gatewayArgs(cmd []string) []string {
	if len(cmd) > 0 && (cmd[0] == "CMD" || cmd[0] == "CMD-SHELL") {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 || filepath.Base(cmd[0]) != "gateway" {
		return nil
	}
	return cmd[1:]
}

// requireKnownCommandLine checks that args name a real command and only its
// flags: the command line with -h appended prints that command's usage.
func requireKnownCommandLine(t *testing.T, where string, args []string) {
	t.Helper()
	out, errOut, code := runCLI(t, append(slices.Clone(args), "-h")...)
	require.Equal(t, 0, code, "%s: gateway %s: %s", where, strings.Join(args, " "), errOut)
	require.Contains(t, out, "USAGE\n  gateway "+args[0], where)
}

func TestComposeHealthChecksRunRealCommands(t *testing.T) {
	raw, err := os.ReadFile("../../../scripts/docker/docker-compose.yml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			DependsOn   yaml.Node `yaml:"depends_on"`
			Healthcheck *struct {
				Test    []string `yaml:"test"`
				Disable bool     `yaml:"disable"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose))

	gw, ok := compose.Services["gateway"]
	require.True(t, ok, "a gateway service")
	require.NotNil(t, gw.Healthcheck, "the gateway service has a health check")
	args := gatewayArgs(gw.Healthcheck.Test)
	require.NotEmpty(t, args, "the gateway's health check runs the gateway binary: %v", gw.Healthcheck.Test)
	require.Equal(t, "healthcheck", args[0])
	requireKnownCommandLine(t, "compose gateway healthcheck", args)

	pg := compose.Services["postgres"]
	require.NotNil(t, pg.Healthcheck)
	require.Contains(t, strings.Join(pg.Healthcheck.Test, " "), "pg_isready")

	// Whoever waits for the gateway or the database waits for it healthy.
	for name, svc := range compose.Services {
		var deps map[string]struct {
			Condition string `yaml:"condition"`
		}
		if svc.DependsOn.Kind == 0 {
			continue
		}
		require.NoError(t, svc.DependsOn.Decode(&deps), "%s: depends_on with conditions", name)
		for dep, d := range deps {
			if dep == "gateway" || dep == "postgres" {
				require.Equal(t, "service_healthy", d.Condition, "%s depends on %s", name, dep)
			}
		}
	}
}

func TestDockerfileHealthcheckRunsARealCommand(t *testing.T) {
	f, err := os.Open("../../../Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	// HEALTHCHECK [options] CMD ["exec", "form"], possibly continued.
	var text strings.Builder
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "HEALTHCHECK") {
			in = true
		}
		if in {
			text.WriteString(strings.TrimSuffix(line, "\\"))
			if !strings.HasSuffix(line, "\\") {
				break
			}
		}
	}
	require.NoError(t, sc.Err())
	m := regexp.MustCompile(`\bCMD\s+(\[.*\])`).FindStringSubmatch(text.String())
	require.NotNil(t, m, "a HEALTHCHECK ... CMD [exec form] in the Dockerfile: %q", text.String())
	var cmd []string
	require.NoError(t, json.Unmarshal([]byte(m[1]), &cmd))
	args := gatewayArgs(cmd)
	require.NotEmpty(t, args, "the image's health check runs the gateway binary: %v", cmd)
	requireKnownCommandLine(t, "Dockerfile HEALTHCHECK", args)
}

func TestDockerignoreKeepsSecretsOutOfTheBuild(t *testing.T) {
	raw, err := os.ReadFile("../../../.dockerignore")
	require.NoError(t, err)
	var patterns []string
	for line := range strings.SplitSeq(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
		}
	}
	for _, want := range []string{".dev", ".git", "**/*.pem", "**/*key*"} {
		require.Contains(t, patterns, want, ".dockerignore excludes %s", want)
	}
	// The exclusion of key files must not take the sources with it.
	require.Contains(t, patterns, "!**/*.go")
}
