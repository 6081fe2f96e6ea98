// Command vulndb builds a Go vulnerability database, in the layout
// govulncheck reads with -db file:///dir, from the golang.org/x/vulndb
// module as the Go module proxy serves it: the proxy is reachable where the
// hosted database is not. It prints the database's directory.
//
// The module holds every advisory as OSV JSON (data/osv/<ID>.json). The
// database is that and three indexes (go.dev/security/vuln/database#api):
//
//	index/db.json       {"modified": time}
//	index/modules.json  [{"path", "vulns": [{"id", "modified", "fixed"}]}]
//	index/vulns.json    [{"id", "modified", "aliases"}]
//	ID/<ID>.json        the OSV entry
//
// Databases are cached as <cache>/<module version>, so a run whose module
// version was built before costs one proxy query.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

const modulePath = "golang.org/x/vulndb"

func main() {
	cache := flag.String("cache", ".dev/vulndb", "directory holding one database per vulndb version")
	version := flag.String("version", "latest", "version of "+modulePath+" to build from (a version or a query such as latest)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("vulndb: ")
	dir, err := ensure(*cache, *version)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dir)
}

// download is what `go mod download -json` says of a module version.
type download struct {
	Version string
	Dir     string
	Info    string
	Error   string
}

// ensure returns the directory of the database for the version, building
// it when the cache lacks it. A build is written beside its final name and
// renamed into place, so an interrupted build is never taken for a database.
func ensure(cache, query string) (string, error) {
	// -json prints the module's error, if any, in the JSON (and exits 1).
	out, runErr := exec.Command("go", "mod", "download", "-json", modulePath+"@"+query).Output()
	var d download
	if err := json.Unmarshal(out, &d); err != nil || d.Error != "" || runErr != nil {
		return "", fmt.Errorf("go mod download %s@%s: %s: %w", modulePath, query, d.Error, errors.Join(runErr, err))
	}
	dir := filepath.Join(cache, d.Version)
	if _, err := os.Stat(filepath.Join(dir, "index", "modules.json")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	modified, err := commitTime(d.Info)
	if err != nil {
		return "", err
	}
	if err := build(filepath.Join(d.Dir, "data", "osv"), tmp, modified); err != nil {
		return "", fmt.Errorf("build from %s: %w", d.Dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// Databases of older versions are superseded.
	old, _ := filepath.Glob(filepath.Join(cache, "v*"))
	for _, o := range old {
		if o != dir {
			_ = os.RemoveAll(o)
		}
	}
	return dir, nil
}

// commitTime is the time of the vulndb commit the version names. The OSV
// files in the module carry no modification times (the hosted database
// takes them from git history), so it stands for the database's.
func commitTime(infoFile string) (string, error) {
	b, err := os.ReadFile(infoFile)
	if err != nil {
		return "", err
	}
	var info struct{ Time time.Time }
	if err := json.Unmarshal(b, &info); err != nil {
		return "", fmt.Errorf("%s: %w", infoFile, err)
	}
	return info.Time.UTC().Format(time.RFC3339), nil
}

// event is one step of an OSV range: a version where the vulnerability
// was introduced or fixed.
type event struct {
	Introduced string `json:"introduced"`
	Fixed      string `json:"fixed"`
}

// entry is the part of an OSV entry the indexes need.
type entry struct {
	ID       string   `json:"id"`
	Modified string   `json:"modified"`
	Aliases  []string `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Type   string  `json:"type"`
			Events []event `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string `json:"id"`
	Modified string `json:"modified"`
	Fixed    string `json:"fixed,omitempty"`
}

type module struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vuln struct {
	ID       string   `json:"id"`
	Modified string   `json:"modified"`
	Aliases  []string `json:"aliases,omitempty"`
}

// build writes the database of the OSV files in src to dst.
func build(src, dst, modified string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no OSV entries in %s", src)
	}
	if err := os.MkdirAll(filepath.Join(dst, "ID"), 0o755); err != nil {
		return err
	}
	modules := map[string]*module{}
	var vulns []vuln
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e entry
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" || filepath.Base(f) != e.ID+".json" {
			return fmt.Errorf("%s: entry id %q does not match its file name", f, e.ID)
		}
		if err := os.WriteFile(filepath.Join(dst, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return err
		}
		vulns = append(vulns, vuln{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		for _, a := range e.Affected {
			m := modules[a.Package.Name]
			if m == nil {
				m = &module{Path: a.Package.Name}
				modules[a.Package.Name] = m
			}
			v := moduleVuln{ID: e.ID, Modified: e.Modified}
			for _, r := range a.Ranges {
				if r.Type != "SEMVER" {
					continue
				}
				v.Fixed = latestFixed(v.Fixed, r.Events)
			}
			m.Vulns = append(m.Vulns, v)
		}
	}
	slices.SortFunc(vulns, func(a, b vuln) int { return strings.Compare(a.ID, b.ID) })
	var mods []*module
	for _, m := range modules {
		slices.SortFunc(m.Vulns, func(a, b moduleVuln) int { return strings.Compare(a.ID, b.ID) })
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b *module) int { return strings.Compare(a.Path, b.Path) })
	if err := os.MkdirAll(filepath.Join(dst, "index"), 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{
		"db.json":      map[string]string{"modified": modified},
		"vulns.json":   vulns,
		"modules.json": mods,
	} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, "index", name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// latestFixed is the index's "fixed" of a module: the latest fixed version
// over its SEMVER ranges, or none when the vulnerability is introduced
// again after it (as x/vulndb's osvutils.LatestFixed decides). Versions are
// written without the leading "v".
func latestFixed(latest string, events []event) string {
	before := func(a, b string) bool { return a == "" || semver.Compare("v"+a, "v"+b) < 0 }
	for _, ev := range events {
		if ev.Fixed != "" && before(latest, ev.Fixed) {
			latest = ev.Fixed
		}
	}
	for _, ev := range events {
		if ev.Introduced != "" && ev.Introduced != "0" && before(latest, ev.Introduced) {
			return ""
		}
	}
	return latest
}
