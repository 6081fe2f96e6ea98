package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"

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
// (resolveSecrets). Values a worker echoes into anything it sends are
// redacted before they are stored (redact.go).

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
	tenant := tenantFrom(ctx)
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
	sec, err := h.store.CreateSecret(ctx, tenant, keyring, b.OrganizationId, p)
	if err != nil {
		return nil, err
	}
	return api.CreateSecret201JSONResponse(toSecret(sec)), nil
}

// ListSecrets lists secrets' metadata (admins only).
func (h *handlers) ListSecrets(ctx context.Context, req api.ListSecretsRequestObject) (api.ListSecretsResponseObject, error) {
	tenant := tenantFrom(ctx)
	secs, err := h.store.ListSecrets(ctx, tenant, req.Params.OrganizationId)
	if err != nil {
		return nil, err
	}
	return api.ListSecrets200JSONResponse{Items: mapSlice(secs, toSecret)}, nil
}

// GetSecret returns a secret's metadata (admins only).
func (h *handlers) GetSecret(ctx context.Context, req api.GetSecretRequestObject) (api.GetSecretResponseObject, error) {
	tenant := tenantFrom(ctx)
	sec, err := h.store.GetSecret(ctx, tenant, req.SecretId)
	if err != nil {
		return nil, err
	}
	return api.GetSecret200JSONResponse(toSecret(sec)), nil
}

// ReplaceSecret stores a secret's next version (admins only).
func (h *handlers) ReplaceSecret(ctx context.Context, req api.ReplaceSecretRequestObject) (api.ReplaceSecretResponseObject, error) {
	tenant := tenantFrom(ctx)
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
	sec, err := h.store.ReplaceSecret(ctx, tenant, keyring, req.SecretId, p)
	if err != nil {
		return nil, err
	}
	return api.ReplaceSecret200JSONResponse(toSecret(sec)), nil
}

// DeleteSecret removes a secret (admins only).
func (h *handlers) DeleteSecret(ctx context.Context, req api.DeleteSecretRequestObject) (api.DeleteSecretResponseObject, error) {
	tenant := tenantFrom(ctx)
	ctx = h.audit(ctx, "secret.delete", "secret", req.SecretId.String(), nil, nil)
	sec, err := h.store.DeleteSecret(ctx, tenant, req.SecretId)
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
	h.secretRefs.leased(leases) // what the attempts' writes are redacted against
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
// stored secrets (task secrets and webhook signing secrets) name, one of
// its data keys must open under the keyring.
// A gateway without keys passes only while no secret is stored.
func CheckSecretsKey(ctx context.Context, st *store.Store, keyring *secretbox.Keyring) error {
	sample, err := st.SecretKeySample(ctx)
	if err != nil {
		return err
	}
	for _, s := range sample {
		if err := checkUnwrap(keyring, s.Sealed, s.AAD()); err != nil {
			return err
		}
	}
	hooks, err := st.WebhookSecretKeySample(ctx)
	if err != nil {
		return err
	}
	for _, s := range hooks {
		if err := checkUnwrap(keyring, s.Sealed, s.AAD); err != nil {
			return err
		}
	}
	return nil
}

func checkUnwrap(keyring *secretbox.Keyring, s secretbox.Sealed, aad []byte) error {
	if !keyring.Has(s.KEKID) {
		return &WrongSecretsKeyError{KEKID: s.KEKID, Unknown: true}
	}
	if err := keyring.CheckUnwrap(s, aad); err != nil {
		return &WrongSecretsKeyError{KEKID: s.KEKID}
	}
	return nil
}
