package operations

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// exposition is one scrape of /metrics: every family by its # TYPE, and
// every sample by its series.
type exposition struct {
	types   map[string]string // family → counter, gauge, histogram…
	samples map[string]float64
}

// has reports whether a name a query may use is exposed: a family, or one
// of a histogram's _bucket, _sum and _count series.
func (e exposition) has(name string) bool {
	if _, ok := e.types[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && (e.types[base] == "histogram" || e.types[base] == "summary") {
			return true
		}
	}
	return false
}

func scrapeExposition(t *testing.T, g *harness.Gateway) exposition {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	res, err := g.HTTPClient(nil).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	e := exposition{types: map[string]string{}, samples: parseSamples(t, string(body))}
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			e.types[name] = kind
		}
	}
	return e
}

// busyGateway is a gateway that has served every kind of request the
// metrics describe: a long-poll woken by a task, a fenced heartbeat, a log
// follow, control-plane calls. Families with labels appear only then.
func busyGateway(t *testing.T) (*harness.Gateway, exposition) {
	t.Helper()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	leased := harness.LeaseAsync(w.Client, apiclient.LeaseRequest{MaxTasks: harness.Ptr(1), WaitSeconds: harness.Ptr(10)})
	harness.WaitFor(t, 10*time.Second, "a waiting poll", func() bool {
		return scrape(t, g, g.AdminToken)["gateway_waiting_polls"] == 1
	})
	task := g.CreateTask(t, org, harness.TaskSpec{})
	leases := <-leased
	require.Len(t, leases, 1)
	stale, err := w.Client.HeartbeatAttemptWithResponse(context.Background(), leases[0].AttemptId,
		&apiclient.HeartbeatAttemptParams{LeaseToken: strings.Repeat("0", len(leases[0].LeaseToken))})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, stale.StatusCode(), string(stale.Body))
	follow, wait := true, 1
	logs, err := g.Control.GetTaskLogsWithResponse(context.Background(), task, &apiclient.GetTaskLogsParams{Follow: &follow, WaitSeconds: &wait})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, logs.StatusCode(), string(logs.Body))
	// A second task waits: the worker's one slot is taken (a queue age).
	g.CreateTask(t, org, harness.TaskSpec{})
	return g, scrapeExposition(t, g)
}

func TestMetricsRequestDurationsBuildAndPool(t *testing.T) {
	t.Parallel()
	_, e := busyGateway(t)
	m := e.samples
	require.Equal(t, "histogram", e.types["gateway_http_request_duration_seconds"])
	require.Equal(t, "histogram", e.types["gateway_http_long_poll_duration_seconds"])
	// The waiting poll and the follow are long-polls, timed apart.
	require.Equal(t, 1.0, m[`gateway_http_long_poll_duration_seconds_count{route="POST /v1/leases"}`])
	require.Equal(t, 1.0, m[`gateway_http_long_poll_duration_seconds_count{route="GET /v1/tasks/{task_id}/logs"}`])
	require.NotContains(t, m, `gateway_http_request_duration_seconds_count{route="POST /v1/leases"}`)
	require.Equal(t, 2.0, m[`gateway_http_request_duration_seconds_count{route="POST /v1/tasks"}`], "the leased task and the one left waiting")
	require.Equal(t, 1.0, m[`gateway_http_request_duration_seconds_count{route="POST /v1/attempts/{attempt_id}/heartbeat"}`])

	var build string
	for series, v := range m {
		if strings.HasPrefix(series, "gateway_build_info{") {
			build = series
			require.Equal(t, 1.0, v)
		}
	}
	require.Contains(t, build, `go_version="`+runtime.Version()+`"`)
	require.Regexp(t, `version="[^"]+"`, build)
	require.Regexp(t, `revision="[^"]+"`, build)

	require.Positive(t, m["gateway_db_pool_acquires_total"])
	require.Positive(t, m["gateway_db_pool_total_conns"])
	require.Positive(t, m["gateway_db_pool_max_conns"])
	require.Contains(t, m, "gateway_db_pool_acquired_conns")
	require.Contains(t, m, "gateway_db_pool_idle_conns")
	require.Contains(t, m, "gateway_db_pool_acquire_seconds_total")
	require.Contains(t, m, "gateway_db_pool_empty_acquires_total")
	require.Contains(t, m, "gateway_db_pool_canceled_acquires_total")
}

// readmeMetrics are the metric names of the README's metrics reference
// table (rows beginning with | `gateway_…`).
func readmeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRootDir(t), "README.md"))
	require.NoError(t, err)
	names := map[string]bool{}
	row := regexp.MustCompile("^\\| `(gateway_[a-z0-9_]+)` \\|")
	for line := range strings.SplitSeq(string(raw), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			names[m[1]] = true
		}
	}
	require.NotEmpty(t, names, "README.md has a metrics reference table")
	return names
}

func moduleRootDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// TestMetricsReferenceDashboardAndAlertsMatchTheGateway keeps the docs from
// rotting: every gateway_* family a busy gateway exposes is in the README's
// table (and the table names nothing it does not expose), and every metric
// the Grafana dashboard and the Prometheus alert rules query is exposed.
func TestMetricsReferenceDashboardAndAlertsMatchTheGateway(t *testing.T) {
	t.Parallel()
	_, e := busyGateway(t)
	documented := readmeMetrics(t)
	for name := range e.types {
		if strings.HasPrefix(name, "gateway_") {
			require.True(t, documented[name], "README.md's metrics table lacks %s", name)
		}
	}
	for name := range documented {
		require.Contains(t, e.types, name, "README.md's metrics table names %s, which /metrics does not expose", name)
	}

	var exprs []string
	collectExprs(dashboard(t), &exprs)
	require.NotEmpty(t, exprs)
	for _, rule := range alertRules(t) {
		exprs = append(exprs, rule.Expr)
	}
	metricName := regexp.MustCompile(`\b(?:gateway|go|process)_[a-z0-9_]+`)
	for _, expr := range exprs {
		names := metricName.FindAllString(expr, -1)
		require.NotEmpty(t, names, "a query names a metric: %s", expr)
		for _, name := range names {
			require.True(t, e.has(name), "%s is queried but /metrics does not expose it (in %s)", name, expr)
		}
	}
}

func dashboard(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRootDir(t), "scripts", "grafana", "worker-gateway.json"))
	require.NoError(t, err)
	var d map[string]any
	require.NoError(t, json.Unmarshal(raw, &d), "the dashboard is valid JSON")
	return d
}

// alertRule is one rule of deploy/prometheus/alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRootDir(t), "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// TestAlertsLinkToTheirRunbooks: every alert's runbook_url names a section
// of docs/runbooks.md, and that section says what the alert means, how to
// confirm it and what to do.
func TestAlertsLinkToTheirRunbooks(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(moduleRootDir(t), "docs", "runbooks.md"))
	require.NoError(t, err)
	sections := map[string]string{}
	var current string
	for line := range strings.SplitSeq(string(raw), "\n") {
		if heading, ok := strings.CutPrefix(line, "## "); ok {
			current = strings.ToLower(strings.TrimSpace(heading))
			continue
		}
		if current != "" {
			sections[current] += line + "\n"
		}
	}
	for _, rule := range alertRules(t) {
		url := rule.Annotations["runbook_url"]
		_, anchor, ok := strings.Cut(url, "docs/runbooks.md#")
		require.True(t, ok, "alert %s links to docs/runbooks.md: %q", rule.Alert, url)
		require.Equal(t, strings.ToLower(rule.Alert), anchor, "alert %s links to its own section", rule.Alert)
		body, ok := sections[anchor]
		require.True(t, ok, "docs/runbooks.md has a section for %s", rule.Alert)
		for _, part := range []string{"**Means.**", "**Confirm.**", "**Do.**"} {
			require.Contains(t, body, part, "the runbook of %s", rule.Alert)
		}
		require.NotEmpty(t, rule.Annotations["summary"], rule.Alert)
	}
}

// TestDashboardNeverMixesSecondsAndCounts: a panel's queries are all
// durations (a _seconds histogram, gauge or counter, or time()) in a panel
// whose unit is seconds, or none are; a count on a seconds axis (or the
// other way round) reads wrong.
func TestDashboardNeverMixesSecondsAndCounts(t *testing.T) {
	t.Parallel()
	seconds := regexp.MustCompile(`_seconds(_bucket|_total)?\b|\btime\(\)`)
	panels, ok := dashboard(t)["panels"].([]any)
	require.True(t, ok)
	for _, p := range panels {
		panel := p.(map[string]any)
		title := panel["title"].(string)
		unit := panel["fieldConfig"].(map[string]any)["defaults"].(map[string]any)["unit"]
		var exprs []string
		collectExprs(panel, &exprs)
		var durations int
		for _, expr := range exprs {
			if seconds.MatchString(expr) {
				durations++
			}
		}
		switch durations {
		case 0:
			require.NotEqual(t, "s", unit, "panel %q shows counts on a seconds axis", title)
		case len(exprs):
			require.Equal(t, "s", unit, "panel %q shows durations on an axis that is not seconds", title)
		default:
			require.Fail(t, "seconds and counts on one axis", "panel %q mixes them: %q", title, exprs)
		}
	}
}

// collectExprs gathers every "expr" string of a dashboard, at any depth.
func collectExprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			collectExprs(x, out)
		}
	case []any:
		for _, x := range v {
			collectExprs(x, out)
		}
	}
}
