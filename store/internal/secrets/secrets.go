// Package secrets is the store's secrets domain: an organization's
// secrets, sealed under a data key of their own that a key-encryption key
// the gateway holds wraps (internal/secretbox), their metadata for the
// control plane, and the sealed values a lease answer opens (see
// "Secrets" in store/doc.go). It stands on store/internal/core, acts for a
// core.Tenant, and imports neither the fencing predicates nor the lease
// engine (depguard); the facade (package store) embeds a Vault so that
// callers keep calling store.Store.
package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// Vault runs the secrets domain's verbs against PostgreSQL.
type Vault struct {
	pool *pgxpool.Pool
}

// New returns the vault of a pool; the pool's lifetime is the caller's.
func New(pool *pgxpool.Pool) *Vault { return &Vault{pool: pool} }

func (s *Vault) inTx(ctx context.Context, name string, fn func(tx pgx.Tx) error) error {
	return core.InTx(ctx, s.pool, name, fn)
}

func (s *Vault) inBatches(ctx context.Context, name, auditKey string, batch func(tx pgx.Tx) (int, error)) (int, error) {
	return core.InBatches(ctx, s.pool, name, auditKey, batch)
}

// Secret is a secret's metadata. Its value never leaves the store except
// sealed (SealedSecret), and only towards a lease.
type Secret struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	Name           string
	Version        int
	TaskTypes      []string
	WorkerLabels   map[string]string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// SecretParams creates or replaces a secret: its value, and the limits on
// who receives it (nil: no limit).
type SecretParams struct {
	Name         string
	Value        []byte
	TaskTypes    []string
	WorkerLabels map[string]string
}

// MaxSecretValue bounds a secret's value.
const MaxSecretValue = 64 << 10

// MaxSecretRefs bounds how many secrets a task may reference.
const MaxSecretRefs = 50

var secretNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidSecretName reports whether a name may name a secret: a letter or
// underscore, then letters, digits and underscores, at most 128 — the
// shape of an environment variable, which is how script workers get it.
func ValidSecretName(name string) bool { return secretNamePattern.MatchString(name) }

// CheckSecretRefs validates a task's references; field names the request
// field for the message.
func CheckSecretRefs(field string, refs []string) error {
	if len(refs) > MaxSecretRefs {
		return core.Invalid(problem.Text(fmt.Sprintf("%s: at most %d secrets", field, MaxSecretRefs)))
	}
	for _, r := range refs {
		if !ValidSecretName(r) {
			return core.Invalid(problem.Text(field + ": a secret name is a letter or underscore, then letters, digits or underscores (at most 128)"))
		}
	}
	return nil
}

func (p SecretParams) check(keyring *secretbox.Keyring) error {
	switch {
	case keyring == nil:
		return problem.Wrap(core.ErrInvalid, "this gateway has no secrets key configured (-secrets-key-file)")
	case !ValidSecretName(p.Name):
		return core.Invalid("name: a letter or underscore, then letters, digits or underscores (at most 128)")
	case len(p.Value) == 0:
		return core.Invalid("value: must not be empty")
	case len(p.Value) > MaxSecretValue:
		return core.Invalid(problem.Text(fmt.Sprintf("value: at most %d bytes", MaxSecretValue)))
	}
	for _, t := range p.TaskTypes {
		if t != "scanner_plugin" && t != "ai" {
			return core.Invalid("task_types: each must be scanner_plugin or ai")
		}
	}
	for k := range p.WorkerLabels {
		if k == "" {
			return core.Invalid("worker_labels: a label key must not be empty")
		}
	}
	return nil
}

// secretAAD binds a secret's seals to where it belongs.
func secretAAD(org, id uuid.UUID, name string, version int) []byte {
	return secretbox.AAD(org, id, name, version)
}

const secretColumns = `id, organization_id, name, version, task_types, worker_labels, created_at, updated_at`

func scanSecret(row pgx.Row) (Secret, error) {
	var (
		s      Secret
		labels []byte
	)
	if err := row.Scan(&s.ID, &s.OrganizationID, &s.Name, &s.Version, &s.TaskTypes, &labels, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return Secret{}, err
	}
	if len(labels) > 0 {
		if err := json.Unmarshal(labels, &s.WorkerLabels); err != nil {
			return Secret{}, fmt.Errorf("secret %s: worker_labels: %w", s.ID, err)
		}
	}
	return s, nil
}

