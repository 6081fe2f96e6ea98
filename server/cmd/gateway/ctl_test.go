package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func ptr[T any](v T) *T { return &v }

func TestFormatProblem(t *testing.T) {
	t.Parallel()
	p := apiclient.Problem{Title: "Conflict", Code: "task-finished", Status: 409,
		Detail: ptr("The task already finished."), RequestId: ptr("b7d1c2a4e5f60718")}
	require.Equal(t, "Conflict (task-finished): The task already finished. [request b7d1c2a4e5f60718]", formatProblem(p))

	p.Detail, p.RequestId = nil, nil
	require.Equal(t, "Conflict (task-finished)", formatProblem(p))
}

func TestProblemErrorDecodesProblemJSON(t *testing.T) {
	t.Parallel()
	body := `{"type":"about:blank","title":"Not found","status":404,"code":"not-found","detail":"No such worker.","request_id":"r1"}`
	err := problemError(http.StatusNotFound, "header-id", []byte(body))
	require.EqualError(t, err, "Not found (not-found): No such worker. [request r1]")
	var pe *ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 404, pe.Problem.Status)

	// Without a request_id in the body, the X-Request-Id header stands in.
	body = `{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthenticated"}`
	require.EqualError(t, problemError(401, "h2", []byte(body)), "Unauthorized (unauthenticated) [request h2]")
}

func TestProblemErrorForNonProblemBody(t *testing.T) {
	t.Parallel()
	err := problemError(http.StatusBadGateway, "", []byte("<html>\n  <body>bad gateway</body>\n</html>\n"))
	require.EqualError(t, err, "Bad Gateway (HTTP 502): <html> <body>bad gateway</body> </html>")
	require.EqualError(t, problemError(http.StatusServiceUnavailable, "x", nil), "Service Unavailable (HTTP 503) [request x]")
}

var (
	id1     = uuid.MustParse("11111111-1111-1111-1111-111111111111")
	id2     = uuid.MustParse("22222222-2222-2222-2222-222222222222")
	created = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
)

func TestWriteWorkerTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	writeWorkerTable(&b, []apiclient.Worker{
		{Id: id1, Name: "scanner-eu-1", WorkerType: "scanner", Online: true, Enabled: true,
			ActiveAttempts: 2, MaxConcurrentTasks: 4, OrganizationIds: []uuid.UUID{id2}},
		{Id: id2, Name: "old", WorkerType: "ai", Revoked: true, MaxConcurrentTasks: 1},
	})
	require.Equal(t, ""+
		"ID                                    NAME          TYPE     ONLINE  ENABLED  ACTIVE/CAPACITY  ORGS\n"+
		"11111111-1111-1111-1111-111111111111  scanner-eu-1  scanner  yes     yes      2/4              22222222-2222-2222-2222-222222222222\n"+
		"22222222-2222-2222-2222-222222222222  old           ai       no      revoked  0/1              -\n",
		b.String())
}

func TestWriteTaskTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	writeTaskTable(&b, []apiclient.Task{
		{Id: id1, State: "pending", TaskType: "scanner_plugin", AttemptCount: 0, MaxAttempts: 3,
			PendingReason: ptr(apiclient.PendingReason("no_online_worker")), CreatedAt: created},
		{Id: id2, State: "completed", TaskType: "scanner_plugin", AttemptCount: 1, MaxAttempts: 3, CreatedAt: created},
	})
	require.Equal(t, ""+
		"ID                                    STATE      TYPE            ATTEMPTS  PENDING REASON    CREATED\n"+
		"11111111-1111-1111-1111-111111111111  pending    scanner_plugin  0/3       no_online_worker  2026-03-04T05:06:07Z\n"+
		"22222222-2222-2222-2222-222222222222  completed  scanner_plugin  1/3       -                 2026-03-04T05:06:07Z\n",
		b.String())
}

