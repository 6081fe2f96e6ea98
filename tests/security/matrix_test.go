package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/tests/harness"
)

// The roles an operation may need, as its x-permission in openapi.yaml
// names them: from least to most privileged among bearer tokens; worker
// routes need a worker certificate instead.
const (
	roleReader        = "reader"
	roleProducer      = "producer"
	roleAdmin         = "admin"
	roleUnscopedAdmin = "global-admin"
	roleWorker        = "worker"
	rolePublic        = "public"
)

// granteeOperations name a second organization on purpose: the owner of a
// worker lets another organization use it. Their organization_id is the
// grantee, not a resource the caller acts on, so it is always the other
// tenant's and outside the isolation rule.
var granteeOperations = []string{"grantWorker", "revokeWorkerGrant"}

// grantListing shows a worker's owner the organizations it granted.
var grantListing = []string{"listWorkerGrants"}

// principal is one caller of the matrix.
type principal struct {
	name string
	// roles it holds on its own organization; scoped is false only for the
	// unscoped admin.
	roles  []string
	scoped bool
	token  string
	cert   *tls.Certificate
}

func (p principal) holds(role string) bool {
	return role == rolePublic || slices.Contains(p.roles, role)
}

// slot is one resource an operation names: a path parameter, a query
// filter or a body field.
type slot struct {
	kind  string // the parameter name, e.g. "worker_id"
	where string // "path", "query", "body" or "body-attempt" (attempt_id + lease_token items)
}

// choice is which tenant's resource fills a slot.
type choice int

const (
	own choice = iota
	foreign
	missing
)

func (c choice) String() string { return [...]string{"own", "foreign", "missing"}[c] }

