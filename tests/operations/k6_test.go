package operations

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestK6ScriptParses checks the k6 example is valid JavaScript (k6 itself is
// AGPL and never a dependency): node parses a copy as an ES module.
func TestK6ScriptParses(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the k6 script parse check needs it")
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "scripts", "k6", "lease-cycle.js"))
	require.NoError(t, err)
	copyPath := filepath.Join(t.TempDir(), "lease-cycle.mjs")
	require.NoError(t, os.WriteFile(copyPath, src, 0o644))
	out, err := exec.Command(node, "--check", copyPath).CombinedOutput()
	require.NoError(t, err, string(out))
}
