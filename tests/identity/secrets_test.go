package identity

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// createSecret creates a secret through the API as client, and returns
// the answer.
func createSecret(t *testing.T, c *apiclient.ClientWithResponses, org uuid.UUID, name, value string, types ...apiclient.TaskType) *apiclient.CreateSecretResponse {
	t.Helper()
	req := apiclient.CreateSecretRequest{OrganizationId: org, Name: name, Value: &value}
	if len(types) > 0 {
		req.TaskTypes = &types
	}
	res, err := c.CreateSecretWithResponse(context.Background(), req)
	require.NoError(t, err)
	return res
}

// createSecretTask creates a scanner_plugin task referencing secrets.
func createSecretTask(t *testing.T, c *apiclient.ClientWithResponses, org uuid.UUID, refs ...string) uuid.UUID {
	t.Helper()
	payload := apiclient.JSONObject(`{"plugin": "echo", "input": {}}`)
	res, err := c.CreateTaskWithResponse(context.Background(), nil, apiclient.CreateTaskRequest{
		OrganizationId: org, TaskType: "scanner_plugin", Payload: &payload, SecretRefs: &refs})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Id
}

// databaseText is every row of every table of the gateway's schema as
// text (bytea as hex, so a value stored raw in a bytea is found too).
func databaseText(t *testing.T, g *harness.Gateway) string {
	t.Helper()
	ctx := context.Background()
	rows, err := g.Pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, tables, "secrets")
	var out strings.Builder
	for _, table := range tables {
		// Row text renders bytea as \x…hex; convert_from finds raw UTF-8
		// bytes as well.
		rows, err := g.Pool.Query(ctx, `SELECT t::text FROM `+table+` t`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out.WriteString(s + "\n")
		}
		require.NoError(t, rows.Err())
	}
	return out.String()
}

// requireNoPlaintext fails when value appears in the database, as text or
// as the hex of its bytes.
func requireNoPlaintext(t *testing.T, g *harness.Gateway, value string) {
	t.Helper()
	dump := databaseText(t, g)
	require.NotContains(t, dump, value)
	require.NotContains(t, dump, fmt.Sprintf("%x", value))
}

// A worker receives a referenced secret in its lease and nowhere else: not
// in task get or list, not in its stored log (redacted, also when split
// across chunks), not in audit events — and the database holds only
// ciphertext.
func TestSecretsReachOnlyTheLease(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 4, org)
	const value = "pa55-Wörd-9f3a1c"

	res := createSecret(t, g.Control, org, "REGISTRY_TOKEN", value)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	require.NotContains(t, string(res.Body), value)
	require.Equal(t, 1, res.JSON201.Version)

	producer := scopedClient(t, g, org, "producer")
	taskID := createSecretTask(t, producer, org, "REGISTRY_TOKEN")
	plain := g.CreateTask(t, org, harness.TaskSpec{})

	leases := lease(t, w, 2, 5)
	require.Len(t, leases, 2)
	var withSecret apiclient.Lease
	for _, l := range leases {
		if l.Task.Id == taskID {
			withSecret = l
			require.NotNil(t, l.Secrets)
			require.Equal(t, map[string]string{"REGISTRY_TOKEN": value}, *l.Secrets)
		} else {
			require.Equal(t, plain, l.Task.Id)
			require.Nil(t, l.Secrets, "a task without references gets no secrets")
		}
	}

	// The worker echoes the value into its log, whole and split.
	chunks := []string{"login with " + value + "\n", "again: " + value[:5]}
	offset := int64(0)
	for _, c := range chunks {
		ans := appendLog(t, w, withSecret, offset, c)
		require.Equal(t, http.StatusOK, ans.StatusCode(), string(ans.Body))
		offset = ans.JSON200.NextOffset
	}
	// Every chunk is taken whole; the split value's beginning is held by
	// the gateway (by name, never as text) until the rest arrives.
	require.Equal(t, int64(len(chunks[0])+len(chunks[1])), offset)
	rest := value[5:] + " done\n"
	ans := appendLog(t, w, withSecret, offset, rest)
	require.Equal(t, http.StatusOK, ans.StatusCode(), string(ans.Body))
	log := readLog(t, g, taskID, 0, false)
	require.NotContains(t, log.Data, value)
	require.Equal(t, "login with [REDACTED:REGISTRY_TOKEN]\nagain: [REDACTED:REGISTRY_TOKEN] done\n", log.Data)

	// Results and the completion carry nothing of it either.
	done, err := w.Client.CompleteAttemptWithResponse(context.Background(), withSecret.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: withSecret.LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))

	for _, c := range []*apiclient.ClientWithResponses{g.Control, producer, scopedClient(t, g, org, "reader")} {
		got, err := c.GetTaskWithResponse(context.Background(), taskID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, got.StatusCode())
		require.NotContains(t, string(got.Body), value)
		list, err := c.ListTasksWithResponse(context.Background(), &apiclient.ListTasksParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode())
		require.NotContains(t, string(list.Body), value)
	}
	events, err := g.Control.ListAuditEventsWithResponse(context.Background(), &apiclient.ListAuditEventsParams{})
	require.NoError(t, err)
	require.Contains(t, string(events.Body), "secret.create")
	require.NotContains(t, string(events.Body), value)

	metrics, err := g.HTTPClient(nil).Do(mustRequest(t, g, "GET", "/metrics"))
	require.NoError(t, err)
	defer metrics.Body.Close()
	body, err := io.ReadAll(metrics.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, metrics.StatusCode)
	require.Contains(t, string(body), "gateway_secret_unavailable_attempts_total")
	require.NotContains(t, string(body), value)

	requireNoPlaintext(t, g, value)
}