// TestPermissionMatrix is generated from openapi.yaml: every operation,
// called by every principal (unscoped admin, scoped admin, producer and
// reader of organization A, A's worker certificate), on A's own resources
// and on organization B's — every combination where an operation names two
// resources — with a worker of B's shared with A in every world. For A's principals, an operation on anything of B's must
// answer exactly as on something that does not exist (never 2xx, never a
// 403 that confirms existence), must not change any of B's rows, and no
// answer to A may carry one of B's ids. On A's own resources, a principal
// holding the operation's role is not refused, and one lacking it is
// refused with 401 or 403.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	spec, err := api.GetSpec()
	require.NoError(t, err)

	type operation struct {
		path, method string
		op           *openapi3.Operation
		params       openapi3.Parameters
	}
	var ops []operation
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, operation{path, method, op, append(slices.Clone(item.Parameters), op.Parameters...)})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].op.OperationID < ops[j].op.OperationID })

	covered := 0
	for _, o := range ops {
		role := operationRole(o.op)
		require.Contains(t, []string{rolePublic, roleWorker, roleReader, roleProducer, roleAdmin, roleUnscopedAdmin}, role,
			"%s (%s %s) has no known x-permission in openapi.yaml", o.op.OperationID, o.method, o.path)
		if role == rolePublic {
			continue // health, readiness and enrollment take no principal
		}
		covered++
		t.Run(o.op.OperationID, func(t *testing.T) {
			// A fresh pair of tenants per operation: what one operation
			// changes (a revoked worker, a cancelled task) never decides
			// another's row, so the operations run side by side.
			t.Parallel()
			a := newTenant(t, g, "a-"+o.op.OperationID)
			b := newTenant(t, g, "b-"+o.op.OperationID)
			// A's worker is granted to B, so that B's grant is A's to
			// withdraw; nothing of B's is granted to A.
			grantToB := func() {
				grant, err := g.Control.GrantWorkerWithResponse(context.Background(), a.worker, b.org)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, grant.StatusCode(), string(grant.Body))
			}
			grantToB()
			principals := []principal{
				{name: "worker", roles: []string{roleWorker}, scoped: true, cert: &a.workerCert},
				{name: "reader", roles: []string{roleReader}, scoped: true, token: scopedToken(t, g, a.org, "reader")},
				{name: "producer", roles: []string{roleReader, roleProducer}, scoped: true, token: scopedToken(t, g, a.org, "producer")},
				{name: "scoped-admin", roles: []string{roleReader, roleProducer, roleAdmin}, scoped: true, token: scopedToken(t, g, a.org, "admin")},
				{name: "unscoped-admin", roles: []string{roleReader, roleProducer, roleAdmin, roleUnscopedAdmin}, token: g.AdminToken},
			}
			slots := resourceSlots(o.op, o.params)
			foreignIDs := b.ids()
			// A worker of B's that serves A too: A sees it, never B's part.
			_, foreignIDs["shared worker's attempt of B"] = newSharedWorker(t, g, a, b)
			before := tenantSnapshot(t, g, b)

			// Every combination naming something of B's, by A's principals,
			// against the same request naming nothing that exists.
			for _, combo := range combinations(len(slots)) {
				if !slices.Contains(combo, foreign) {
					continue
				}
				asMissing := slices.Clone(combo)
				for i := range asMissing {
					if asMissing[i] == foreign {
						asMissing[i] = missing
					}
				}
				for _, p := range principals {
					if !p.scoped {
						continue
					}
					onForeign := call(t, g, o.method, o.path, o.op, slots, combo, a, b, p)
					onMissing := call(t, g, o.method, o.path, o.op, slots, asMissing, a, b, p)
					label := fmt.Sprintf("%s %s as %s with %s", o.method, o.path, p.name, describe(slots, combo))
					require.Equal(t, onMissing.signature(), onForeign.signature(), "%s answers differently from a missing resource: %s", label, onForeign.body)
					// A batch answers each item on its own, and a list filter
					// on B's organization lists nothing: there, success is
					// fine as long as it says what it says of a missing one.
					if !slices.ContainsFunc(slots, func(s slot) bool { return s.where == "body-attempt" || s.where == "query" }) {
						require.False(t, onForeign.status >= 200 && onForeign.status < 300, "%s succeeded: %s", label, onForeign.body)
					}
					requireNoLeak(t, label, onForeign, foreignIDs, onForeign.named)
				}
			}
			require.Equal(t, before, tenantSnapshot(t, g, b), "%s changed the other organization's rows", o.op.OperationID)

			// A's own resources: a holder of the role is not refused, anyone
			// else is. Least privileged first, so a change made by an
			// allowed caller comes after every refusal.
			ownCombo := make([]choice, len(slots))
			// Rows a caller may delete, put back before the next caller.
			deletable := []struct {
				table string
				id    uuid.UUID
				row   string
			}{{table: "secrets", id: a.secret}, {table: "scope_targets", id: a.scopeTarget}, {table: "threat_exclusions", id: a.exclusion}}
			for i, d := range deletable {
				require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT t::text FROM `+d.table+` t WHERE id = $1`, d.id).Scan(&deletable[i].row))
			}
			for _, p := range principals {
				grantToB() // withdrawn by the caller before, if it may
				// Deleted by the caller before, if it may.
				for _, d := range deletable {
					_, err := g.Pool.Exec(context.Background(), `INSERT INTO `+d.table+` SELECT ($1::text::`+d.table+`).* ON CONFLICT (id) DO NOTHING`, d.row)
					require.NoError(t, err)
				}
				// A schedule's deletion keeps its row (soft delete).
				_, err := g.Pool.Exec(context.Background(), `UPDATE schedules SET deleted_at = NULL WHERE id = $1`, a.schedule)
				require.NoError(t, err)
				res := call(t, g, o.method, o.path, o.op, slots, ownCombo, a, b, p)
				label := fmt.Sprintf("%s %s as %s on its own resources", o.method, o.path, p.name)
				require.Less(t, res.status, 500, "%s: %s", label, res.body)
				if p.holds(role) {
					require.NotContains(t, []int{401, 403, 404}, res.status, "%s is refused: %s", label, res.body)
				} else {
					require.Contains(t, []int{401, 403}, res.status, "%s is not refused: %s", label, res.body)
				}
				if p.scoped {
					known := res.named
					if slices.Contains(grantListing, operationID(o.op)) {
						known = append(known, b.org) // the owner granted B itself
					}
					requireNoLeak(t, label, res, foreignIDs, known)
				}
			}
		})
	}
	require.Greater(t, covered, 40, "the matrix covers every operation of the spec")
}

// clients keeps one HTTP client per gateway and certificate, so that the
// matrix's thousands of calls reuse their connections rather than each
// paying a TLS handshake (and leaving its connection open).
var clients sync.Map // clientKey → *http.Client

type clientKey struct {
	url  string
	cert *tls.Certificate
}

func clientFor(g *harness.Gateway, cert *tls.Certificate) *http.Client {
	key := clientKey{g.URL, cert}
	if c, ok := clients.Load(key); ok {
		return c.(*http.Client)
	}
	c, _ := clients.LoadOrStore(key, g.HTTPClient(cert))
	return c.(*http.Client)
}

// operationID is the spec's operationId (the embedded spec capitalises it).
func operationID(op *openapi3.Operation) string {
	return strings.ToLower(op.OperationID[:1]) + op.OperationID[1:]
}

// operationRole is the role an operation needs: its x-permission in the
// contract, the one place the gateway reads it from too.
func operationRole(op *openapi3.Operation) string {
	role, _ := op.Extensions["x-permission"].(string)
	return role
}

// resourceSlots lists what an operation names that belongs to an
// organization.
func resourceSlots(op *openapi3.Operation, params openapi3.Parameters) []slot {
	var slots []slot
	for _, p := range params {
		name := p.Value.Name
		if p.Value.In == "path" && !(name == "organization_id" && slices.Contains(granteeOperations, operationID(op))) {
			slots = append(slots, slot{kind: name, where: "path"})
		}
		if p.Value.In == "query" && name == "organization_id" {
			slots = append(slots, slot{kind: name, where: "query"})
		}
	}
	if body := requestSchema(op); body != nil {
		if _, ok := body.Properties["organization_id"]; ok {
			slots = append(slots, slot{kind: "organization_id", where: "body"})
		}
		if example, ok := requestExample(op).(map[string]any); ok && strings.Contains(mustString(example), `"attempt_id"`) {
			slots = append(slots, slot{kind: "attempt_id", where: "body-attempt"})
		}
	}
	return slots
}

// combinations lists every assignment of own/foreign to n slots.
func combinations(n int) [][]choice {
	out := [][]choice{{}}
	for range n {
		var next [][]choice
		for _, c := range out {
			next = append(next, append(slices.Clone(c), own), append(slices.Clone(c), foreign))
		}
		out = next
	}
	return out
}

func describe(slots []slot, combo []choice) string {
	var parts []string
	for i, s := range slots {
		parts = append(parts, fmt.Sprintf("%s(%s)=%s", s.kind, s.where, combo[i]))
	}
	return strings.Join(parts, ", ")
}

// answer is what the gateway said, and the ids the request itself named.
type answer struct {
	status int
	body   string
	named  []uuid.UUID
}

// signature is what a caller can tell from an answer apart from ids: the
// status and every code, status and state value in the body.
func (a answer) signature() string {
	var v any
	var found []string
	if json.Unmarshal([]byte(a.body), &v) == nil {
		collectOutcome(v, &found)
	}
	sort.Strings(found)
	return fmt.Sprintf("%d %v", a.status, found)
}

func collectOutcome(v any, found *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "code" || k == "status" || k == "state" {
				*found = append(*found, fmt.Sprintf("%s=%v", k, val))
			}
			collectOutcome(val, found)
		}
	case []any:
		for _, val := range x {
			collectOutcome(val, found)
		}
	}
}

func requireNoLeak(t *testing.T, label string, a answer, foreignIDs map[string]uuid.UUID, named []uuid.UUID) {
	t.Helper()
	for kind, id := range foreignIDs {
		if slices.Contains(named, id) {
			continue
		}
		require.NotContains(t, a.body, id.String(), "%s leaks the other organization's %s", label, kind)
	}
}

// call sends one request of the operation with each slot filled from the
// chosen tenant.
func call(t *testing.T, g *harness.Gateway, method, path string, op *openapi3.Operation, slots []slot, combo []choice,
	a, b tenant, p principal) answer {
	t.Helper()
	pick := func(c choice) (tenant, bool) {
		switch c {
		case own:
			return a, true
		case foreign:
			return b, true
		}
		return tenant{}, false
	}
	var named []uuid.UUID
	idFor := func(kind string, c choice) uuid.UUID {
		tn, ok := pick(c)
		id := uuid.New()
		if ok {
			id = tn.ids()[kind]
		}
		named = append(named, id)
		return id
	}
	leaseToken := ""
	query := []string{}
	body := requestExample(op)
	for i, s := range slots {
		switch s.where {
		case "path":
			id := idFor(s.kind, combo[i])
			path = strings.Replace(path, "{"+s.kind+"}", id.String(), 1)
			if s.kind == "attempt_id" {
				if tn, ok := pick(combo[i]); ok {
					leaseToken = tn.leaseToken
				} else {
					leaseToken = a.leaseToken
				}
			}
		case "query":
			query = append(query, s.kind+"="+idFor(s.kind, combo[i]).String())
		case "body":
			m, _ := body.(map[string]any)
			if m == nil {
				m = map[string]any{}
			}
			m[s.kind] = idFor(s.kind, combo[i]).String()
			body = m
		case "body-attempt":
			id := idFor(s.kind, combo[i])
			token := a.leaseToken
			if tn, ok := pick(combo[i]); ok {
				token = tn.leaseToken
			}
			body = replaceKeys(body, map[string]any{"attempt_id": id.String(), "lease_token": token})
		}
	}
	// The grantee of a grant is always the other organization.
	if strings.Contains(path, "{organization_id}") {
		path = strings.Replace(path, "{organization_id}", b.org.String(), 1)
		named = append(named, b.org)
	}
	if strings.Contains(path, "{") {
		t.Fatalf("unfilled path parameter in %s", path)
	}
	if len(query) > 0 {
		path += "?" + strings.Join(query, "&")
	}

	var reader io.Reader
	contentType := ""
	if op.RequestBody != nil {
		if _, ok := op.RequestBody.Value.Content["application/octet-stream"]; ok {
			reader, contentType = bytes.NewReader(a.uploadBody), "application/octet-stream"
		} else {
			reader, contentType = strings.NewReader(mustString(body)), "application/json"
		}
	}
	req, err := http.NewRequestWithContext(context.Background(), method, g.URL+path, reader)
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Idempotency-Key", uuid.NewString())
	if leaseToken != "" {
		req.Header.Set("Lease-Token", leaseToken)
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	res, err := clientFor(g, p.cert).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return answer{status: res.StatusCode, body: string(raw), named: named}
}

// requestSchema is an operation's JSON request body schema, if any.
func requestSchema(op *openapi3.Operation) *openapi3.Schema {
	if op.RequestBody == nil {
		return nil
	}
	mt := op.RequestBody.Value.Content["application/json"]
	if mt == nil || mt.Schema == nil {
		return nil
	}
	return mt.Schema.Value
}

// requestExample is a fresh copy of an operation's JSON request example
// (the spec test requires one on every JSON body).
func requestExample(op *openapi3.Operation) any {
	if op.RequestBody == nil {
		return nil
	}
	mt := op.RequestBody.Value.Content["application/json"]
	if mt == nil {
		return nil
	}
	var example any
	switch {
	case mt.Example != nil:
		example = mt.Example
	case mt.Schema != nil && mt.Schema.Value.Example != nil:
		example = mt.Schema.Value.Example
	default:
		return map[string]any{}
	}
	var copied any
	if err := json.Unmarshal([]byte(mustString(example)), &copied); err != nil {
		panic(err)
	}
	return copied
}

// replaceKeys sets every occurrence of the keys, at any depth.
func replaceKeys(v any, values map[string]any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if nv, ok := values[k]; ok {
				x[k] = nv
			} else {
				x[k] = replaceKeys(val, values)
			}
		}
	case []any:
		for i := range x {
			x[i] = replaceKeys(x[i], values)
		}
	}
	return v
}

func mustString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// tenantSnapshot is every row that belongs to a tenant, as text: the
// organization's own rows, its worker, that worker's assignments and grants.
func tenantSnapshot(t *testing.T, g *harness.Gateway, tn tenant) string {
	t.Helper()
	var out strings.Builder
	for _, q := range []string{
		`SELECT t::text FROM organizations t WHERE id = $1`,
		`SELECT t::text FROM worker_tasks t WHERE organization_id = $1`,
		`SELECT t::text FROM worker_task_attempts t WHERE organization_id = $1`,
		`SELECT t::text FROM organization_workers t WHERE organization_id = $1 OR worker_id = $2`,
		`SELECT t::text FROM worker_grants t WHERE organization_id = $1 OR worker_id = $2`,
		`SELECT t::text FROM workers t WHERE id = $2 AND $1::uuid IS NOT NULL`,
		`SELECT t::text FROM api_tokens t WHERE organization_id = $1`,
		`SELECT t::text FROM scans t WHERE organization_id = $1`,
		`SELECT t::text FROM schedules t WHERE organization_id = $1`,
		`SELECT t::text FROM schedule_versions t JOIN schedules s ON s.id = t.schedule_id WHERE s.organization_id = $1`,
		`SELECT t::text FROM schedule_fires t WHERE organization_id = $1`,
		`SELECT t::text FROM webhook_targets t WHERE organization_id = $1`,
		`SELECT t::text FROM webhook_deliveries t WHERE organization_id = $1`,
		`SELECT t::text FROM secrets t WHERE organization_id = $1`,
		`SELECT t::text FROM files t WHERE organization_id = $1`,
		`SELECT t::text FROM worker_artifact_uploads t WHERE organization_id = $1`,
		`SELECT t::text FROM assets t WHERE organization_id = $1`,
	} {
		args := []any{tn.org}
		if strings.Contains(q, "$2") {
			args = append(args, tn.worker)
		}
		rows, err := g.Pool.Query(context.Background(), q+` ORDER BY 1`, args...)
		require.NoError(t, err, q)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out.WriteString(s + "\n")
		}
		require.NoError(t, rows.Err())
	}
	return out.String()
}