func TestWriteOrgAndTokenTables(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	writeOrgTable(&b, []apiclient.Organization{{Id: id1, Name: "Acme", ScopePolicy: apiclient.AllowList, CreatedAt: created}})
	require.Equal(t, ""+
		"ID                                    NAME  SCOPE POLICY  CREATED\n"+
		"11111111-1111-1111-1111-111111111111  Acme  allow_list    2026-03-04T05:06:07Z\n", b.String())

	b.Reset()
	past := created
	writeTokenTable(&b, []apiclient.ApiToken{
		{Id: id1, Name: "ci", Scopes: []apiclient.TokenScope{"producer", "reader"}, OrganizationId: &id2, CreatedAt: created},
		{Id: id2, Name: "old", Scopes: []apiclient.TokenScope{"admin"}, ExpiresAt: &past, CreatedAt: created},
	})
	require.Equal(t, ""+
		"ID                                    NAME  SCOPES           ORG                                   STATUS   EXPIRES               LAST USED  CREATED\n"+
		"11111111-1111-1111-1111-111111111111  ci    producer,reader  22222222-2222-2222-2222-222222222222  active   -                     -          2026-03-04T05:06:07Z\n"+
		"22222222-2222-2222-2222-222222222222  old   admin            -                                     expired  2026-03-04T05:06:07Z  -          2026-03-04T05:06:07Z\n",
		b.String())
}

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	fs := newFlagSet("x")
	enabled := fs.Bool("enabled", true, "")
	active := fs.String("active", "", "")
	pos, err := parseInterleaved(fs.FlagSet, []string{"--active", "cancel", "ID", "--enabled=false", "--", "--not-a-flag"})
	require.NoError(t, err)
	require.Equal(t, []string{"ID", "--not-a-flag"}, pos)
	require.False(t, *enabled)
	require.Equal(t, "cancel", *active)
}

func TestCtlUsageErrors(t *testing.T) {
	t.Parallel()
	_, errOut, code := runCLI(t, "ctl", "assign", "only-one", "--url", "https://x", "--token", "t")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "usage: gateway ctl assign ORG WORKER")

	out, _, code := runCLI(t, "ctl", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "gateway ctl <command>")
}

// TestCtlEnvPrecedence: flags, then the --env file, then the environment.
func TestCtlEnvPrecedence(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(envFile, []byte("GATEWAY_URL=https://file\nGATEWAY_TOKEN=file-token\n"), 0o600))
	t.Setenv("GATEWAY_URL", "https://environ")
	t.Setenv("GATEWAY_TOKEN", "environ-token")
	t.Setenv("CA_CERT", "/environ/ca.pem")

	o := &ctlOptions{}
	fs := newFlagSet("ctl x")
	o.register(fs)
	require.NoError(t, fs.Parse([]string{"--token", "flag-token", "--env", envFile}))
	sources, err := o.sources(nil)
	require.NoError(t, err)
	require.NoError(t, applyEnv([]*flagSet{fs}, sources...))
	require.Equal(t, ctlOptions{url: "https://file", token: "flag-token", ca: "/environ/ca.pem", envFile: envFile}, *o)
}

