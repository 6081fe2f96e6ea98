package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// Secrets are write-only through the API: admins create, replace, delete
// and list them (metadata only), producers reference them by name in
// tasks, and a value leaves the gateway in one place only — the lease
// answer of a task that references it, to the worker that leased it
// (resolveSecrets). Values a worker echoes into its log are redacted before
// they are stored (redactLog).

// SecretUnavailable is the error code of an attempt whose secrets could
// not be given: missing, withheld by a limit, or not decryptable — which
// one is not said.
const SecretUnavailable = "secret_unavailable"

func (h *handlers) secretsKeyring() (*secretbox.Keyring, error) {
	if h.cfg.Secrets == nil {
		return nil, newProblem(http.StatusServiceUnavailable, problem.SecretsDisabled, "this gateway has no secrets key configured (-secrets-key-file)")
	}
	return h.cfg.Secrets, nil
}

func secretParams(name string, value *string, types *api.SecretTaskTypes, labels *api.SecretWorkerLabels) (store.SecretParams, error) {
	if value == nil {
		return store.SecretParams{}, problem.Wrap(store.ErrInvalid, "value: required")
	}
	p := store.SecretParams{Name: name, Value: []byte(*value)}
	if types != nil {
		p.TaskTypes = mapSlice(*types, func(t api.TaskType) string { return string(t) })
	}
	if labels != nil {
		p.WorkerLabels = map[string]string(*labels)
	}
	return p, nil
}

func toSecret(s store.Secret) api.Secret {
	out := api.Secret{Id: s.ID, OrganizationId: s.OrganizationID, Name: s.Name, Version: s.Version, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if s.TaskTypes != nil {
		out.TaskTypes = ptr(mapSlice(s.TaskTypes, func(t string) api.TaskType { return api.TaskType(t) }))
	}
	if s.WorkerLabels != nil {
		out.WorkerLabels = ptr(s.WorkerLabels)
	}
	return out
}

// CreateSecret stores a new secret (admins only).
func (h *handlers) CreateSecret(ctx context.Context, req api.CreateSecretRequestObject) (api.CreateSecretResponseObject, error) {
	scope, err := requirePermission(ctx, permissionAdmin)
	if err != nil {
		return nil, err
	}
	keyring, err := h.secretsKeyring()
	if err != nil {
		return nil, err
	}
	b := req.Body
	p, err := secretParams(b.Name, b.Value, b.TaskTypes, b.WorkerLabels)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "secret.create", "secret", "", &b.OrganizationId, nil) // name, version: store
	sec, err := h.store.CreateSecret(ctx, scope, keyring, b.OrganizationId, p)
	if err != nil {
		return nil, err
	}
	return api.CreateSecret201JSONResponse(toSecret(sec)), nil
}

// ListSecrets lists secrets' metadata (admins only).
func (h *handlers) ListSecrets(ctx context.Context, req api.ListSecretsRequestObject) (api.ListSecretsResponseObject, error) {
	scope, err := requirePermission(ctx, permissionAdmin)
	if err != nil {
		return nil, err
	}
	secs, err := h.store.ListSecrets(ctx, scope, req.Params.OrganizationId)
	if err != nil {
		return nil, err
	}
	return api.ListSecrets200JSONResponse{Items: mapSlice(secs, toSecret)}, nil
}

// GetSecret returns a secret's metadata (admins only).
func (h *handlers) GetSecret(ctx context.Context, req api.GetSecretRequestObject) (api.GetSecretResponseObject, error) {
	scope, err := requirePermission(ctx, permissionAdmin)
	if err != nil {
		return nil, err
	}
	sec, err := h.store.GetSecret(ctx, scope, req.SecretId)
	if err != nil {
		return nil, err
	}
	return api.GetSecret200JSONResponse(toSecret(sec)), nil
}

// ReplaceSecret stores a secret's next version (admins only).
func (h *handlers) ReplaceSecret(ctx context.Context, req api.ReplaceSecretRequestObject) (api.ReplaceSecretResponseObject, error) {
	scope, err := requirePermission(ctx, permissionAdmin)
	if err != nil {
		return nil, err
	}
	keyring, err := h.secretsKeyring()
	if err != nil {
		return nil, err
	}
	b := req.Body
	p, err := secretParams("", b.Value, b.TaskTypes, b.WorkerLabels)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "secret.replace", "secret", req.SecretId.String(), nil, nil)
	sec, err := h.store.ReplaceSecret(ctx, scope, keyring, req.SecretId, p)
	if err != nil {
		return nil, err
	}
	return api.ReplaceSecret200JSONResponse(toSecret(sec)), nil
}

