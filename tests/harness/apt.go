package harness

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

// AptInstall installs Debian packages, as a fresh machine's `make test`
// must: a tool a test needs is installed rather than the test skipped.
// Only root on a machine with apt-get can; others get an error saying why.
func AptInstall(packages ...string) error {
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
		s := string(out)
		if len(s) > 2000 {
			s = s[len(s)-2000:]
		}
		return errors.New("apt-get install " + strings.Join(packages, " ") + ": " + err.Error() + "\n" + s)
	}
	return nil
}

// RequireTools makes sure the commands a test runs exist, installing the
// Debian packages of the same names when they are missing (bash, curl, jq,
// python3 are each their own package); the test is skipped only when they
// cannot be installed.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	packages := map[string]string{}
	for _, tool := range tools {
		packages[tool] = tool
	}
	RequirePackages(t, packages)
}

// RequirePackages makes sure Debian packages are installed: packages maps
// what a test needs — a command on PATH, or an absolute path the package
// ships — to its package. Missing ones are installed with apt-get (as
// root); the test is skipped, saying why, when they cannot be.
func RequirePackages(t testing.TB, packages map[string]string) {
	t.Helper()
	var missing, names []string
	for need, pkg := range packages {
		if !present(need) {
			missing = append(missing, need)
			names = append(names, pkg)
		}
	}
	if len(missing) == 0 {
		return
	}
	if err := AptInstall(names...); err != nil {
		t.Skipf("%s not installed: %v", strings.Join(missing, ", "), err)
	}
	for _, need := range missing {
		if !present(need) {
			t.Fatalf("apt-get installed %s but %s is still missing", packages[need], need)
		}
	}
}

// present reports whether a command is on PATH, or a path exists.
func present(need string) bool {
	if strings.HasPrefix(need, "/") {
		_, err := os.Stat(need)
		return err == nil
	}
	_, err := exec.LookPath(need)
	return err == nil
}