// TestCtlEndToEnd drives every ctl command against a real gateway on
// PostgreSQL.
func TestCtlEndToEnd(t *testing.T) {
	g := harness.Start(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, g.CA.CertPEM, 0o600))
	envFile := filepath.Join(dir, "env")
	require.NoError(t, os.WriteFile(envFile, []byte("GATEWAY_URL="+g.URL+"\nGATEWAY_TOKEN="+g.AdminToken+"\nCA_CERT="+caFile+"\n"), 0o600))
	unsetEnv(t, ctlVars...)

	// ctl runs a command with the --env file, before or after the words.
	ctl := func(args ...string) (string, string, int) {
		t.Helper()
		if len(args)%2 == 0 {
			return runCLI(t, append([]string{"ctl", "--env", envFile}, args...)...)
		}
		return runCLI(t, append(append([]string{"ctl"}, args...), "--env", envFile)...)
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := ctl(args...)
		require.Equal(t, 0, code, "ctl %v: %s", args, errOut)
		return out
	}
	decode := func(s string, v any) { t.Helper(); require.NoError(t, json.Unmarshal([]byte(s), v), s) }

	// Without the CA the gateway's certificate is not trusted: a hint.
	_, errOut, code := runCLI(t, "ctl", "orgs", "list", "--url", g.URL, "--token", g.AdminToken)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "hint: the gateway's certificate is not trusted; pass --ca FILE")

	// The environment alone, with the old CA_CERT name.
	t.Setenv("GATEWAY_URL", g.URL)
	t.Setenv("GATEWAY_TOKEN", g.AdminToken)
	t.Setenv("CA_CERT", caFile)
	_, errOut, code = runCLI(t, "ctl", "orgs", "list")
	require.Equal(t, 0, code, errOut)
	unsetEnv(t, "GATEWAY_URL", "GATEWAY_TOKEN", "CA_CERT")

	var org apiclient.Organization
	decode(ok("orgs", "create", "--name", "Acme", "--json"), &org)
	require.Equal(t, "Acme", org.Name)
	orgID := org.Id.String()
	require.Contains(t, ok("orgs", "list"), orgID+"  Acme")
	require.Contains(t, ok("orgs", "get", orgID), "Acme")
	require.True(t, json.Valid([]byte(ok("orgs", "--json", "list"))), "flags between the words, too")

	out := ok("workers", "create", "--name", "w1", "--capacity", "3")
	require.Regexp(t, `Enrollment token:\s+\S+`, out)
	var workers apiclient.WorkerList
	decode(ok("workers", "list", "--json"), &workers)
	require.Len(t, workers.Items, 1)
	worker := workers.Items[0].Id.String()
	require.Regexp(t, `Enrollment token:\s+\S+`, ok("workers", "enrollment-token", worker))

	// A certificate registered for the worker.
	issued, err := g.CA.IssueClient("w1", time.Hour)
	require.NoError(t, err)
	certFile := filepath.Join(dir, "w1.pem")
	require.NoError(t, os.WriteFile(certFile, issued.CertPEM, 0o600))
	require.Regexp(t, `Certificate:\s+CN=w1`, ok("workers", "certificate", worker, "--cert", certFile))

	require.Contains(t, ok("assign", orgID, worker), "Enabled:")
	require.Regexp(t, worker+`\s+w1\s+scanner\s+no\s+yes\s+0/3\s+`+orgID, ok("workers", "list"))
	require.Regexp(t, worker+`\s+w1\s+scanner\s+no\s+enabled\s+no\s+offline`, ok("orgs", "workers", orgID))
	require.Contains(t, ok("workers", "update", worker, "--enabled=false", "--active", "cancel", "--capacity", "5"), "0/5")
	require.Contains(t, ok("workers", "get", worker), "Enabled:          no")

	task := g.CreateTask(t, org.Id, harness.TaskSpec{})
	require.Regexp(t, task.String()+`\s+pending\s+scanner_plugin\s+0/\d+`, ok("tasks", "list", "--org", orgID, "--state", "pending", "--limit", "10"))
	require.Contains(t, ok("tasks", "get", task.String()), "State:")
	require.Regexp(t, task.String()+`\s+cancelled`, ok("tasks", "cancel", task.String()))
	require.Regexp(t, task.String()+`\s+pending`, ok("tasks", "retry", task.String()))

	var created apiclient.Task
	decode(ok("tasks", "create", "--org", orgID, "--payload", `{"plugin": "echo", "input": {}}`,
		"--requires", `{"manual": true}`, "--idempotency-key", "k1", "--json"), &created)
	require.Equal(t, apiclient.TaskState("pending"), created.State)
	require.Contains(t, ok("tasks", "create", "--org", orgID, "--payload", `{"plugin": "echo", "input": {}}`,
		"--requires", `{"manual": true}`, "--idempotency-key", "k1"), created.Id.String(), "the same key, the same task")
	_, errOut, code = ctl("tasks", "create", "--org", orgID, "--payload", `[1]`)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--payload: not a JSON object")

	// A problem answer: the error line and exit status 1.
	_, errOut, code = ctl("tasks", "get", uuid.NewString())
	require.Equal(t, 1, code)
	require.Regexp(t, `^error: .+ \(not-found\)(: .+)? \[request \S+\]\n$`, errOut)
	_, errOut, code = ctl("files", "get", uuid.NewString())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "(not-found)")

	var token apiclient.CreatedApiToken
	decode(ok("tokens", "create", "--name", "ci", "--scopes", "producer,reader", "--org", orgID, "--json"), &token)
	require.NotEmpty(t, token.Token)
	require.Regexp(t, token.ApiToken.Id.String()+`\s+ci\s+producer,reader\s+`+orgID+`\s+active`, ok("tokens", "list"))
	require.Regexp(t, `ci\s+producer,reader\s+\S+\s+revoked`, ok("tokens", "revoke", token.ApiToken.Id.String()))

	// The revoked token is refused; flags override the --env file.
	_, errOut, code = ctl("orgs", "list", "--token", token.Token)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "(unauthenticated)")

	require.Contains(t, ok("unassign", orgID, worker, "--active", "drain", "--reason", "moving"), "Revoked:")

	// A worker owned by the organization, granted to another one.
	var other apiclient.Organization
	decode(ok("orgs", "create", "--name", "Other", "--scope-policy", "unrestricted", "--json"), &other) // it scans localhost below
	otherID := other.Id.String()
	decode(ok("workers", "create", "--name", "owned", "--org", orgID, "--json"), &struct{}{})
	decode(ok("workers", "list", "--json"), &workers)
	owned := workers.Items[0]
	require.Equal(t, "owned", owned.Name)
	require.Equal(t, &org.Id, owned.OwnerOrganizationId)
	require.Contains(t, ok("grant", owned.Id.String(), otherID), otherID)
	require.Contains(t, ok("workers", "grants", owned.Id.String()), otherID)
	require.Contains(t, ok("ungrant", owned.Id.String(), otherID, "--active", "drain"), "Grant withdrawn.")
	require.Contains(t, ok("workers", "revoke", worker, "--reason", "decommissioned"), "revoked")

	// Scans.
	var scan apiclient.Scan
	decode(ok("scans", "create", "--org", otherID, "--targets", "localhost", "--plugins", "dns-resolve", "--json"), &scan)
	require.Len(t, scan.Jobs, 1)
	require.Contains(t, ok("scans", "list", "--org", otherID), scan.Id.String())
	require.Regexp(t, `dns-resolve`, ok("scans", "get", scan.Id.String()))
	require.Regexp(t, scan.Id.String()+`\s+cancelled`, ok("scans", "cancel", scan.Id.String()))

	// The audit log has what was done.
	var events apiclient.AuditEventList
	decode(ok("audit", "list", "--target-id", worker, "--json"), &events)
	require.NotEmpty(t, events.Items)
	require.Contains(t, ok("audit", "list", "--limit", "3"), "ACTION")

	// The overview.
	require.Regexp(t, `Workers online:\s+\d+ of \d+`, ok("stats"))
	var st apiclient.Stats
	decode(ok("stats", "--lease-window", "30", "--json"), &st)
	require.Equal(t, 30, st.Leases.WindowSeconds)

	// A task run by a worker: its log (followed), results and artifact.
	runs := g.NewOrganization(t, "Runs")
	runner := g.NewWorker(t, "runner", 1, runs)
	release := make(chan struct{})
	runner.Runtime(t, 1, func(ctx context.Context, lt *workerclient.LeasedTask) error {
		_, _ = io.WriteString(lt.Log(), "first line\n")
		if err := lt.Emit(ctx, apiclient.ResultRecord{Kind: "asset", Asset: &apiclient.AssetRef{Type: "ip", Value: "127.0.0.1"}}); err != nil {
			return err
		}
		if _, err := lt.UploadArtifact(ctx, "report.txt", "text/plain", strings.NewReader("all good\n")); err != nil {
			return err
		}
		<-release
		_, _ = io.WriteString(lt.Log(), "last line\n")
		return nil
	})
	var run apiclient.Task
	decode(ok("tasks", "create", "--org", runs.String(), "--json"), &run)
	g.WaitTaskState(t, run.Id, "running")
	followed := make(chan string, 1)
	go func() {
		out, errOut, code := ctl("tasks", "logs", run.Id.String(), "--follow", "--wait", "5")
		followed <- fmt.Sprintf("%d %s%s", code, out, errOut)
	}()
	close(release)
	require.Equal(t, "0 first line\nlast line\n", <-followed)
	g.WaitTaskState(t, run.Id, "completed")
	require.Equal(t, "first line\nlast line\n", ok("tasks", "logs", run.Id.String(), "--attempt", "1"))

	require.Regexp(t, `1\s+\S+\s+1\s+1\s+asset×1`, ok("tasks", "results", run.Id.String()))
	var files apiclient.FileList
	decode(ok("tasks", "artifacts", run.Id.String(), "--json"), &files)
	require.Len(t, files.Items, 1)
	file := files.Items[0].Id.String()
	require.Contains(t, ok("files", "get", file), "report.txt")
	require.Equal(t, "all good\n", ok("files", "download", file))
	saved := filepath.Join(dir, "report.txt")
	ok("files", "download", file, "--output", saved)
	got, err := os.ReadFile(saved)
	require.NoError(t, err)
	require.Equal(t, "all good\n", string(got))

	var assets apiclient.AssetList
	decode(ok("orgs", "assets", runs.String(), "--json"), &assets)
	require.Len(t, assets.Items, 1)
	require.Contains(t, ok("orgs", "threats", runs.String()), "SEVERITY")

	require.Regexp(t, `Status:\s+ok`, ok("ready"))

	// workers create prints the commands that start the reference worker
	// and check it, and they work as printed: the worker enrolls with the
	// token, then -check is accepted. (Last: the worker is then online.)
	out = ok("workers", "create", "--name", "enrolled")
	startLine := regexp.MustCompile(`(?m)^  (WORKER_ENROLLMENT_TOKEN=wge_\S+ worker -gateway \S+ -ca \S+ -state-dir \./worker-state)$`).FindStringSubmatch(out)
	checkLine := regexp.MustCompile(`(?m)^  (worker -check -gateway \S+ -ca \S+ -state-dir \./worker-state)$`).FindStringSubmatch(out)
	require.Len(t, startLine, 2, out)
	require.Len(t, checkLine, 2, out)
	require.Contains(t, startLine[1], "-gateway "+g.URL+" -ca "+caFile+" ")
	require.Contains(t, out, "gateway ctl assign ORGANIZATION_ID ")
	runPrintedWorker(t, startLine[1], checkLine[1])
}

