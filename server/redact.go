package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/redact"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// Worker text. A worker may echo a secret its task was given into anything
// it sends: its log, its completion error, its results, its heartbeat's
// capabilities, an artifact's name. Everything a worker writes passes one
// step before a handler sees it: redactWorkerText, a strict middleware on
// every operation, which replaces the values of the secrets the attempt's
// task references (plainly, JSON-escaped or base64-encoded: internal/redact)
// in every text of the decoded body. workerTextRules says for each worker
// operation with a body which attempts' secrets apply; the handler refuses
// to build when the contract has a worker operation with a body that the
// table does not name, so a new worker write cannot skip the step.
//
// Most tasks reference no secret, and their writes must cost nothing more:
// the replica remembers the secret references of the attempts it leased
// (attemptSecretsCache), so their writes run no query for this. A write
// for an attempt another replica leased asks once per attempt, and only an
// attempt whose task has secrets reads them on each write.

// workerTextRule redacts one worker operation's decoded request. It may
// return a context carrying what the handler passes on (the log's
// redactor, applied chunk by chunk by the store).
type workerTextRule func(ctx context.Context, h *handlers, request any) (context.Context, error)

// notText are fields of worker bodies the gateway compares and never shows:
// redacting them would break the comparison.
var notText = []string{"lease_token", "sha256"}

// workerTextRules name every worker operation that has a request body.
var workerTextRules = map[string]workerTextRule{
	"SubmitResults": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		req := request.(api.SubmitResultsRequestObject)
		return ctx, h.redactAttemptBody(ctx, req.AttemptId, req.Params.LeaseToken, req.Body)
	},
	"CompleteAttempt": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		req := request.(api.CompleteAttemptRequestObject)
		return ctx, h.redactAttemptBody(ctx, req.AttemptId, req.Params.LeaseToken, req.Body)
	},
	"OpenArtifactUpload": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		req := request.(api.OpenArtifactUploadRequestObject)
		return ctx, h.redactAttemptBody(ctx, req.AttemptId, req.Params.LeaseToken, req.Body)
	},
	"CompleteAttempts": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		items := request.(api.CompleteAttemptsRequestObject).Body.Completions
		refs := make([]store.AttemptRef, len(items))
		for i, it := range items {
			refs[i] = store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: it.AttemptId, LeaseToken: it.LeaseToken}
		}
		rs, err := h.attemptRedactors(ctx, refs)
		for i := range items {
			rs[items[i].AttemptId].Value(&items[i], notText...)
		}
		return ctx, err
	},
	// A log is redacted by the store, chunk by chunk, so that a value cut
	// by a chunk's end is still seen whole (store.AppendRedactedLog).
	"AppendLogs": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		req := request.(api.AppendLogsRequestObject)
		ref := store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken}
		rs, err := h.attemptRedactors(ctx, []store.AttemptRef{ref})
		if r := rs[req.AttemptId]; !r.Empty() {
			ctx = context.WithValue(ctx, logRedactorKey{}, r)
		}
		return ctx, err
	},
	// The worker's capabilities and version are shown with the worker to
	// every organization it serves: redacted with the secrets of every
	// attempt it holds, listed in the heartbeat or not.
	"HeartbeatWorker": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		b := request.(api.HeartbeatWorkerRequestObject).Body
		if b.Capabilities == nil && b.SoftwareVersion == nil {
			return ctx, nil
		}
		return ctx, h.redactAdvertisement(ctx, b)
	},
	// A poll names no attempt, but its advertisement (capabilities and
	// version) is shown with the worker as a heartbeat's is: it is redacted
	// with the secrets of every attempt the worker holds.
	"AcquireLeases": func(ctx context.Context, h *handlers, request any) (context.Context, error) {
		b := request.(api.AcquireLeasesRequestObject).Body
		if b == nil || (b.Capabilities == nil && b.SoftwareVersion == nil) {
			return ctx, nil
		}
		return ctx, h.redactAdvertisement(ctx, b)
	},
	// A certificate renewal names no attempt and carries only a CSR.
	"RenewCertificate": noAttemptText,
	// Artifact bytes are stored as sent, checked against the SHA-256 the
	// worker declared; their name and content type were redacted when the
	// upload was opened.
	"UploadArtifact": noAttemptText,
}