// DeleteSecret removes a secret (admins only).
func (h *handlers) DeleteSecret(ctx context.Context, req api.DeleteSecretRequestObject) (api.DeleteSecretResponseObject, error) {
	scope, err := requirePermission(ctx, permissionAdmin)
	if err != nil {
		return nil, err
	}
	ctx = h.audit(ctx, "secret.delete", "secret", req.SecretId.String(), nil, nil)
	sec, err := h.store.DeleteSecret(ctx, scope, req.SecretId)
	if err != nil {
		return nil, err
	}
	return api.DeleteSecret200JSONResponse(toSecret(sec)), nil
}

// resolveSecrets gives each lease that references secrets their values,
// read in one statement for the whole answer after the acquisition
// committed: the lease transaction is the hot path, and an answer without
// references runs no query at all. A lease whose secrets cannot all be
// given — missing, withheld by a limit, or not decryptable — is not
// delivered: its attempt fails with SecretUnavailable (retryable, so a
// secret put back serves a later attempt), and the message names the
// secret but not what went wrong with it. Returns the leases to deliver
// and their secrets, index for index.
func (h *handlers) resolveSecrets(ctx context.Context, workerID uuid.UUID, leases []store.Lease) ([]store.Lease, []map[string]string) {
	var refs []store.SecretRef
	for _, l := range leases {
		for _, name := range l.Task.SecretRefs {
			refs = append(refs, store.SecretRef{OrganizationID: l.Task.OrganizationID, Name: name})
		}
	}
	if len(refs) == 0 {
		return leases, make([]map[string]string, len(leases))
	}
	type key struct {
		org  uuid.UUID
		name string
	}
	found := map[key]store.SealedSecret{}
	sealed, err := h.store.SealedSecrets(ctx, refs)
	var labels map[string]string
	if err == nil && slices.ContainsFunc(sealed, func(s store.SealedSecret) bool { return len(s.WorkerLabels) > 0 }) {
		labels, err = h.store.WorkerLabels(ctx, workerID)
	}
	if err != nil {
		// Not the secrets' fault (the database, or the poll went away):
		// the leases that need them go back to the queue, unused.
		h.logger.Warn("reading secrets for a lease failed; its leases are released", "worker_id", workerID, "error", err.Error())
		var keep, back []store.Lease
		for _, l := range leases {
			if len(l.Task.SecretRefs) > 0 {
				back = append(back, l)
			} else {
				keep = append(keep, l)
			}
		}
		h.releaseUndelivered(workerID, back)
		return keep, make([]map[string]string, len(keep))
	}
	for _, s := range sealed {
		found[key{s.OrganizationID, s.Name}] = s
	}
	opened := map[key][]byte{}
	open := func(k key, taskType string) bool {
		s, ok := found[k]
		if !ok || !s.SecretAllowed(taskType, labels) {
			return false
		}
		if _, done := opened[k]; done {
			return true
		}
		v, err := h.cfg.Secrets.Open(s.Sealed, s.AAD())
		if err != nil {
			// The operator's log may say which key; the worker is not told.
			h.logger.Error("a secret could not be decrypted", "secret_id", s.ID, "kek_id", s.Sealed.KEKID, "error", err.Error())
			return false
		}
		opened[k] = v
		return true
	}
	var (
		out     []store.Lease
		secrets []map[string]string
		failed  []store.CompleteParams
	)
	for _, l := range leases {
		values := map[string]string{}
		missing := ""
		for _, name := range l.Task.SecretRefs {
			k := key{l.Task.OrganizationID, name}
			if !open(k, l.Task.Type) {
				missing = name
				break
			}
			values[name] = string(opened[k])
		}
		if missing != "" {
			failed = append(failed, store.CompleteParams{
				AttemptRef: store.AttemptRef{WorkerID: workerID, AttemptID: l.AttemptID, LeaseToken: l.LeaseToken},
				Outcome:    store.AttemptFailed, ErrorCode: SecretUnavailable, Retryable: true,
				ErrorMessage: fmt.Sprintf("secret %q is unavailable to this task (it does not exist, is limited to other tasks or workers, or cannot be decrypted)", missing),
			})
			continue
		}
		if len(l.Task.SecretRefs) == 0 {
			values = nil
		}
		out, secrets = append(out, l), append(secrets, values)
	}
	for _, f := range failed {
		if _, err := h.store.CompleteAttempt(context.WithoutCancel(ctx), f); err != nil {
			h.logger.Warn("failing an attempt whose secrets are unavailable failed; its lease will expire", "attempt_id", f.AttemptID, "error", err.Error())
		}
		h.metrics.secretUnavailable.Inc()
	}
	return out, secrets
}

// secretRefCache remembers, per attempt, the secret references of its task
// (they never change), so the log ingest of an attempt without secrets
// costs one query per attempt, not per chunk. Values are not cached.
type secretRefCache struct {
	mu      sync.Mutex
	entries map[uuid.UUID]attemptSecrets
}

type attemptSecrets struct {
	org  uuid.UUID
	refs []string
}

// secretRefCacheMax bounds the cache; past it, it starts afresh.
const secretRefCacheMax = 100_000