func mustRequest(t *testing.T, g *harness.Gateway, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	return req
}

// Only admins manage secrets, nobody reads a value, and another
// organization's secret is not found.
func TestSecretsPermissions(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	const value = "only-for-leases-7d1e"
	created := createSecret(t, g.Control, orgA, "API_KEY", value)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	id := created.JSON201.Id
	ctx := context.Background()

	for _, perm := range []string{"reader", "producer"} {
		c := scopedClient(t, g, orgA, perm)
		res := createSecret(t, c, orgA, "OTHER", "x-value")
		require.Equal(t, http.StatusForbidden, res.StatusCode(), perm)
		list, err := c.ListSecretsWithResponse(ctx, &apiclient.ListSecretsParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, list.StatusCode(), perm)
		got, err := c.GetSecretWithResponse(ctx, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, got.StatusCode(), perm)
		newValue := "replaced"
		rep, err := c.ReplaceSecretWithResponse(ctx, id, apiclient.ReplaceSecretRequest{Value: &newValue})
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, rep.StatusCode(), perm)
		del, err := c.DeleteSecretWithResponse(ctx, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, del.StatusCode(), perm)
		for _, body := range [][]byte{res.Body, list.Body, got.Body, rep.Body, del.Body} {
			require.NotContains(t, string(body), value)
		}
	}

	// An admin of A lists and reads metadata, never the value.
	adminA := scopedClient(t, g, orgA, "admin")
	list, err := adminA.ListSecretsWithResponse(ctx, &apiclient.ListSecretsParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode())
	require.Len(t, list.JSON200.Items, 1)
	require.Equal(t, "API_KEY", list.JSON200.Items[0].Name)
	require.NotContains(t, string(list.Body), value)
	got, err := adminA.GetSecretWithResponse(ctx, id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.StatusCode())
	require.NotContains(t, string(got.Body), value)

	// A name already used is a conflict, not a silent overwrite.
	dup := createSecret(t, adminA, orgA, "API_KEY", "another")
	require.Equal(t, http.StatusConflict, dup.StatusCode(), string(dup.Body))

	// An admin of B: A's secret answers 404, as one that does not exist.
	adminB := scopedClient(t, g, orgB, "admin")
	for _, target := range []uuid.UUID{id, uuid.Must(uuid.NewV7())} {
		got, err := adminB.GetSecretWithResponse(ctx, target)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, got.StatusCode())
		v := "stolen"
		rep, err := adminB.ReplaceSecretWithResponse(ctx, target, apiclient.ReplaceSecretRequest{Value: &v})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, rep.StatusCode())
		del, err := adminB.DeleteSecretWithResponse(ctx, target)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, del.StatusCode())
	}
	res := createSecret(t, adminB, orgA, "PLANTED", "x-value")
	require.Equal(t, http.StatusNotFound, res.StatusCode())
	listB, err := adminB.ListSecretsWithResponse(ctx, &apiclient.ListSecretsParams{})
	require.NoError(t, err)
	require.Empty(t, listB.JSON200.Items)

	// B's task naming A's secret does not get it: names resolve in the
	// task's own organization.
	wB := g.NewWorker(t, "wb", 1, orgB)
	taskB := createSecretTask(t, adminB, orgB, "API_KEY")
	require.Empty(t, lease(t, wB, 1, 5))
	detail := g.WaitTaskState(t, taskB, "retry_wait")
	require.Equal(t, server.SecretUnavailable, *detail.Attempts[0].ErrorCode)

	// Replacing makes a new version, which the next lease gets.
	newValue := "rotated-value-2b9c"
	rep, err := adminA.ReplaceSecretWithResponse(ctx, id, apiclient.ReplaceSecretRequest{Value: &newValue})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rep.StatusCode(), string(rep.Body))
	require.Equal(t, 2, rep.JSON200.Version)
	wA := g.NewWorker(t, "wa", 1, orgA)
	createSecretTask(t, adminA, orgA, "API_KEY")
	leases := lease(t, wA, 1, 5)
	require.Len(t, leases, 1)
	require.Equal(t, newValue, (*leases[0].Secrets)["API_KEY"])
	requireNoPlaintext(t, g, value)
	requireNoPlaintext(t, g, newValue)
}

