package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store/internal/lease"
	"github.com/worker-gateway/gateway/store/internal/secrets"
)

// An organization's secrets are the secrets domain's
// (store/internal/secrets): the Store embeds its Vault, so its verbs
// (CreateSecret, ReplaceSecret, DeleteSecret, GetSecret, ListSecrets,
// SealedSecrets, WorkerLiveSecretRefs, SecretKeySample, RewrapSecrets,
// WorkerLabels) are the Store's, and its types are named here.
type (
	Secret         = secrets.Secret
	SecretParams   = secrets.SecretParams
	SealedSecret   = secrets.SealedSecret
	SecretRef      = secrets.SecretRef
	AttemptSecrets = secrets.AttemptSecrets
)

const (
	// MaxSecretValue bounds a secret's value.
	MaxSecretValue = secrets.MaxSecretValue
	// MaxSecretRefs bounds how many secrets a task may reference.
	MaxSecretRefs = secrets.MaxSecretRefs
	// MaxListedSecrets bounds a listing of secrets.
	MaxListedSecrets = secrets.MaxListedSecrets
)

// ValidSecretName reports whether a name may name a secret.
func ValidSecretName(name string) bool { return secrets.ValidSecretName(name) }

// CheckSecretRefs validates a task's references; field names the request
// field for the message.
func CheckSecretRefs(field string, refs []string) error { return secrets.CheckSecretRefs(field, refs) }

// AttemptsSecretRefs returns, in one statement, the secret references of
// the tasks of the worker's attempts named by refs (the worker's own, under
// the token it was given), by attempt id, with no references for a task
// without any. The lease need not be live: a repeated result batch is
// answered after its lease ended, and must be redacted as its first try
// was to be recognised. An attempt not the worker's is absent: the write
// itself then answers not found.
func (s *Store) AttemptsSecretRefs(ctx context.Context, refs []AttemptRef) (map[uuid.UUID]AttemptSecrets, error) {
	out := map[uuid.UUID]AttemptSecrets{}
	if len(refs) == 0 {
		return out, nil
	}
	ids, workers := make([]uuid.UUID, len(refs)), make([]uuid.UUID, len(refs))
	for i, r := range refs {
		ids[i], workers[i] = r.AttemptID, r.WorkerID
	}
	rows, err := s.pool.Query(ctx, `
		SELECT a.id, t.organization_id, t.secret_refs
		FROM unnest($1::uuid[], $2::uuid[], $3::bytea[]) AS r(id, worker_id, token_hash)
		JOIN worker_task_attempts a ON a.id = r.id AND (a.worker_id = r.worker_id AND a.lease_token_hash = r.token_hash) IS TRUE
		JOIN worker_tasks t ON t.id = a.task_id`,
		ids, workers, lease.TokenHashes(refs))
	if err != nil {
		return nil, fmt.Errorf("read secret references: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id uuid.UUID
			as AttemptSecrets
		)
		if err := rows.Scan(&id, &as.OrganizationID, &as.Refs); err != nil {
			return nil, fmt.Errorf("read secret references: %w", err)
		}
		out[id] = as
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read secret references: %w", err)
	}
	return out, nil
}
