package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func ptr[T any](v T) *T { return &v }

func TestFormatProblem(t *testing.T) {
	t.Parallel()
	p := apiclient.Problem{Title: "Conflict", Code: problem.TaskFinished, Status: 409,
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
	writeOrgTable(&b, []apiclient.Organization{{Id: id1, Name: "Acme", CreatedAt: created}})
	require.Equal(t, ""+
		"ID                                    NAME  CREATED\n"+
		"11111111-1111-1111-1111-111111111111  Acme  2026-03-04T05:06:07Z\n", b.String())

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

func TestParseEnvFile(t *testing.T) {
	t.Parallel()
	vars, err := parseEnvFile(strings.NewReader("# Written by `make run`\n\nGATEWAY_URL=https://127.0.0.1:8443\n" +
		"export GATEWAY_TOKEN='tok=en'\nCA_CERT=\"/x/ca.pem\"\n"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"GATEWAY_URL": "https://127.0.0.1:8443", "GATEWAY_TOKEN": "tok=en", "CA_CERT": "/x/ca.pem"}, vars)

	_, err = parseEnvFile(strings.NewReader("nonsense\n"))
	require.Error(t, err)
}

func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	envFile := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(envFile, []byte("GATEWAY_URL=https://file\nGATEWAY_TOKEN=file-token\n"), 0o600))
	environ := map[string]string{"GATEWAY_URL": "https://environ", "GATEWAY_TOKEN": "environ-token", "CA_CERT": "/environ/ca.pem"}

	o := ctlOptions{token: "flag-token", envFile: envFile}
	require.NoError(t, o.resolve(func(k string) string { return environ[k] }))
	require.Equal(t, ctlOptions{url: "https://file", token: "flag-token", ca: "/environ/ca.pem", envFile: envFile}, o)

	o = ctlOptions{}
	require.ErrorContains(t, o.resolve(func(string) string { return "" }), "no gateway URL")
}

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	enabled := fs.Bool("enabled", true, "")
	active := fs.String("active", "", "")
	pos, err := parseInterleaved(fs, []string{"--active", "cancel", "ID", "--enabled=false", "--", "--not-a-flag"})
	require.NoError(t, err)
	require.Equal(t, []string{"ID", "--not-a-flag"}, pos)
	require.False(t, *enabled)
	require.Equal(t, "cancel", *active)
}

func TestCtlUsageErrors(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 2, runCtl(context.Background(), []string{"workers", "frobnicate"}, &out, &errOut))
	require.Contains(t, errOut.String(), `unknown command "workers frobnicate"`)

	errOut.Reset()
	require.Equal(t, 2, runCtl(context.Background(), []string{"assign", "only-one"}, &out, &errOut))
	require.Contains(t, errOut.String(), "usage: gateway ctl assign ORG WORKER")

	out.Reset()
	require.Equal(t, 0, runCtl(context.Background(), nil, &out, &errOut))
	require.Contains(t, out.String(), "gateway ctl <resource> <verb>")
}

// TestCtlEndToEnd drives every command against an in-process gateway.
func TestCtlEndToEnd(t *testing.T) {
	g := harness.Start(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, g.CA.CertPEM, 0o600))
	envFile := filepath.Join(dir, "env")
	require.NoError(t, os.WriteFile(envFile, []byte("GATEWAY_URL="+g.URL+"\nGATEWAY_TOKEN="+g.AdminToken+"\nCA_CERT="+caFile+"\n"), 0o600))

	// ctl runs a command with the --env file and returns stdout, stderr and
	// the exit status.
	ctl := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := runCtl(context.Background(), append([]string{"--env", envFile}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := ctl(args...)
		require.Equal(t, 0, code, "ctl %v: %s", args, errOut)
		return out
	}
	decode := func(s string, v any) { t.Helper(); require.NoError(t, json.Unmarshal([]byte(s), v)) }

	var org apiclient.Organization
	decode(ok("orgs", "create", "--name", "Acme", "--json"), &org)
	require.Equal(t, "Acme", org.Name)
	require.Contains(t, ok("orgs", "list"), org.Id.String()+"  Acme")
	require.Contains(t, ok("orgs", "get", org.Id.String()), "Acme")

	out := ok("workers", "create", "--name", "w1", "--capacity", "3")
	require.Regexp(t, `Enrollment token:\s+\S+`, out)
	var workers apiclient.WorkerList
	decode(ok("workers", "list", "--json"), &workers)
	require.Len(t, workers.Items, 1)
	worker := workers.Items[0].Id.String()

	require.Contains(t, ok("assign", org.Id.String(), worker), "Enabled:")
	require.Regexp(t, worker+`\s+w1\s+scanner\s+no\s+yes\s+0/3\s+`+org.Id.String(), ok("workers", "list"))
	require.Contains(t, ok("workers", "update", worker, "--enabled=false", "--active", "cancel", "--capacity", "5"), "0/5")
	require.Contains(t, ok("workers", "get", worker), "Enabled:          no")

	task := g.CreateTask(t, org.Id, harness.TaskSpec{})
	require.Regexp(t, task.String()+`\s+pending\s+scanner_plugin\s+0/\d+`, ok("tasks", "list", "--org", org.Id.String(), "--state", "pending", "--limit", "10"))
	require.Contains(t, ok("tasks", "get", task.String()), "State:")
	require.Regexp(t, task.String()+`\s+cancelled`, ok("tasks", "cancel", task.String()))
	require.Regexp(t, task.String()+`\s+pending`, ok("tasks", "retry", task.String()))

	// A problem answer: the error line and exit status 1.
	_, errOut, code := ctl("tasks", "get", uuid.NewString())
	require.Equal(t, 1, code)
	require.Regexp(t, `^error: .+ \(not-found\)(: .+)? \[request \S+\]\n$`, errOut)

	var created apiclient.CreatedApiToken
	decode(ok("tokens", "create", "--name", "ci", "--scopes", "producer,reader", "--org", org.Id.String(), "--json"), &created)
	require.NotEmpty(t, created.Token)
	require.Regexp(t, created.ApiToken.Id.String()+`\s+ci\s+producer,reader\s+`+org.Id.String()+`\s+active`, ok("tokens", "list"))
	require.Regexp(t, `ci\s+producer,reader\s+\S+\s+revoked`, ok("tokens", "revoke", created.ApiToken.Id.String()))

	// The revoked token is refused; flags override the --env file.
	_, errOut, code = ctl("orgs", "list", "--token", created.Token)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "(unauthenticated)")

	require.Contains(t, ok("unassign", org.Id.String(), worker, "--active", "drain", "--reason", "moving"), "Revoked:")

	// A worker owned by the organization, granted to another one.
	var other apiclient.Organization
	decode(ok("orgs", "create", "--name", "Other", "--json"), &other)
	otherID := other.Id.String()
	decode(ok("workers", "create", "--name", "owned", "--org", org.Id.String(), "--json"), &struct{}{})
	decode(ok("workers", "list", "--json"), &workers)
	owned := workers.Items[0]
	require.Equal(t, "owned", owned.Name)
	require.Equal(t, &org.Id, owned.OwnerOrganizationId)
	require.Contains(t, ok("grant", owned.Id.String(), otherID), "Granted:")
	require.Contains(t, ok("ungrant", owned.Id.String(), otherID, "--active", "drain"), "Grant withdrawn.")
	require.Contains(t, ok("workers", "revoke", worker, "--reason", "decommissioned"), "revoked")
}