// A secret deleted (or withheld by its limits) at lease time fails the
// attempt with secret_unavailable, naming the secret and nothing about
// why; the other leases of the same answer are delivered.
func TestSecretUnavailableAtLease(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 10, org)
	gone := createSecret(t, g.Control, org, "GONE", "soon-deleted-value")
	require.Equal(t, http.StatusCreated, gone.StatusCode())
	aiOnly := createSecret(t, g.Control, org, "AI_ONLY", "ai-only-value", "ai")
	require.Equal(t, http.StatusCreated, aiOnly.StatusCode())
	ok := createSecret(t, g.Control, org, "FINE", "fine-value")
	require.Equal(t, http.StatusCreated, ok.StatusCode())

	deleted := createSecretTask(t, g.Control, org, "FINE", "GONE")
	limited := createSecretTask(t, g.Control, org, "AI_ONLY")
	never := createSecretTask(t, g.Control, org, "NEVER_CREATED")
	fine := createSecretTask(t, g.Control, org, "FINE")
	del, err := g.Control.DeleteSecretWithResponse(context.Background(), gone.JSON201.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, del.StatusCode())

	leases := lease(t, w, 10, 5)
	require.Len(t, leases, 1, "only the task whose secrets are all there is delivered")
	require.Equal(t, fine, leases[0].Task.Id)
	require.Equal(t, map[string]string{"FINE": "fine-value"}, *leases[0].Secrets)

	for task, name := range map[uuid.UUID]string{deleted: "GONE", limited: "AI_ONLY", never: "NEVER_CREATED"} {
		detail := g.WaitTaskState(t, task, "retry_wait")
		require.Len(t, detail.Attempts, 1)
		a := detail.Attempts[0]
		require.Equal(t, "failed", string(a.Status))
		require.Equal(t, server.SecretUnavailable, *a.ErrorCode)
		require.Contains(t, *a.ErrorMessage, `"`+name+`"`)
		for _, leak := range []string{"fine-value", "ai-only-value", "soon-deleted-value", "kek", "ciphertext"} {
			require.NotContains(t, *a.ErrorMessage, leak)
		}
	}
}

// writeKeyFile writes a key-encryption key to a file of the test.
func writeKeyFile(t *testing.T, k secretbox.KEK, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(k.Encode()+"\n"), 0o600))
	return path
}