func (c *secretRefCache) get(attempt uuid.UUID) (attemptSecrets, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[attempt]
	return e, ok
}

func (c *secretRefCache) put(attempt uuid.UUID, e attemptSecrets) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= secretRefCacheMax {
		c.entries = map[uuid.UUID]attemptSecrets{}
	}
	c.entries[attempt] = e
}

// logSecrets returns the values to redact from an attempt's log: those of
// the secrets its task references, by name. Nil for most attempts.
func (h *handlers) logSecrets(ctx context.Context, ref store.AttemptRef) (map[string]string, error) {
	e, ok := h.secretRefs.get(ref.AttemptID)
	if !ok {
		org, refs, err := h.store.AttemptSecretRefs(ctx, ref)
		if err != nil {
			return nil, err
		}
		if org == uuid.Nil {
			return nil, nil // not this worker's live lease: the append says which
		}
		e = attemptSecrets{org: org, refs: refs}
		h.secretRefs.put(ref.AttemptID, e)
	}
	if len(e.refs) == 0 || h.cfg.Secrets == nil {
		return nil, nil
	}
	refs := mapSlice(e.refs, func(n string) store.SecretRef { return store.SecretRef{OrganizationID: e.org, Name: n} })
	sealed, err := h.store.SealedSecrets(ctx, refs)
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	for _, s := range sealed {
		if v, err := h.cfg.Secrets.Open(s.Sealed, s.AAD()); err == nil {
			values[s.Name] = string(v)
		}
	}
	return values, nil
}

// minRedacted is the shortest value redacted: shorter ones would mask
// ordinary text everywhere.
const minRedacted = 4

// redactLog replaces every value in a log chunk with [REDACTED:name] and
// reports how much of the chunk it consumed. A value may arrive split
// across two chunks: when the chunk ends with the beginning of a value,
// that tail is not consumed (the answer's next_offset stops before it) and
// the worker sends it again with what follows, so the value is seen whole.
// A chunk that is nothing but such a beginning is consumed (redacted when
// it is minRedacted bytes or more), so a log never stalls on it.
func redactLog(data []byte, values map[string]string) (stored []byte, consumed int) {
	names := make([]string, 0, len(values))
	for name, v := range values {
		if len(v) >= minRedacted {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return data, len(data)
	}
	// Longest first, so a value containing another is replaced whole.
	sort.Slice(names, func(i, j int) bool {
		if len(values[names[i]]) != len(values[names[j]]) {
			return len(values[names[i]]) > len(values[names[j]])
		}
		return names[i] < names[j]
	})
	consumed = len(data)
	holdName := ""
	for _, name := range names {
		v := values[name]
		for n := min(len(v)-1, len(data)); n > 0; n-- {
			if bytes.HasSuffix(data, []byte(v[:n])) {
				if at := len(data) - n; at < consumed {
					consumed, holdName = at, name
				}
				break
			}
		}
	}
	if consumed == 0 {
		// Nothing but the beginning of a value: the worker has sent all it
		// has, and holding it back again would stall the log. Consumed,
		// and redacted unless too short to tell from ordinary text.
		if len(data) < minRedacted {
			return data, len(data)
		}
		return []byte("[REDACTED:" + holdName + "]"), len(data)
	}
	b := append([]byte(nil), data[:consumed]...)
	for _, name := range names {
		b = bytes.ReplaceAll(b, []byte(values[name]), []byte("[REDACTED:"+name+"]"))
	}
	return b, consumed
}

// WrongSecretsKeyError is a start-up with key-encryption keys that do not
// open the stored secrets.
type WrongSecretsKeyError struct {
	KEKID string
	// Unknown is true when no key of the keyring has the stored id, false
	// when the key with that id does not open (a damaged row, or a key
	// file edited under the same name).
	Unknown bool
}

func (e *WrongSecretsKeyError) Error() string {
	if e.Unknown {
		return "stored secrets were sealed under key-encryption key " + e.KEKID + ", which this gateway was not given"
	}
	return "a stored secret's data key does not open under key-encryption key " + e.KEKID
}

// CheckSecretsKey is the start-up check: for every key-encryption key the
// stored secrets name, one of its data keys must open under the keyring.
// A gateway without keys passes only while no secret is stored.
func CheckSecretsKey(ctx context.Context, st *store.Store, keyring *secretbox.Keyring) error {
	sample, err := st.SecretKeySample(ctx)
	if err != nil {
		return err
	}
	for _, s := range sample {
		if !keyring.Has(s.Sealed.KEKID) {
			return &WrongSecretsKeyError{KEKID: s.Sealed.KEKID, Unknown: true}
		}
		if err := keyring.CheckUnwrap(s.Sealed, s.AAD()); err != nil {
			return &WrongSecretsKeyError{KEKID: s.Sealed.KEKID}
		}
	}
	return nil
}