func noAttemptText(ctx context.Context, _ *handlers, _ any) (context.Context, error) { return ctx, nil }

// redactAdvertisement redacts a poll's or renewal's advertisement in place
// with the secrets of the worker's unfinished attempts. A worker repeats
// the same advertisement on every poll: once one was found to need nothing
// while the worker held no secret, this replica does not read again until
// it changes (advertisementCache).
func (h *handlers) redactAdvertisement(ctx context.Context, body any) error {
	if h.cfg.Secrets == nil {
		return nil // no key: no lease of a task with secrets is delivered
	}
	worker := workerFrom(ctx)
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	fingerprint := sha256.Sum256(raw)
	if h.advertisements.seen(worker, fingerprint) {
		return nil
	}
	live, err := h.store.WorkerLiveSecretRefs(ctx, worker)
	if err != nil {
		return err
	}
	rs, err := h.redactorsFor(ctx, live)
	if err != nil {
		return err
	}
	for _, r := range rs {
		r.Value(body, notText...)
	}
	if len(live) == 0 {
		h.advertisements.remember(worker, fingerprint)
	}
	return nil
}

// redactAttemptBody redacts one attempt's body in place.
func (h *handlers) redactAttemptBody(ctx context.Context, attempt uuid.UUID, token string, body any) error {
	rs, err := h.attemptRedactors(ctx, []store.AttemptRef{{WorkerID: workerFrom(ctx), AttemptID: attempt, LeaseToken: token}})
	rs[attempt].Value(body, notText...)
	return err
}

type logRedactorKey struct{}

// logRedactorFrom is the redactor of the attempt whose log a request
// appends to, nil when its task has no secrets.
func logRedactorFrom(ctx context.Context) store.LogRedactor {
	if r, ok := ctx.Value(logRedactorKey{}).(*redact.Redactor); ok {
		return r
	}
	return nil
}

// redactWorkerText is the strict middleware that applies workerTextRules.
func (s *Server) redactWorkerText(h *handlers) api.StrictMiddlewareFunc {
	return func(f api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
		rule, ok := workerTextRules[operationID]
		if !ok {
			return f
		}
		return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
			ctx, err := rule(ctx, h, request)
			if err != nil {
				return nil, err
			}
			return f(ctx, w, r, request)
		}
	}
}

// checkWorkerTextRules refuses a contract with a worker operation that has a
// request body and no rule.
func checkWorkerTextRules(rules map[string]workerTextRule) error {
	spec, err := loadSpec()
	if err != nil {
		return err
	}
	var missing []string
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody == nil || op.Security == nil {
				continue
			}
			for _, req := range *op.Security {
				if _, worker := req["workerMTLS"]; worker {
					if _, ok := rules[op.OperationID]; !ok {
						missing = append(missing, op.OperationID)
					}
				}
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("worker operations %s take a body but have no redaction rule (server/redact.go)", strings.Join(missing, ", "))
	}
	return nil
}

// attemptRedactors returns the redactor of each attempt whose task
// references secrets, by attempt id; an attempt without is absent, and a
// missing entry's nil redactor redacts nothing. On an error the map is
// empty and the request fails.
func (h *handlers) attemptRedactors(ctx context.Context, refs []store.AttemptRef) (map[uuid.UUID]*redact.Redactor, error) {
	if h.cfg.Secrets == nil {
		// No key to open secrets with: no lease of a task with secrets
		// is ever delivered, so no write has any to redact.
		return nil, nil
	}
	known := make(map[uuid.UUID]store.AttemptSecrets, len(refs))
	var ask []store.AttemptRef
	for _, ref := range refs {
		if e, ok := h.secretRefs.get(ref.AttemptID); ok {
			known[ref.AttemptID] = e
		} else {
			ask = append(ask, ref)
		}
	}
	if len(ask) > 0 {
		found, err := h.store.AttemptsSecretRefs(ctx, ask)
		if err != nil {
			return nil, err
		}
		for id, e := range found {
			h.secretRefs.put(id, e)
			known[id] = e
		}
	}
	return h.redactorsFor(ctx, known)
}

