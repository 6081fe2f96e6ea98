package security

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// redactedValue is the secret the worker echoes: a quote, a backslash and
// a non-ASCII letter, so its JSON-escaped spellings differ from it.
const redactedValue = `pa"ss\wörd-7Qx`

// redactedName is the secret's name, as the marker shows it.
const redactedName = "LOGIN_PASSWORD"

// valueEncodings are the spellings of the value a worker may send, each
// sent in its own round.
func valueEncodings() map[string]string {
	esc, _ := json.Marshal(redactedValue)
	return map[string]string{
		"plain":      redactedValue,
		"base64":     base64.StdEncoding.EncodeToString([]byte(redactedValue)),
		"base64url":  base64.URLEncoding.EncodeToString([]byte(redactedValue)),
		"json":       string(esc[1 : len(esc)-1]),
		"json-ascii": `pa\"ss\\w\u00f6rd-7Qx`,
		"url-query":  url.QueryEscape(redactedValue),
	}
}

// searchedSpellings are what no reader may see: every encoding, the value
// as an answer would carry it (JSON- and HTML-escaped), and either half of
// each encoding (a value cut in two by a log chunk must not leave one).
func searchedSpellings() map[string]string {
	out := valueEncodings()
	for name, enc := range valueEncodings() {
		esc, _ := json.Marshal(enc)
		out[name+" in JSON"] = string(esc[1 : len(esc)-1])
		out[name+" in HTML"] = html.EscapeString(enc)
	}
	for name, enc := range valueEncodings() {
		half := len(enc) / 2
		out[name+", first half"], out[name+", second half"] = enc[:half], enc[half:]
	}
	return out
}

// workerWriteDriver sends one worker operation, with the value in every
// text field the contract gives it.
type workerWriteDriver func(t *testing.T, r *redactionRound, op *openapi3.Operation)

// workerWrites are the worker operations that take a body, in the order a
// round sends them (the completions last). Exempt ones say why nothing is
// sent. The test fails on a worker operation with a body that is in
// neither, so a new one must be taught here before it ships.
var (
	workerWrites = []struct {
		op    string
		drive workerWriteDriver
	}{
		{"heartbeatWorker", driveHeartbeatWorker},
		{"acquireLeases", driveAcquireLeases},
		{"appendLogs", driveAppendLogs},
		{"submitResults", driveSubmitResults},
		{"openArtifactUpload", driveOpenArtifactUpload},
		{"completeAttempts", driveCompleteAttempts},
		{"completeAttempt", driveCompleteAttempt},
	}
	workerWritesExempt = map[string]string{
		"renewCertificate": "a renewal names no attempt, and its one field is a CSR",
		"uploadArtifact":   "artifact bytes are stored as sent (their name and type are redacted when the upload opens)",
	}
)

// redactionRound is one encoding's round: two leased attempts of tasks
// that reference the secret.
type redactionRound struct {
	g                *harness.Gateway
	leaser, w        workerCaller
	text             string // the value in this round's spelling, with text around it
	enc              string
	tasks            []uuid.UUID
	attempts, tokens []string
	files            []uuid.UUID
	sequence         int
}

