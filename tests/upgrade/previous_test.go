package upgrade

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// previousRelease is the release this one upgrades from. No release is
// tagged yet: it is the last commit before the first expand/contract
// migration. Once a tag exists, name it here.
const previousRelease = "b316924"

type release struct{ gateway, worker string }

// buildPreviousRelease builds previousRelease's gateway and worker, offline:
// its tree from git (git archive: nothing is registered in the repository),
// built with this module's go.mod and go.sum, whose dependencies the module
// cache holds (the previous release pinned patch releases before them).
func buildPreviousRelease(t *testing.T) release {
	t.Helper()
	root := moduleRoot(t)
	src := t.TempDir()
	archive := exec.Command("sh", "-c", "git -C \"$1\" archive \"$2\" | tar -x -C \"$3\"", "sh", root, previousRelease, src)
	out, err := archive.CombinedOutput()
	require.NoError(t, err, "git archive %s: %s", previousRelease, out)
	for _, f := range []string{"go.mod", "go.sum"} {
		body, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(src, f), body, 0o644))
	}
	bin := t.TempDir()
	// -trimpath: the build cache then serves the next run, whose copy of
	// the tree is in another directory.
	build := exec.Command("go", "build", "-trimpath", "-o", bin+"/", "./server/cmd/gateway", "./workerclient/cmd/worker")
	build.Dir = src
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "build %s: %s", previousRelease, out)
	return release{gateway: filepath.Join(bin, "gateway"), worker: filepath.Join(bin, "worker")}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// runBinary runs a gateway command to its end.
func runBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := runGateway(bin, args...)
	require.NoError(t, err, "%s %v: %s", bin, args, out)
	return string(out)
}

// runGateway runs a gateway command to its end and returns its output.
func runGateway(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).CombinedOutput()
}