// Rotation under load: a replica serving with the new and the old key
// hands out every value correctly while `gateway secrets rotate-kek`
// re-wraps the data keys; afterwards every key is the new one, a replica
// with the new key alone starts, and one with only the old key refuses
// to start.
func TestSecretsRotateKEKUnderLoad(t *testing.T) {
	t.Parallel()
	oldKey, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	newKey, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	oldFile, newFile := writeKeyFile(t, oldKey, "old.key"), writeKeyFile(t, newKey, "new.key")

	g, procs := harness.StartProcesses(t, 1, "-secrets-key-file", oldFile)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	const n = 200
	oldRing := secretbox.NewKeyring(oldKey)
	values := map[string]string{}
	for i := range n {
		name, value := fmt.Sprintf("S_%03d", i), fmt.Sprintf("value-%03d-%s", i, uuid.NewString())
		_, err := g.Store.CreateSecret(ctx, store.EveryOrganization(), oldRing, org, store.SecretParams{Name: name, Value: []byte(value)})
		require.NoError(t, err)
		values[name] = value
	}

	// Roll the replica: new key seals, both open.
	rotating := g.StartProcess(t, "GATEWAY_SECRETS_KEY_FILE="+newFile, "GATEWAY_SECRETS_OLD_KEY_FILE="+oldFile)
	require.NoError(t, procs[0].Stop(syscall.SIGTERM))
	g.URL = rotating.URL
	g.Control = g.ControlClient(t, g.AdminToken)

	tasks := map[uuid.UUID]string{}
	for i := range n {
		name := fmt.Sprintf("S_%03d", i)
		tasks[createSecretTask(t, g.Control, org, name)] = name
	}
	w := g.NewWorker(t, "w", 16, org)
	var wrong, served atomic.Int64
	var mu sync.Mutex
	seen := map[uuid.UUID]bool{}
	w.Runtime(t, 16, func(_ context.Context, task *workerclient.LeasedTask) error {
		mu.Lock()
		name := tasks[task.ID]
		seen[task.ID] = true
		mu.Unlock()
		if len(task.Secrets) != 1 || task.Secrets[name] != values[name] {
			wrong.Add(1)
		}
		served.Add(1)
		return nil
	})

	// Rotate while the worker leases.
	harness.WaitFor(t, 30*time.Second, "leasing under way", func() bool { return served.Load() > 0 })
	out, err := exec.Command(harness.Binary(t, "gateway"), "secrets", "rotate-kek", "-database-url", g.DatabaseURL,
		"-secrets-key-file", newFile, "-secrets-old-key-file", oldFile).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), fmt.Sprintf("re-wrapped %d data keys", n))
	require.NotContains(t, string(out), oldKey.Encode())
	// One audit row per batch, written in its transaction.
	var batches, audited int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum((details->>'rewrapped')::int), 0) FROM audit_events
		WHERE action = 'secret.rotate_kek' AND details->>'kek_id' = $1`, newKey.ID).Scan(&batches, &audited))
	require.Positive(t, batches)
	require.Equal(t, n, audited)

	harness.WaitFor(t, 60*time.Second, "every task completed", func() bool {
		var left int
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE organization_id = $1 AND state <> 'completed'`, org).Scan(&left))
		return left == 0
	})
	require.Zero(t, wrong.Load(), "a lease carried a wrong value")
	require.Len(t, seen, n)
	var stale int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM secrets WHERE kek_id <> $1`, newKey.ID).Scan(&stale))
	require.Zero(t, stale)

	// The new key alone serves; the old key alone is refused at start-up.
	g.StartProcess(t, "GATEWAY_SECRETS_KEY_FILE="+newFile)
	requireRefusedStart(t, g, "GATEWAY_SECRETS_KEY_FILE="+oldFile)
	requireRefusedStart(t, g, "GATEWAY_SECRETS_KEY="+mustKEK(t).Encode())
	dump := databaseText(t, g)
	for _, v := range values {
		require.NotContains(t, dump, v)
	}
}

func mustKEK(t *testing.T) secretbox.KEK {
	t.Helper()
	k, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	return k
}

// requireRefusedStart runs `gateway serve` over g's database with env and
// requires it to exit with an error that names the key problem.
func requireRefusedStart(t *testing.T, g *harness.Gateway, env ...string) {
	t.Helper()
	out, err := g.ServeCommand(t, env...).CombinedOutput()
	require.Error(t, err, string(out))
	require.Contains(t, string(out), "key-encryption key")
}

// A schedule's task definition references secrets like a task: each task
// it creates gets them in its lease. A bad name is refused at creation.
func TestScheduledTaskSecrets(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 1, org)
	res := createSecret(t, g.Control, org, "NIGHTLY_TOKEN", "nightly-value-31c7")
	require.Equal(t, http.StatusCreated, res.StatusCode())
	ctx := context.Background()

	schedule := func(refs ...string) *apiclient.CreateScheduleResponse {
		payload := apiclient.JSONObject(`{"plugin": "echo", "input": {}}`)
		sc, err := g.Control.CreateScheduleWithResponse(ctx, apiclient.CreateScheduleRequest{OrganizationId: org, Name: "nightly",
			Timing: apiclient.ScheduleTiming{Cron: ptr("0 3 1 1 *")},
			Definition: apiclient.ScheduleDefinition{Kind: apiclient.ScheduleDefinitionKindTask, Task: &apiclient.ScheduledTask{
				TaskType: "scanner_plugin", Payload: &payload, SecretRefs: &refs}}})
		require.NoError(t, err)
		return sc
	}
	bad := schedule("not a name")
	require.Equal(t, http.StatusBadRequest, bad.StatusCode(), string(bad.Body))

	sc := schedule("NIGHTLY_TOKEN")
	require.Equal(t, http.StatusCreated, sc.StatusCode(), string(sc.Body))
	require.Equal(t, []string{"NIGHTLY_TOKEN"}, *sc.JSON201.Definition.Task.SecretRefs)
	run, err := g.Control.RunScheduleWithResponse(ctx, sc.JSON201.Id, nil)
	require.NoError(t, err)
	require.Less(t, run.StatusCode(), 300, string(run.Body))
	leases := lease(t, w, 1, 5)
	require.Len(t, leases, 1)
	require.Equal(t, map[string]string{"NIGHTLY_TOKEN": "nightly-value-31c7"}, *leases[0].Secrets)
}