// runPrintedWorker runs the reference worker with the command lines ctl
// printed (NAME=value words first, then "worker" and its flags) in a fresh
// directory: start until it has enrolled, then check.
func runPrintedWorker(t *testing.T, start, check string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "../../../workerclient/cmd/worker")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	work := t.TempDir()
	command := func(ctx context.Context, line string) *exec.Cmd {
		words := strings.Fields(line)
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		for strings.Contains(words[0], "=") {
			env, words = append(env, words[0]), words[1:]
		}
		require.Equal(t, "worker", words[0])
		cmd := exec.CommandContext(ctx, bin, words[1:]...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = work, env, 10*time.Second
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var logs lockedBuffer
	worker := command(ctx, start)
	worker.Stdout, worker.Stderr = &logs, &logs
	require.NoError(t, worker.Start())
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	for {
		if _, err := os.Stat(filepath.Join(work, "worker-state", "worker.pem")); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the worker exited before enrolling: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("the worker did not enroll: %s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, worker.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-exited, "%s", logs.String())

	out, err = command(ctx, check).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok: authenticated as worker")
}

func TestCtlSchedules(t *testing.T) {
	g := harness.Start(t)
	ctl := newAdminCtl(t, g)
	ok := ctl.ok
	org := g.NewOrganization(t, "acme").String()

	var sc apiclient.Schedule
	require.NoError(t, json.Unmarshal([]byte(ok("schedules", "create", "--org", org, "--name", "nightly", "--cron", "0 2 * * *",
		"--time-zone", "Europe/Berlin", "--definition", `{"kind": "scan", "scan": {"targets": ["localhost"], "plugins": [{"name": "dns-resolve"}]}}`,
		"--json")), &sc))
	id := sc.Id.String()
	require.Regexp(t, id+`\s+nightly\s+1\s+true\s+scan\s+0 2 \* \* \* Europe/Berlin`, ok("schedules", "list", "--org", org))
	require.Contains(t, ok("schedules", "get", id), "Europe/Berlin")
	require.Regexp(t, `(?m)^\S+T0[01]:00:00Z\s+\S+T0[01]:00:00Z$`, ok("schedules", "next", id, "--count", "2"), "02:00 Berlin is 00:00 or 01:00 UTC")
	require.Regexp(t, id+`\s+nightly\s+1\s+false`, ok("schedules", "pause", id))
	require.Regexp(t, `manual\s+1\s+created\s+-\s+scan `, ok("schedules", "run", id, "--idempotency-key", "k1"))
	require.Contains(t, ok("schedules", "fires", id), "manual")
	require.Regexp(t, id+`\s+nightly\s+1\s+true`, ok("schedules", "resume", id))
	require.Equal(t, "deleted "+id+"\n", ok("schedules", "delete", id))
	require.NotContains(t, ok("schedules", "list", "--org", org), id)
}

func TestCtlWebhooks(t *testing.T) {
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Webhooks.AllowPrivate = true }})
	ctl := newAdminCtl(t, g)
	ok := ctl.ok
	org := g.NewOrganization(t, "hooked").String()

	created := ok("webhooks", "create", "--org", org, "--endpoint", "http://127.0.0.1:9/hook", "--events", "task.failed_terminal, scan.completed")
	require.Regexp(t, `Secret:\s+whsec_\S+`, created)
	var list apiclient.WebhookList
	require.NoError(t, json.Unmarshal([]byte(ok("webhooks", "list", "--org", org, "--json")), &list))
	require.Len(t, list.Items, 1)
	id := list.Items[0].Id.String()
	require.Regexp(t, id+`\s+http://127.0.0.1:9/hook\s+task.failed_terminal,scan.completed\s+true`, ok("webhooks", "list", "--org", org))
	require.NotContains(t, ok("webhooks", "get", id), "whsec_")
	require.Regexp(t, `Enabled:\s+false`, ok("webhooks", "update", id, "--enabled", "false", "--events", "worker.revoked"))
	require.Regexp(t, `Events:\s+worker.revoked`, ok("webhooks", "get", id))
	require.Regexp(t, `Secret:\s+whsec_\S+`, ok("webhooks", "rotate-secret", id, "--overlap", "60"))
	require.Contains(t, ok("webhooks", "deliveries", id), "EVENT")
	ok("webhooks", "delete", id)
	_, errOut, code := ctl.run("webhooks", "get", id)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "not-found")
}