func labelsArg(m map[string]string) any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// RefsArg stores no references as NULL, deduplicated otherwise.
func RefsArg(refs []string) any {
	if len(refs) == 0 {
		return nil
	}
	out := slices.Clone(refs)
	slices.Sort(out)
	return slices.Compact(out)
}

func taskTypesArg(t []string) any {
	if t == nil {
		return nil
	}
	return t
}

// CreateSecret seals a new secret of an organization under the keyring's
// current key. A name the organization already uses is ErrConflict.
func (s *Vault) CreateSecret(ctx context.Context, tenant core.Tenant, keyring *secretbox.Keyring, org uuid.UUID, p SecretParams) (Secret, error) {
	if err := p.check(keyring); err != nil {
		return Secret{}, err
	}
	if !tenant.Allows(org) {
		return Secret{}, core.ErrNotFound
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Secret{}, err
	}
	sealed, err := keyring.Seal(p.Value, secretAAD(org, id, p.Name, 1))
	if err != nil {
		return Secret{}, fmt.Errorf("seal secret: %w", err)
	}
	var sec Secret
	err = s.inTx(ctx, "create secret", func(tx pgx.Tx) error {
		var err error
		sec, err = scanSecret(tx.QueryRow(ctx, `
			INSERT INTO secrets (id, organization_id, name, version, ciphertext, wrapped_key, kek_id, task_types, worker_labels)
			VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8)
			RETURNING `+secretColumns,
			id, org, p.Name, sealed.Ciphertext, sealed.WrappedKey, sealed.KEKID, taskTypesArg(p.TaskTypes), labelsArg(p.WorkerLabels)))
		switch {
		case core.IsUniqueViolation(err):
			return problem.Wrap(core.ErrConflict, problem.Text("a secret named "+p.Name+" already exists in this organization; replace it instead"))
		case core.IsForeignKeyViolation(err):
			return core.MissingOrganization(tenant, org)
		case err != nil:
			return fmt.Errorf("create secret: %w", err)
		}
		auditSecret(ctx, sec)
		return nil
	})
	if err != nil {
		return Secret{}, err
	}
	return sec, nil
}

// ReplaceSecret gives a secret a new value and limits, as its next
// version (the name stays). A lease after the commit gets the new value.
func (s *Vault) ReplaceSecret(ctx context.Context, tenant core.Tenant, keyring *secretbox.Keyring, id uuid.UUID, p SecretParams) (Secret, error) {
	var sec Secret
	err := s.inTx(ctx, "replace secret", func(tx pgx.Tx) error {
		var (
			org     uuid.UUID
			name    string
			version int
		)
		err := tx.QueryRow(ctx, `SELECT organization_id, name, version FROM secrets
			WHERE id = $1 AND `+core.InTenant("organization_id", "$2")+` FOR UPDATE`, id, tenant.Arg()).Scan(&org, &name, &version)
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock secret: %w", err)
		}
		p.Name = name
		if err := p.check(keyring); err != nil {
			return err
		}
		sealed, err := keyring.Seal(p.Value, secretAAD(org, id, name, version+1))
		if err != nil {
			return fmt.Errorf("seal secret: %w", err)
		}
		sec, err = scanSecret(tx.QueryRow(ctx, `
			UPDATE secrets SET version = version + 1, ciphertext = $2, wrapped_key = $3, kek_id = $4,
				task_types = $5, worker_labels = $6, updated_at = now()
			WHERE id = $1
			RETURNING `+secretColumns,
			id, sealed.Ciphertext, sealed.WrappedKey, sealed.KEKID, taskTypesArg(p.TaskTypes), labelsArg(p.WorkerLabels)))
		if err != nil {
			return fmt.Errorf("replace secret: %w", err)
		}
		auditSecret(ctx, sec)
		return nil
	})
	return sec, err
}