// redactorsFor builds the redactor of each attempt of known whose task's
// secrets exist, by attempt id.
func (h *handlers) redactorsFor(ctx context.Context, known map[uuid.UUID]store.AttemptSecrets) (map[uuid.UUID]*redact.Redactor, error) {
	var want []store.SecretRef
	for _, e := range known {
		for _, name := range e.Refs {
			want = append(want, store.SecretRef{OrganizationID: e.OrganizationID, Name: name})
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	sealed, err := h.store.SealedSecrets(ctx, want)
	if err != nil {
		return nil, err
	}
	type key struct {
		org  uuid.UUID
		name string
	}
	values := map[key]redact.Secret{}
	for _, s := range sealed {
		if v, err := h.cfg.Secrets.Open(s.Sealed, s.AAD()); err == nil {
			values[key{s.OrganizationID, s.Name}] = redact.Secret{Name: s.Name, Version: s.Version, Value: string(v)}
		}
	}
	out := map[uuid.UUID]*redact.Redactor{}
	for id, e := range known {
		var secrets []redact.Secret
		for _, name := range e.Refs {
			if v, ok := values[key{e.OrganizationID, name}]; ok {
				secrets = append(secrets, v)
			}
		}
		if len(secrets) > 0 {
			out[id] = redact.New(secrets)
		}
	}
	return out, nil
}

// attemptSecretsCache remembers, per attempt, the secret references of its
// task (they never change): filled for every lease this replica hands out,
// and on a miss from the database. Values are never cached. Two
// generations bound it: when the current one is full it becomes the old
// one, so recent attempts stay.
type attemptSecretsCache struct {
	mu       sync.Mutex
	cur, old map[uuid.UUID]store.AttemptSecrets
}

// attemptSecretsCacheMax bounds one generation of the cache.
const attemptSecretsCacheMax = 100_000

func (c *attemptSecretsCache) get(attempt uuid.UUID) (store.AttemptSecrets, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[attempt]; ok {
		return e, true
	}
	e, ok := c.old[attempt]
	return e, ok
}

func (c *attemptSecretsCache) put(attempt uuid.UUID, e store.AttemptSecrets) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(attempt, e)
}

func (c *attemptSecretsCache) putLocked(attempt uuid.UUID, e store.AttemptSecrets) {
	if c.cur == nil || len(c.cur) >= attemptSecretsCacheMax {
		c.old, c.cur = c.cur, make(map[uuid.UUID]store.AttemptSecrets)
	}
	c.cur[attempt] = e
}

// leased remembers the secret references of leases this replica hands out.
func (c *attemptSecretsCache) leased(leases []store.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range leases {
		c.putLocked(l.AttemptID, store.AttemptSecrets{OrganizationID: l.Task.OrganizationID, Refs: l.Task.SecretRefs})
	}
}

// advertisementCache remembers, per worker, the last advertisement found
// to need no redaction while the worker held no attempt with secrets. A
// changed advertisement (a secret echoed into it included) misses, and is
// redacted against the worker's live attempts. Bounded as
// attemptSecretsCache is.
type advertisementCache struct {
	mu       sync.Mutex
	cur, old map[uuid.UUID][sha256.Size]byte
}

func (c *advertisementCache) seen(worker uuid.UUID, fingerprint [sha256.Size]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.cur[worker]; ok {
		return f == fingerprint
	}
	f, ok := c.old[worker]
	return ok && f == fingerprint
}

func (c *advertisementCache) remember(worker uuid.UUID, fingerprint [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || len(c.cur) >= attemptSecretsCacheMax {
		c.old, c.cur = c.cur, make(map[uuid.UUID][sha256.Size]byte)
	}
	c.cur[worker] = fingerprint
}
