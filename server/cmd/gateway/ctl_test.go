package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store/storetest"
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