// DeleteSecret removes a secret. Tasks that reference it fail their next
// attempt with secret_unavailable.
func (s *Vault) DeleteSecret(ctx context.Context, tenant core.Tenant, id uuid.UUID) (Secret, error) {
	var sec Secret
	err := s.inTx(ctx, "delete secret", func(tx pgx.Tx) error {
		var err error
		sec, err = scanSecret(tx.QueryRow(ctx, `DELETE FROM secrets WHERE id = $1 AND `+core.InTenant("organization_id", "$2")+`
			RETURNING `+secretColumns, id, tenant.Arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			return core.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete secret: %w", err)
		}
		auditSecret(ctx, sec)
		return nil
	})
	if err != nil {
		return Secret{}, err
	}
	return sec, nil
}

// GetSecret returns a secret's metadata.
func (s *Vault) GetSecret(ctx context.Context, tenant core.Tenant, id uuid.UUID) (Secret, error) {
	sec, err := scanSecret(s.pool.QueryRow(ctx, `SELECT `+secretColumns+` FROM secrets
		WHERE id = $1 AND `+core.InTenant("organization_id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Secret{}, core.ErrNotFound
	}
	if err != nil {
		return Secret{}, fmt.Errorf("get secret: %w", err)
	}
	return sec, nil
}

// MaxListedSecrets bounds a listing: secrets are few per organization, so
// a list is one page, ordered by organization and name.
const MaxListedSecrets = 1000

// ListSecrets lists the metadata of the secrets the scope sees, optionally
// of one organization.
func (s *Vault) ListSecrets(ctx context.Context, tenant core.Tenant, org *uuid.UUID) ([]Secret, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+secretColumns+` FROM secrets
		WHERE `+core.InTenant("organization_id", "$1")+` AND ($2::uuid IS NULL OR organization_id = $2)
		ORDER BY organization_id, name LIMIT $3`, tenant.Arg(), org, MaxListedSecrets)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []Secret
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	if err := core.CheckListedOrganization(ctx, s.pool, tenant, org, len(out) == 0); err != nil {
		return nil, err
	}
	return out, nil
}

// SealedSecret is a secret as stored, for the one reader that opens it:
// the lease answer.
type SealedSecret struct {
	Secret
	Sealed secretbox.Sealed
}

// AAD is the associated data the secret's seals were made with.
func (s SealedSecret) AAD() []byte {
	return secretAAD(s.OrganizationID, s.ID, s.Name, s.Version)
}

// SecretRef names a secret of an organization.
type SecretRef struct {
	OrganizationID uuid.UUID
	Name           string
}

// SealedSecrets reads the secrets named by refs in one statement; a name
// that does not exist is absent from the answer. Worker-facing (the lease
// answer), so it takes no Tenant: the organizations come from the tasks
// the worker was leased.
func (s *Vault) SealedSecrets(ctx context.Context, refs []SecretRef) ([]SealedSecret, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	orgs, names := make([]uuid.UUID, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		orgs[i], names[i] = r.OrganizationID, r.Name
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+secretColumns+`, ciphertext, wrapped_key, kek_id FROM secrets
		WHERE (organization_id, name) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))`, orgs, names)
	if err != nil {
		return nil, fmt.Errorf("read secrets: %w", err)
	}
	return collectSealed(rows)
}

func collectSealed(rows pgx.Rows) ([]SealedSecret, error) {
	defer rows.Close()
	var out []SealedSecret
	for rows.Next() {
		var (
			ss     SealedSecret
			labels []byte
		)
		if err := rows.Scan(&ss.ID, &ss.OrganizationID, &ss.Name, &ss.Version, &ss.TaskTypes, &labels, &ss.CreatedAt, &ss.UpdatedAt,
			&ss.Sealed.Ciphertext, &ss.Sealed.WrappedKey, &ss.Sealed.KEKID); err != nil {
			return nil, err
		}
		if len(labels) > 0 {
			if err := json.Unmarshal(labels, &ss.WorkerLabels); err != nil {
				return nil, fmt.Errorf("secret %s: worker_labels: %w", ss.ID, err)
			}
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}

// AttemptSecrets is what a worker's text on an attempt is redacted
// against: the names of the secrets its task references, in its
// organization.
type AttemptSecrets struct {
	OrganizationID uuid.UUID
	Refs           []string
}

// WorkerLiveSecretRefs returns the secret references of the worker's
// unfinished attempts whose tasks reference secrets, by attempt id: what a
// poll's advertisement (capabilities, version), which names no attempt, may
// echo. One read of the worker's unfinished attempts by index.
func (s *Vault) WorkerLiveSecretRefs(ctx context.Context, worker uuid.UUID) (map[uuid.UUID]AttemptSecrets, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT a.id, t.organization_id, t.secret_refs
		FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
		WHERE a.worker_id = $1 AND a.finished_at IS NULL AND cardinality(t.secret_refs) > 0`, worker)
	if err != nil {
		return nil, fmt.Errorf("read live secret references: %w", err)
	}
	out := map[uuid.UUID]AttemptSecrets{}
	var (
		id uuid.UUID
		as AttemptSecrets
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &as.OrganizationID, &as.Refs}, func() error {
		out[id] = as
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read live secret references: %w", err)
	}
	return out, nil
}

// SecretKeySample is one stored secret per key-encryption key, for the
// start-up check that the gateway holds every key in use.
func (s *Vault) SecretKeySample(ctx context.Context) ([]SealedSecret, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT ON (kek_id) `+secretColumns+`, ciphertext, wrapped_key, kek_id FROM secrets ORDER BY kek_id, id`)
	if err != nil {
		return nil, fmt.Errorf("sample secret keys: %w", err)
	}
	return collectSealed(rows)
}

// RewrapSecrets re-wraps, batch by batch, every data key not wrapped by
// the keyring's current key; values are not re-encrypted. Each batch is a
// transaction that locks its rows; a row a concurrent replace holds is
// waited for, and then left out (the replace sealed it under the current
// key: READ COMMITTED re-checks the WHERE clause of a locked row). Returns how many keys were re-wrapped.
// A key the keyring cannot unwrap stops the rotation with an error naming
// the secret's id.
func (s *Vault) RewrapSecrets(ctx context.Context, keyring *secretbox.Keyring, batch int) (int, error) {
	return s.inBatches(ctx, "rewrap secrets", "rewrapped", func(tx pgx.Tx) (int, error) {
		rows, err := tx.Query(ctx, `
			SELECT `+secretColumns+`, ciphertext, wrapped_key, kek_id FROM secrets
			WHERE kek_id <> $1 ORDER BY id LIMIT $2 FOR UPDATE`, keyring.CurrentID(), batch)
		if err != nil {
			return 0, fmt.Errorf("lock secrets: %w", err)
		}
		found, err := collectSealed(rows)
		if err != nil {
			return 0, err
		}
		for _, ss := range found {
			re, err := keyring.Rewrap(ss.Sealed, ss.AAD())
			if err != nil {
				return 0, fmt.Errorf("secret %s: %w", ss.ID, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE secrets SET wrapped_key = $2, kek_id = $3 WHERE id = $1`,
				ss.ID, re.WrappedKey, re.KEKID); err != nil {
				return 0, fmt.Errorf("rewrap secret: %w", err)
			}
		}
		return len(found), nil
	})
}

// SecretAllowed reports whether a secret may be given to a task of this
// type on a worker with these labels.
func (s Secret) SecretAllowed(taskType string, workerLabels map[string]string) bool {
	if s.TaskTypes != nil && !slices.Contains(s.TaskTypes, taskType) {
		return false
	}
	return allowedForWorker(s.WorkerLabels, workerLabels)
}

// allowedForWorker is the label limit: every key=value of the
// selector must be among the worker's labels. No selector allows every
// worker; a selector and a worker without labels allow nothing.
func allowedForWorker(limit, workerLabels map[string]string) bool {
	for k, v := range limit {
		if got, ok := workerLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// WorkerLabels returns a worker's operator-set labels (workers.labels),
// for secrets limited by a label selector; asked only when a lease's
// secret has one. A worker that does not exist has none.
func (s *Vault) WorkerLabels(ctx context.Context, workerID uuid.UUID) (map[string]string, error) {
	labels := map[string]string{}
	err := s.pool.QueryRow(ctx, `SELECT labels FROM workers WHERE id = $1`, workerID).Scan(&labels)
	if errors.Is(err, pgx.ErrNoRows) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read worker labels: %w", err)
	}
	return labels, nil
}

// auditSecret names a secret in the audit record of its change: never its
// value, only its name and version.
func auditSecret(ctx context.Context, sec Secret) {
	core.AuditTarget(ctx, sec.ID, &sec.OrganizationID)
	core.AuditDetail(ctx, "name", sec.Name)
	core.AuditDetail(ctx, "version", sec.Version)
}
