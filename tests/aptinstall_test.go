package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// aptMu serialises installs: apt-get holds a lock of its own and would
// refuse a second one running at once.
var aptMu sync.Mutex

// aptInstall installs Debian packages, as a fresh machine's `make test`
// must: a tool a test needs is installed rather than the test skipped.
// Only root on a machine with apt-get can; others get an error saying why.
func aptInstall(packages ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root, so cannot install " + strings.Join(packages, ", "))
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("apt-get is not available to install " + strings.Join(packages, ", "))
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "sh", "-c",
		"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "+strings.Join(packages, " "))
	if out, err := install.CombinedOutput(); err != nil {
		return errors.New("apt-get install " + strings.Join(packages, " ") + ": " + err.Error() + "\n" + truncate(string(out), 2000))
	}
	return nil
}

// requireTools makes sure the commands a test runs exist, installing the
// Debian packages of the same names when they are missing (bash, curl, jq,
// python3 are each their own package); the test is skipped only when they
// cannot be installed.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	if err := aptInstall(missing...); err != nil {
		t.Skipf("%s not installed: %v", strings.Join(missing, ", "), err)
	}
	for _, tool := range missing {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("apt-get installed %s but it is not on PATH", tool)
		}
	}
}