// TestWorkerTextRedacted is generated from openapi.yaml: every worker
// operation that takes a body is sent a secret its attempt's task was
// given — plainly, base64-encoded, JSON-escaped, and cut across two log
// chunks — in every text field its schema has; then every GET operation a
// reader token of the organization may call, and the console's task page,
// must show none of it.
func TestWorkerTextRedacted(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	spec, err := api.GetSpec()
	require.NoError(t, err)

	// Every worker operation with a body is either driven or exempt.
	ops := map[string]*openapi3.Operation{}
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			ops[operationID(op)] = op
			if op.RequestBody == nil || !requiresScheme(spec, op, "workerMTLS") {
				continue
			}
			id := operationID(op)
			_, exempt := workerWritesExempt[id]
			driven := slices.ContainsFunc(workerWrites, func(d struct {
				op    string
				drive workerWriteDriver
			}) bool {
				return d.op == id
			})
			require.True(t, exempt || driven, "worker operation %s takes a body but this test does not know how to send it text: add it to workerWrites", id)
		}
	}

	org, worker, cert := newSecretHolder(t, g, "redaction", 10)
	reader := scopedToken(t, g, org, "reader")
	leaser := workerCaller{g: g, http: g.HTTPClient(&cert)}
	// Every other round writes to a second replica, which did not hand out
	// the leases and so knows nothing of their tasks' secrets.
	other := g.StartReplica(t)
	writers := []workerCaller{leaser, {g: other, http: other.HTTPClient(&cert)}}

	var tasks, files []uuid.UUID
	encodings := valueEncodings()
	names := make([]string, 0, len(encodings))
	for name := range encodings {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		r := &redactionRound{g: g, leaser: leaser, w: writers[i%2], enc: encodings[name], text: "echo " + encodings[name] + " end"}
		r.lease(t, org)
		for _, d := range workerWrites {
			d.drive(t, r, ops[d.op])
		}
		tasks, files = append(tasks, r.tasks...), append(files, r.files...)
	}

	// Every reader-visible answer, and the console's task pages.
	ids := map[string][]uuid.UUID{"organization_id": {org}, "worker_id": {worker}, "task_id": tasks, "file_id": files}
	answered, marked := searchReaderAnswers(t, g, spec, reader, ids)
	for _, must := range []string{"getTask", "listTasks", "listTaskResults", "getTaskLogs", "listThreats", "listAssets",
		"listTaskArtifacts", "getFile", "getStats", "listWorkers", "getWorker"} {
		require.Contains(t, answered, must, "a reader's %s was not read", must)
	}
	// The text arrived, redacted: the search was not of empty answers.
	for _, must := range []string{"getTask", "listTaskResults", "getTaskLogs", "listThreats", "listTaskArtifacts", "getFile", "getWorker"} {
		require.Contains(t, marked, must, "a reader's %s shows no redacted text", must)
	}
	searchConsoleTaskPages(t, g, reader, tasks)
}

// newSecretHolder makes an organization whose worker (of the given
// capacity) may be handed tasks that reference the secret redactedName,
// and whose scope lets it scan *.example.
func newSecretHolder(t *testing.T, g *harness.Gateway, name string, capacity int) (org, worker uuid.UUID, cert tls.Certificate) {
	t.Helper()
	ctx := context.Background()
	org = g.NewOrganization(t, name)
	issued, err := g.CA.IssueClient(name+"-worker", time.Hour)
	require.NoError(t, err)
	cert, err = tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	pemText := string(issued.CertPEM)
	created, err := g.Control.CreateWorkerWithResponse(ctx, apiclient.CreateWorkerRequest{Name: name + "-worker",
		WorkerType: "scanner", MaxConcurrentTasks: &capacity, CertificatePem: &pemText, OrganizationId: &org})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	value := redactedValue
	sec, err := g.Control.CreateSecretWithResponse(ctx, apiclient.CreateSecretRequest{OrganizationId: org, Name: redactedName, Value: &value})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, sec.StatusCode(), string(sec.Body))
	scope, err := g.Control.AddScopeTargetWithResponse(ctx, org, apiclient.CreateScopeTargetRequest{Kind: "domain", Value: "*.example"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, scope.StatusCode(), string(scope.Body))
	return org, created.JSON201.Id, cert
}

// lease creates the round's two tasks and leases them.
func (r *redactionRound) lease(t *testing.T, org uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		payload := apiclient.JSONObject(`{"plugin": "echo", "input": {}}`)
		refs := []string{redactedName}
		maxAttempts := 1
		res, err := r.g.Control.CreateTaskWithResponse(ctx, nil, apiclient.CreateTaskRequest{OrganizationId: org,
			TaskType: "scanner_plugin", Payload: &payload, SecretRefs: &refs, MaxAttempts: &maxAttempts})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		r.tasks = append(r.tasks, res.JSON201.Id)
	}
	for len(r.attempts) < 2 {
		var leases struct {
			Leases []struct {
				AttemptID  string            `json:"attempt_id"`
				LeaseToken string            `json:"lease_token"`
				Secrets    map[string]string `json:"secrets"`
			} `json:"leases"`
		}
		r.leaser.mustJSON(t, "POST", "/v1/leases", "", map[string]any{"max_tasks": 2 - len(r.attempts), "wait_seconds": 10}, http.StatusOK, &leases)
		for _, l := range leases.Leases {
			require.Equal(t, redactedValue, l.Secrets[redactedName], "the lease carries the secret")
			r.attempts, r.tokens = append(r.attempts, l.AttemptID), append(r.tokens, l.LeaseToken)
		}
	}
}

type omitValue struct{}

// omit leaves a property out of a generated body.
var omit = omitValue{}

