package security

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// eventReceiver is a real webhook endpoint on 127.0.0.1 that records the
// body of every event delivered to it and answers 204.
type eventReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newEventReceiver(t *testing.T) *eventReceiver {
	rcv := &eventReceiver{}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		rcv.bodies = append(rcv.bodies, body)
		rcv.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

// receivedEvent is the part of a delivered event these tests read.
type receivedEvent struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

func (rcv *eventReceiver) events(t *testing.T) []receivedEvent {
	t.Helper()
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	out := make([]receivedEvent, len(rcv.bodies))
	for i, b := range rcv.bodies {
		require.NoError(t, json.Unmarshal(b, &out[i]), string(b))
	}
	return out
}

// TestWorkerEventsReachOnlyOrganizationsThatSeeTheWorker: organization Y
// owns a worker and grants it to X, X assigns it, then Y withdraws the
// grant (X gets 404 for the worker) and revokes the worker with a reason.
// Y's webhook receives worker.revoked with the reason; X's receives
// nothing about the worker, and no delivery to it was even written.
func TestWorkerEventsReachOnlyOrganizationsThatSeeTheWorker(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Webhooks.AllowPrivate = true // the receivers listen on loopback
		c.Webhooks.Timeout = 2 * time.Second
	}})
	ctx := context.Background()
	x, y := g.NewOrganization(t, "x"), g.NewOrganization(t, "y")
	adminX := g.ControlClient(t, scopedToken(t, g, x, "admin"))
	adminY := g.ControlClient(t, scopedToken(t, g, y, "admin"))

	subscribe := func(c *apiclient.ClientWithResponses, org uuid.UUID, rcv *eventReceiver) uuid.UUID {
		t.Helper()
		res, err := c.CreateWebhookWithResponse(ctx, apiclient.CreateWebhookRequest{OrganizationId: org, Url: rcv.srv.URL,
			EventTypes: []apiclient.WebhookEventType{apiclient.WorkerRevoked, apiclient.WorkerOffline}})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		return res.JSON201.Id
	}
	rcvX, rcvY := newEventReceiver(t), newEventReceiver(t)
	hookX := subscribe(adminX, x, rcvX)
	subscribe(adminY, y, rcvY)

	created, err := adminY.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: "y-scanner-7", WorkerType: "scanner"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	worker := created.JSON201.Id

	grant, err := adminY.GrantWorkerWithResponse(ctx, worker, x)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, grant.StatusCode(), string(grant.Body))
	assign, err := adminX.AssignWorkerWithResponse(ctx, x, worker)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, assign.StatusCode(), string(assign.Body))

	withdraw, err := adminY.RevokeWorkerGrantWithResponse(ctx, worker, x, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, withdraw.StatusCode(), string(withdraw.Body))
	seen, err := adminX.GetWorkerWithResponse(ctx, worker)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, seen.StatusCode(), string(seen.Body))

	const reason = "key leaked on host db7.internal"
	revoke, err := adminY.RevokeWorkerWithResponse(ctx, worker, apiclient.RevokeRequest{Reason: reason})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, revoke.StatusCode(), string(revoke.Body))

	// The owner hears of it, with the reason.
	require.Eventually(t, func() bool { return len(rcvY.events(t)) > 0 }, 30*time.Second, 20*time.Millisecond)
	got := rcvY.events(t)
	require.Len(t, got, 1)
	require.Equal(t, "worker.revoked", got[0].Type)
	require.Equal(t, worker.String(), got[0].Data["worker_id"])
	require.Equal(t, reason, got[0].Data["reason"])

	// X was told nothing: no delivery was written for its target, and its
	// receiver got nothing once every delivery is done.
	var toX int
	require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE target_id = $1`, hookX).Scan(&toX))
	require.Zero(t, toX, "a delivery about the worker was written for an organization whose grant was withdrawn")
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, g.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&pending))
		return pending == 0
	}, 30*time.Second, 20*time.Millisecond)
	require.Empty(t, rcvX.events(t), "X received an event about a worker it can no longer see")
}

// emitterCall finds calls of the one emitter with the event type they
// name: a literal type ('worker.revoked') or a prefix completed by the
// subject's state ('scan.' || NEW.state).
var emitterCall = regexp.MustCompile(`webhook_emit\([^,]+,\s*'([a-z_.]+)'(\s*\|\|)?`)

// goEmitCall finds the store's calls of core.EmitEvent with the Go
// constant of the type they emit.
var goEmitCall = regexp.MustCompile(`core\.EmitEvent\(ctx, tx, (?:core\.)?Event\{Type: (Event\w+)`)

// outboxInsert is a statement writing the outbox itself.
var outboxInsert = regexp.MustCompile(`(?i)insert\s+into\s+webhook_(events|deliveries)\b`)

// TestEveryEventHasOneEmitter enumerates the event types of the contract
// and checks that each is emitted, and only through the one emitter: no
// database function but webhook_emit writes the outbox, no Go code writes
// it nor calls webhook_emit but store/internal/core/events.go, and every type of the
// catalogue reaches webhook_emit from a trigger that calls it or from the
// store through core.EmitEvent (or the task CTE in events.go). worker.* events
// come only from Go, which decides their recipients at the change.
func TestEveryEventHasOneEmitter(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	spec, err := api.GetSpec()
	require.NoError(t, err)
	var catalogue []string
	for _, v := range spec.Components.Schemas["WebhookEventType"].Value.Enum {
		catalogue = append(catalogue, v.(string))
	}
	require.ElementsMatch(t, catalogue, store.WebhookEventTypes, "the contract's catalogue and the store's")

	emitted := map[string][]string{} // type → where it is emitted
	emits := func(where, typ string, prefix bool) {
		for _, c := range catalogue {
			if c == typ || (prefix && strings.HasPrefix(c, typ)) {
				emitted[c] = append(emitted[c], where)
			}
		}
	}

	// The database: only webhook_emit writes the outbox.
	rows, err := g.Pool.Query(ctx, `SELECT p.proname, p.prosrc FROM pg_proc p
		JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()`)
	require.NoError(t, err)
	for rows.Next() {
		var name, src string
		require.NoError(t, rows.Scan(&name, &src))
		if outboxInsert.MatchString(src) {
			require.Equal(t, "webhook_emit", name, "database function %s writes the outbox itself", name)
		}
		for _, m := range emitterCall.FindAllStringSubmatch(src, -1) {
			emits("function "+name, m[1], m[2] != "")
		}
	}
	require.NoError(t, rows.Err())

	// The Go code: nothing writes the outbox, only events.go calls the
	// emitter, and the store's core.EmitEvent calls name their types.
	constants := map[string]string{}
	decl, err := os.ReadFile("../../store/internal/webhooks/events.go")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`(Event\w+)\s*=\s*"([a-z_.]+)"`).FindAllStringSubmatch(string(decl), -1) {
		constants[m[1]] = m[2]
	}
	require.NoError(t, filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path, "../../")
		require.False(t, outboxInsert.Match(src), "%s writes the outbox itself", rel)
		if rel == "store/internal/core/events.go" {
			for _, m := range emitterCall.FindAllStringSubmatch(string(src), -1) {
				emits(rel, m[1], m[2] != "")
			}
		} else {
			require.NotContains(t, string(src), "webhook_emit(", "%s calls the emitter around store/internal/core/events.go", rel)
		}
		if strings.HasPrefix(rel, "store/") {
			for _, m := range goEmitCall.FindAllStringSubmatch(string(src), -1) {
				typ, ok := constants[m[1]]
				require.True(t, ok, "%s emits %s, not in the catalogue", rel, m[1])
				emits(rel+" (emitEvent)", typ, false)
			}
		}
		return nil
	}))

	for _, c := range catalogue {
		require.NotEmpty(t, emitted[c], "event type %s is emitted nowhere through the one emitter", c)
		if strings.HasPrefix(c, "worker.") {
			for _, where := range emitted[c] {
				require.Contains(t, where, "(emitEvent)", "%s is emitted by %s, not by the store at the change", c, where)
			}
		}
	}
}