// fillBody builds a body for schema with the round's text in every text
// field; known gives the values of fields that are not text (ids, tokens,
// numbers, patterns). A field it cannot fill fails the test.
func (r *redactionRound) fillBody(t *testing.T, s *openapi3.Schema, known map[string]any) any {
	t.Helper()
	known = mapsWith(map[string]any{
		"last_sequence_number": omit, "outcome": "failed", "type": "hostname", "cve_ids": []string{"CVE-2024-0001"},
		"cwe_ids": []string{"CWE-79"}, "out_of_scope": omit, "sequence_number": r.nextSequence(),
	}, known)
	return r.fill(t, "body", s, known, false)
}

func mapsWith(base, over map[string]any) map[string]any {
	for k, v := range over {
		base[k] = v
	}
	return base
}

func (r *redactionRound) nextSequence() int {
	r.sequence++
	return r.sequence
}

func (r *redactionRound) fill(t *testing.T, name string, s *openapi3.Schema, known map[string]any, scoped bool) any {
	t.Helper()
	if v, ok := known[name]; ok {
		return v
	}
	if name == "value" && scoped {
		return "redaction.example" // in the scan scope, so its record is ingested
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	switch {
	case s.Type.Is("string"):
		require.True(t, s.Pattern == "" && s.Format == "", "field %s is not free text (pattern %q, format %q): give it a value in known", name, s.Pattern, s.Format)
		return r.text
	case s.Type.Is("boolean"):
		return false
	case s.Type.Is("number"):
		if s.Min != nil {
			return *s.Min
		}
		return 0
	case s.Type.Is("integer"):
		return omit
	case s.Type.Is("array"):
		item := s.Items.Value
		kind, ok := item.Properties["kind"]
		if !ok {
			return []any{r.fill(t, name+"[]", item, known, scoped)}
		}
		// One item per kind, about something in scope and about text.
		var out []any
		for _, k := range kind.Value.Enum {
			for _, inScope := range []bool{true, false} {
				v := r.fill(t, name+"[]", item, mapsWith(map[string]any{"kind": k}, known), inScope)
				out = append(out, v)
			}
		}
		return out
	case s.Type.Is("object") && len(s.Properties) == 0:
		// A JSON document: the text as a value and as a key.
		return map[string]any{"note": r.text, r.text: "key", "list": []any{r.text}}
	case s.Type.Is("object"):
		out := map[string]any{}
		for prop, ps := range s.Properties {
			v := r.fill(t, prop, ps.Value, known, scoped)
			if v == omit {
				require.False(t, slices.Contains(s.Required, prop), "required field %s has no value: give it one in known", prop)
				continue
			}
			out[prop] = v
		}
		return out
	}
	t.Fatalf("field %s has a type this test cannot fill: %v", name, s.Type)
	return nil
}

func (r *redactionRound) attemptPath(i int) string { return "/v1/attempts/" + r.attempts[i] }

func driveHeartbeatWorker(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	leases := []any{}
	for i := range r.attempts {
		leases = append(leases, map[string]any{"attempt_id": r.attempts[i], "lease_token": r.tokens[i]})
	}
	body := r.fillBody(t, requestSchema(op), map[string]any{"leases": leases})
	r.w.mustJSON(t, "POST", "/v1/heartbeat", "", body, http.StatusOK, nil)
}

// driveAcquireLeases polls, without waiting, with the text in the
// advertisement: the poll names no attempt, yet the worker holds the
// round's attempts, whose secret it may echo there.
func driveAcquireLeases(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	body := r.fillBody(t, requestSchema(op), map[string]any{"wait_seconds": 0, "max_tasks": 1, "protocol_version": "1"})
	r.w.mustJSON(t, "POST", "/v1/leases", "", body, http.StatusOK, nil)
}

// driveAppendLogs sends the text in one chunk, then the value cut in two
// chunks at each of its characters, as a worker would: what an answer's
// next_offset did not take is sent again with the next chunk.
func driveAppendLogs(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	require.Contains(t, requestSchema(op).Properties, "data")
	offset, pending := int64(0), ""
	send := func(data string) {
		pending += data
		var ans struct {
			NextOffset int64 `json:"next_offset"`
		}
		r.w.mustJSON(t, "POST", r.attemptPath(0)+"/logs", r.tokens[0], map[string]any{"offset": offset, "data": pending}, http.StatusOK, &ans)
		pending = pending[ans.NextOffset-offset:]
		offset = ans.NextOffset
	}
	send(r.text + "\n")
	for cut := 1; cut < len(r.enc); cut++ {
		if !utf8.RuneStart(r.enc[cut]) {
			continue // a chunk is text: it ends between characters
		}
		send(r.enc[:cut])
		send(r.enc[cut:] + " done\n")
	}
	for range 3 {
		if pending != "" {
			send("")
		}
	}
	require.Empty(t, pending, "the log takes everything sent")
}

func driveSubmitResults(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	body := r.fillBody(t, requestSchema(op), nil)
	r.w.mustJSON(t, "POST", r.attemptPath(0)+"/results", r.tokens[0], body, http.StatusOK, nil)
}

// driveOpenArtifactUpload opens an upload with the text in its name and
// type, uploads and commits it, so the file is listed.
func driveOpenArtifactUpload(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	content := []byte("artifact bytes")
	sum := sha256.Sum256(content)
	body := r.fillBody(t, requestSchema(op), map[string]any{"size_bytes": len(content), "sha256": hex.EncodeToString(sum[:])})
	var session struct {
		UploadID uuid.UUID         `json:"upload_id"`
		Headers  map[string]string `json:"headers"`
	}
	r.w.mustJSON(t, "POST", r.attemptPath(0)+"/artifacts", r.tokens[0], body, http.StatusCreated, &session)
	status, answer := r.w.do(t, "PUT", "/v1/uploads/"+session.UploadID.String(), "", "application/octet-stream", content)
	require.Less(t, status, 300, string(answer))
	var file struct {
		ID uuid.UUID `json:"id"`
	}
	status, answer = r.w.do(t, "POST", "/v1/uploads/"+session.UploadID.String()+"/commit", "", "", nil)
	require.Equal(t, http.StatusOK, status, string(answer))
	require.NoError(t, json.Unmarshal(answer, &file))
	r.files = append(r.files, file.ID)
}

func driveCompleteAttempts(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	body := r.fillBody(t, requestSchema(op), map[string]any{"attempt_id": r.attempts[1], "lease_token": r.tokens[1]})
	var ans struct {
		Completions []struct {
			Status int `json:"status"`
		} `json:"completions"`
	}
	r.w.mustJSON(t, "POST", "/v1/attempts/complete", "", body, http.StatusOK, &ans)
	require.Len(t, ans.Completions, 1)
	require.Equal(t, http.StatusOK, ans.Completions[0].Status)
}

func driveCompleteAttempt(t *testing.T, r *redactionRound, op *openapi3.Operation) {
	body := r.fillBody(t, requestSchema(op), nil)
	r.w.mustJSON(t, "POST", r.attemptPath(0)+"/complete", r.tokens[0], body, http.StatusOK, nil)
}

// searchReaderAnswers calls every GET operation of the contract with the
// reader's token, each path parameter filled with each id of its kind (a
// random one for kinds the test made none of), and requires that no answer
// a reader gets carries the value. Returns the operations that answered,
// and those whose answer showed the redaction marker.
func searchReaderAnswers(t *testing.T, g *harness.Gateway, spec *openapi3.T, token string, ids map[string][]uuid.UUID) (answered, marked []string) {
	t.Helper()
	client := g.HTTPClient(nil)
	paths := spec.Paths.Map()
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, path := range keys {
		op := paths[path].Get
		if op == nil || !requiresScheme(spec, op, "bearerAuth") {
			continue
		}
		for _, p := range expandPath(path, ids) {
			req, err := http.NewRequest("GET", g.URL+p, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			res, err := client.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			require.Less(t, res.StatusCode, 500, "GET %s: %s", p, body)
			if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
				continue // not a reader's
			}
			if res.StatusCode == http.StatusOK {
				answered = append(answered, operationID(op))
			}
			if strings.Contains(string(body), "[REDACTED:"+redactedName+"]") {
				marked = append(marked, operationID(op))
			}
			requireNoSpelling(t, "GET "+p, string(body))
		}
	}
	return answered, marked
}

// expandPath fills each path parameter with each id of its kind.
func expandPath(path string, ids map[string][]uuid.UUID) []string {
	m := regexp.MustCompile(`\{([a-z_]+)\}`).FindStringSubmatch(path)
	if m == nil {
		return []string{path}
	}
	values := ids[m[1]]
	if len(values) == 0 {
		values = []uuid.UUID{uuid.New()}
	}
	var out []string
	for _, id := range values {
		out = append(out, expandPath(strings.Replace(path, m[0], id.String(), 1), ids)...)
	}
	return out
}

// requireNoSpelling fails when text carries the value in any spelling,
// also after decoding it as JSON.
func requireNoSpelling(t *testing.T, where, text string) {
	t.Helper()
	texts := []string{text}
	var doc any
	if json.Unmarshal([]byte(text), &doc) == nil {
		texts = append(texts, decodedStrings(doc)...)
	}
	for name, spelling := range searchedSpellings() {
		for _, s := range texts {
			require.NotContains(t, s, spelling, "%s shows the secret (%s)", where, name)
		}
	}
}

func decodedStrings(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = append(out, x)
	case map[string]any:
		for k, val := range x {
			out = append(out, k)
			out = append(out, decodedStrings(val)...)
		}
	case []any:
		for _, val := range x {
			out = append(out, decodedStrings(val)...)
		}
	}
	return out
}

// searchConsoleTaskPages signs in to the console with the reader's token
// and reads each task's page and the fragments it loads.
func searchConsoleTaskPages(t *testing.T, g *harness.Gateway, token string, tasks []uuid.UUID) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := g.HTTPClient(nil)
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string) (int, string) {
		res, err := client.Get(g.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	status, page := get("/ui/signin")
	require.Equal(t, http.StatusOK, status, page)
	req, err := http.NewRequest(http.MethodPost, g.URL+"/ui/signin", strings.NewReader(url.Values{"token": {token}, "next": {"/ui/"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin") // as the browser says of the sign-in page's post
	res, err := client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	fragment := regexp.MustCompile(`(?:hx-get|href|src)="(/ui/[^"]+)"`)
	marked := false
	for _, task := range tasks {
		status, page := get("/ui/tasks/" + task.String())
		require.Equal(t, http.StatusOK, status, page)
		requireNoSpelling(t, "the console's task page", page)
		marked = marked || strings.Contains(page, "[REDACTED:"+redactedName+"]")
		for _, m := range fragment.FindAllStringSubmatch(page, -1) {
			link := html.UnescapeString(m[1])
			if !strings.Contains(link, task.String()) {
				continue
			}
			_, part := get(link)
			requireNoSpelling(t, fmt.Sprintf("the console's %s", link), part)
		}
	}
	require.True(t, marked, "no console task page shows the redacted text")
}

// TestChangedAdvertisementIsRedactedAfterACachedOne: a replica remembers an
// advertisement that needed no redaction while its worker held no secret,
// and skips reading the worker's attempts while the worker repeats it. Once
// the worker holds a lease with a secret, an advertisement that differs —
// the secret echoed into its version — must be redacted, not taken for the
// remembered one; and the remembered one still needs nothing.
func TestChangedAdvertisementIsRedactedAfterACachedOne(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org, worker, cert := newSecretHolder(t, g, "advertisement", 2)
	w := workerCaller{g: g, http: g.HTTPClient(&cert)}
	reader := g.ControlClient(t, scopedToken(t, g, org, "reader"))
	shownVersion := func() string {
		t.Helper()
		res, err := reader.GetWorkerWithResponse(ctx, worker)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		return *res.JSON200.SoftwareVersion
	}
	poll := func(version string, wait int) (leased int) {
		var answer struct {
			Leases []struct {
				Secrets map[string]string `json:"secrets"`
			} `json:"leases"`
		}
		w.mustJSON(t, "POST", "/v1/leases", "", map[string]any{"max_tasks": 1, "wait_seconds": wait,
			"capabilities": map[string]any{"plugins": []string{"echo"}}, "software_version": version}, http.StatusOK, &answer)
		for _, l := range answer.Leases {
			require.Equal(t, redactedValue, l.Secrets[redactedName], "the lease carries the secret")
		}
		return len(answer.Leases)
	}

	// Remembered: the worker holds nothing, so nothing needs redacting.
	require.Zero(t, poll("worker/1.0", 0))
	require.Equal(t, "worker/1.0", shownVersion())

	// The worker leases a task given the secret, with the same advertisement.
	payload := apiclient.JSONObject(`{"plugin": "echo", "input": {}}`)
	refs := []string{redactedName}
	task, err := g.Control.CreateTaskWithResponse(ctx, nil, apiclient.CreateTaskRequest{OrganizationId: org,
		TaskType: "scanner_plugin", Payload: &payload, SecretRefs: &refs})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, task.StatusCode(), string(task.Body))
	require.Equal(t, 1, poll("worker/1.0", 10))

	// A changed advertisement echoing the secret is redacted.
	require.Zero(t, poll("worker/1.0 "+redactedValue, 0))
	require.Equal(t, "worker/1.0 [REDACTED:"+redactedName+"]", shownVersion())
	// The remembered one needs nothing still.
	require.Zero(t, poll("worker/1.0", 0))
	require.Equal(t, "worker/1.0", shownVersion())
}
