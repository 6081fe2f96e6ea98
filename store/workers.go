package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/labels"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/lease"
)

// Worker is a worker identity with its derived state.
type Worker struct {
	ID                     uuid.UUID
	Name                   string
	WorkerType             string
	Enabled                bool
	RevokedAt              *time.Time
	RevocationReason       string
	CertificateFingerprint string
	CertificateSubject     string
	// CertificateExpiresAt is the current certificate's expiry (nil when
	// none was issued by enrollment or renewal).
	CertificateExpiresAt *time.Time
	SoftwareVersion      string
	ProtocolVersion      string
	Capabilities         json.RawMessage
	// Labels are set by operators (LabelSelector); never by the worker.
	Labels             map[string]string
	MaxConcurrentTasks int
	LastSeenAt         *time.Time
	Online             bool
	ActiveAttempts     int
	OrganizationIDs    []uuid.UUID
	// OwnerOrganizationID is the organization that owns the worker, shown
	// only to that organization and to unscoped callers.
	OwnerOrganizationID *uuid.UUID
	CreatedAt           time.Time
}

// workerColumnsSeenBy reads a worker w with its online state (window is
// the online window in seconds), active attempts and live assignments as
// the viewer (tenant: an organization's id, or NULL for unscoped) may see
// them: a worker shared by several organizations shows each only its own
// assignment, its own active attempts and, unless it is the owner, no
// owner.
func workerColumnsSeenBy(window, tenant string) string {
	return `w.id, w.name, w.worker_type, w.enabled, w.revoked_at, w.revocation_reason,
	w.certificate_fingerprint, w.certificate_subject, w.certificate_expires_at, w.software_version, w.protocol_version,
	w.capabilities, w.labels, w.max_concurrent_tasks, w.last_seen_at,
	coalesce(w.last_seen_at > now() - make_interval(secs => ` + window + `::float8), false),
	(SELECT count(*) FROM worker_task_attempts a WHERE ` + core.WorkerLiveAttempts("a", "w.id") + `
		AND ` + core.InTenant("a.organization_id", tenant) + `),
	array(SELECT ow.organization_id FROM organization_workers ow
		WHERE ow.worker_id = w.id AND ow.enabled AND ow.revoked_at IS NULL
			AND ` + core.InTenant("ow.organization_id", tenant) + ` ORDER BY ow.organization_id),
	CASE WHEN ` + core.InTenant("w.owner_organization_id", tenant) + ` THEN w.owner_organization_id END,
	w.created_at`
}

// workerColumns is workerColumnsSeenBy for statements written with the
// online window as $1 and the viewer's tenant as $2.
var workerColumns = workerColumnsSeenBy("$1", "$2")

// workerFields are the scan targets of workerColumns, in order.
func workerFields(w *Worker) []any {
	return []any{&w.ID, &w.Name, &w.WorkerType, &w.Enabled, &w.RevokedAt, &w.RevocationReason,
		&w.CertificateFingerprint, &w.CertificateSubject, &w.CertificateExpiresAt, &w.SoftwareVersion, &w.ProtocolVersion,
		&w.Capabilities, &w.Labels, &w.MaxConcurrentTasks, &w.LastSeenAt, &w.Online, &w.ActiveAttempts, &w.OrganizationIDs,
		&w.OwnerOrganizationID, &w.CreatedAt}
}

func scanWorker(row pgx.Row) (Worker, error) {
	var w Worker
	err := row.Scan(workerFields(&w)...)
	return w, err
}

// scopeSeesWorker is the worker visibility rule (see "Isolation" in doc.go)
// with the scope as $2: an unscoped caller sees every worker; an
// organization's caller sees the workers it owns, those assigned to it and
// those their owner granted it.
var scopeSeesWorker = core.WorkerVisibleTo("w.id", "$2")

// CreateWorkerParams describes a new worker.
type CreateWorkerParams struct {
	Name                   string
	WorkerType             string
	MaxConcurrentTasks     int
	CertificateFingerprint string
	CertificateSubject     string
	// OwnerOrganizationID, when set, is the organization that owns the
	// worker (and may assign it, grant it and manage it).
	OwnerOrganizationID *uuid.UUID
}

// CreateWorker inserts a worker identity. A worker with an owner is
// assigned to its owner in the same transaction. An organization-scoped
// caller creates workers owned by its own organization only.
func (s *Store) CreateWorker(ctx context.Context, tenant Tenant, p CreateWorkerParams, onlineWindow time.Duration) (Worker, error) {
	if p.MaxConcurrentTasks == 0 {
		p.MaxConcurrentTasks = 1
	}
	if org := tenant.Organization(); org != nil {
		if p.OwnerOrganizationID != nil && *p.OwnerOrganizationID != *org {
			return Worker{}, ErrNotFound
		}
		p.OwnerOrganizationID = org
	}
	var w Worker
	err := s.inTx(ctx, "create worker", func(tx pgx.Tx) error {
		var id uuid.UUID
		err := tx.QueryRow(ctx, `
			INSERT INTO workers (name, worker_type, max_concurrent_tasks, certificate_fingerprint, certificate_subject, owner_organization_id)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			p.Name, p.WorkerType, p.MaxConcurrentTasks, p.CertificateFingerprint, p.CertificateSubject, p.OwnerOrganizationID).Scan(&id)
		switch {
		case core.IsUniqueViolation(err):
			return problem.Wrap(ErrConflict, "certificate already registered to another worker")
		case core.IsForeignKeyViolation(err):
			return fmt.Errorf("%w: organization", ErrNotFound)
		case err != nil:
			return fmt.Errorf("create worker: %w", err)
		}
		core.AuditTarget(ctx, id, p.OwnerOrganizationID)
		if p.OwnerOrganizationID != nil {
			if _, err := tx.Exec(ctx, `INSERT INTO organization_workers (organization_id, worker_id) VALUES ($1, $2)`,
				*p.OwnerOrganizationID, id); err != nil {
				return fmt.Errorf("assign to owner: %w", err)
			}
		}
		w, err = getWorker(ctx, tx, tenant, id, onlineWindow)
		return err
	})
	return w, err
}

// GetWorker returns a worker the scope may see.
func (s *Store) GetWorker(ctx context.Context, tenant Tenant, id uuid.UUID, onlineWindow time.Duration) (Worker, error) {
	return getWorker(ctx, s.pool, tenant, id, onlineWindow)
}

func getWorker(ctx context.Context, ex core.Executor, tenant Tenant, id uuid.UUID, onlineWindow time.Duration) (Worker, error) {
	w, err := scanWorker(ex.QueryRow(ctx, `SELECT `+workerColumns+` FROM workers w WHERE w.id = $3 AND `+scopeSeesWorker,
		onlineWindow.Seconds(), tenant.Arg(), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Worker{}, ErrNotFound
	}
	if err != nil {
		return Worker{}, fmt.Errorf("get worker: %w", err)
	}
	return w, nil
}

// ListWorkers pages the workers the tenant may see, newest first.
func (s *Store) ListWorkers(ctx context.Context, tenant Tenant, after *Cursor, limit int, onlineWindow time.Duration) ([]Worker, *Cursor, error) {
	// The window and the tenant are bound once, as the columns of viewer,
	// which the columns and the visibility rule name.
	q := core.Psql.Select(workerColumnsSeenBy("viewer.online_window", "viewer.tenant")).From("workers w").
		JoinClause("CROSS JOIN (SELECT ?::float8 AS online_window, ?::uuid AS tenant) viewer", onlineWindow.Seconds(), tenant.Arg()).
		Where(core.WorkerVisibleTo("w.id", "viewer.tenant"))
	workers, next, err := core.ListPage(ctx, s.pool, q,
		core.NewestFirst("w.created_at", "w.id", func(w Worker) Cursor { return Cursor{Time: w.CreatedAt, ID: w.ID} }),
		after, limit, scanWorker)
	if err != nil {
		return nil, nil, fmt.Errorf("list workers: %w", err)
	}
	return workers, next, nil
}

// UpdateWorkerParams changes a worker; nil fields stay as they are.
type UpdateWorkerParams struct {
	Name               *string
	Enabled            *bool
	MaxConcurrentTasks *int
	// Labels changes the worker's labels: a value sets a label, nil
	// removes it, labels not named stay. Active attempts whose task's
	// label selector the new labels fail end at once (label_lost), as when
	// a worker stops advertising a critical capability.
	Labels map[string]*string
	// CancelActive, when the worker is being disabled, ends its active
	// attempts at once (by policy) instead of letting them drain.
	CancelActive bool
}

// UpdateWorker changes a worker the scope manages and, when it disables it
// with CancelActive, releases its active attempts in the same transaction.
// It returns the worker as the scope sees it.
func (s *Store) UpdateWorker(ctx context.Context, tenant Tenant, id uuid.UUID, p UpdateWorkerParams, onlineWindow time.Duration) (Worker, error) {
	if err := validLabelChange(p.Labels); err != nil {
		return Worker{}, err
	}
	var setLabels []byte
	var removeLabels []string
	if p.Labels != nil {
		var err error
		if setLabels, removeLabels, err = labels.SplitChange(p.Labels); err != nil {
			return Worker{}, err
		}
	}
	var w Worker
	err := s.inTx(ctx, "update worker", func(tx pgx.Tx) error {
		if err := authorizeWorkerManagement(ctx, tx, tenant, id); err != nil {
			return err
		}
		var (
			labelsChanged bool
			newLabels     []byte
			labelCount    int
		)
		err := tx.QueryRow(ctx, `
			WITH before AS (
				SELECT id, labels FROM workers WHERE id = $1 FOR NO KEY UPDATE
			)
			UPDATE workers w SET
				name = coalesce($2, name),
				enabled = coalesce($3, enabled),
				max_concurrent_tasks = coalesce($4, max_concurrent_tasks),
				labels = CASE WHEN $5::jsonb IS NULL THEN w.labels ELSE (w.labels || $5::jsonb) - $6::text[] END,
				updated_at = now()
			FROM before b
			WHERE w.id = b.id
			RETURNING w.labels IS DISTINCT FROM b.labels, w.labels, (SELECT count(*) FROM jsonb_object_keys(w.labels))`,
			id, p.Name, p.Enabled, p.MaxConcurrentTasks, core.NullJSON(setLabels), removeLabels).Scan(&labelsChanged, &newLabels, &labelCount)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return fmt.Errorf("update worker: %w", err)
		case labelCount > labels.MaxOnWorker:
			return core.Invalid("labels: a worker has at most 64 labels")
		}
		if labelsChanged {
			if _, err := releaseAttemptsLackingLabels(ctx, tx, id, newLabels); err != nil {
				return err
			}
		}
		if p.Enabled != nil && !*p.Enabled && p.CancelActive {
			if _, err := releaseAttempts(ctx, tx, id, nil, "worker_disabled"); err != nil {
				return err
			}
		}
		if w, err = getWorker(ctx, tx, tenant, id, onlineWindow); err != nil {
			return err
		}
		// Capacity or eligibility changed: the worker's waiting polls look again.
		return core.Notify(ctx, tx, Wakeup{Kind: WakeWorker, Worker: id})
	})
	return w, err
}

// SetWorkerCertificate binds a certificate fingerprint to a worker the
// scope manages; the previous certificate stops authenticating at once.
func (s *Store) SetWorkerCertificate(ctx context.Context, tenant Tenant, id uuid.UUID, fingerprint, subject string, onlineWindow time.Duration) (Worker, error) {
	err := s.inTx(ctx, "set certificate", func(tx pgx.Tx) error {
		if err := authorizeWorkerManagement(ctx, tx, tenant, id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE workers SET certificate_fingerprint = $2, certificate_subject = $3, updated_at = now()
			WHERE id = $1`, id, fingerprint, subject)
		if core.IsUniqueViolation(err) {
			return problem.Wrap(ErrConflict, "certificate already registered to another worker")
		}
		if err != nil {
			return fmt.Errorf("set certificate: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return core.Notify(ctx, tx, Wakeup{Kind: WakeIdentityChanged, Worker: id})
	})
	if err != nil {
		return Worker{}, err
	}
	return s.GetWorker(ctx, tenant, id, onlineWindow)
}

// WorkerIdentity is what authentication needs to know about a worker.
type WorkerIdentity struct {
	ID      uuid.UUID
	Enabled bool
	Revoked bool
	// Current is true when the fingerprint is the worker's current
	// certificate (not the previous one, during a renewal's grace period).
	Current bool
}

// WorkerByFingerprint resolves a client certificate to its worker: the
// current certificate, or the previous one during its grace period after a
// renewal. The first request with the current certificate ends the previous
// one's grace at once.
func (s *Store) WorkerByFingerprint(ctx context.Context, fingerprint string) (WorkerIdentity, error) {
	var id WorkerIdentity
	var graceOpen bool
	err := s.pool.QueryRow(ctx, `
		SELECT id, enabled, revoked_at IS NOT NULL, certificate_fingerprint = $1, previous_certificate_fingerprint IS NOT NULL
		FROM workers
		WHERE (certificate_fingerprint = $1 AND certificate_fingerprint <> '')
			OR (previous_certificate_fingerprint = $1 AND previous_certificate_valid_until > now())`,
		fingerprint).Scan(&id.ID, &id.Enabled, &id.Revoked, &id.Current, &graceOpen)
	if errors.Is(err, pgx.ErrNoRows) {
		return WorkerIdentity{}, ErrNotFound
	}
	if err != nil {
		return WorkerIdentity{}, fmt.Errorf("worker by fingerprint: %w", err)
	}
	if graceOpen && id.Current {
		err := s.inTx(ctx, "end certificate grace", func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE workers SET previous_certificate_fingerprint = NULL, previous_certificate_valid_until = NULL
				WHERE id = $1 AND certificate_fingerprint = $2 AND previous_certificate_fingerprint IS NOT NULL`, id.ID, fingerprint)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			return core.Notify(ctx, tx, Wakeup{Kind: WakeIdentityChanged, Worker: id.ID})
		})
		if err != nil {
			return WorkerIdentity{}, fmt.Errorf("end certificate grace: %w", err)
		}
	}
	return id, nil
}

// RevokeWorker revokes a worker the scope manages for good, in one transaction: it can lease
// nothing more, its active attempts end by policy (not counted against
// max_attempts) so their tasks are leasable elsewhere at once, and its
// waiting polls are woken to be refused.
func (s *Store) RevokeWorker(ctx context.Context, tenant Tenant, id uuid.UUID, reason string, onlineWindow time.Duration) (Worker, error) {
	var w Worker
	err := s.inTx(ctx, "revoke worker", func(tx pgx.Tx) error {
		if err := authorizeWorkerManagement(ctx, tx, tenant, id); err != nil {
			return err
		}
		// This release tells worker.revoked itself (below); the previous
		// release's trigger, kept until the contract step, stands aside.
		if _, err := tx.Exec(ctx, `SELECT set_config('gateway.worker_revoked_emitted', 'on', true)`); err != nil {
			return fmt.Errorf("mark revocation emitted: %w", err)
		}
		var firstRevocation bool
		err := tx.QueryRow(ctx, `UPDATE workers w SET revoked_at = coalesce(w.revoked_at, now()), revocation_reason = $2,
			enabled = false, updated_at = now()
			FROM (SELECT revoked_at FROM workers WHERE id = $1 FOR UPDATE) before
			WHERE w.id = $1 RETURNING before.revoked_at IS NULL`, id, reason).Scan(&firstRevocation)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("revoke worker: %w", err)
		}
		if _, err := releaseAttempts(ctx, tx, id, nil, "worker_revoked"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE enrollment_tokens SET used_at = now() WHERE worker_id = $1 AND used_at IS NULL`, id); err != nil {
			return fmt.Errorf("void enrollment tokens: %w", err)
		}
		if w, err = getWorker(ctx, tx, tenant, id, onlineWindow); err != nil {
			return err
		}
		// Told once, when first revoked, to those who may see it now.
		if firstRevocation {
			if _, err := core.EmitEvent(ctx, tx, Event{Type: EventWorkerRevoked, Audience: core.WorkerAudience(id),
				Data: map[string]any{"worker_id": id, "name": w.Name, "reason": reason, "revoked_at": w.RevokedAt}}); err != nil {
				return err
			}
		}
		return core.Notify(ctx, tx, Wakeup{Kind: WakeWorkerRevoked, Worker: id})
	})
	if err != nil {
		return Worker{}, err
	}
	return w, nil
}

// releaseAttempts ends a worker's active attempts by policy (optionally only
// one organization's), in the caller's transaction (lease.ReleaseAttempts).
// Returns how many attempts it ended.
func releaseAttempts(ctx context.Context, tx core.Executor, workerID uuid.UUID, org *uuid.UUID, reason string) (int, error) {
	return lease.ReleaseAttempts(ctx, tx, workerID, lease.ReleaseFilter{Organization: org}, reason)
}

// releaseAttemptsLackingLabels ends, by policy, the worker's active
// attempts whose task's label selector its new labels fail: a label taken
// away mid-run is handled exactly like a critical capability the worker
// stopped advertising (the attempt is superseded, the task goes back to the
// queue, and the worker's next heartbeat hears the lease is lost).
func releaseAttemptsLackingLabels(ctx context.Context, tx core.Executor, workerID uuid.UUID, labels []byte) (int, error) {
	return lease.ReleaseAttempts(ctx, tx, workerID, lease.ReleaseFilter{LackingLabels: labels}, "label_lost")
}

// WorkerEligibility says whether an assigned worker can lease an
// organization's tasks now, and if not, why.
type WorkerEligibility struct {
	Worker            Worker
	AssignmentEnabled bool
	Eligible          bool
	// Reason is "eligible", "revoked", "disabled", "assignment_disabled",
	// "offline" or "at_capacity".
	Reason string
}

// OrganizationWorkers lists the workers assigned to an organization with
// their eligibility, and for each one that cannot take the organization's
// work, why — so an operator sees at once that no worker is eligible.
func (s *Store) OrganizationWorkers(ctx context.Context, tenant Tenant, org uuid.UUID, onlineWindow time.Duration) ([]WorkerEligibility, error) {
	if _, err := s.GetOrganization(ctx, tenant, org); err != nil {
		return nil, err
	}
	// Capacity is shared by every organization a worker serves, so
	// eligibility is judged on all its active attempts (busy), even where
	// the worker's ActiveAttempts shows only the caller's.
	rows, err := s.pool.Query(ctx, `SELECT `+workerColumns+`, ow.enabled,
			(SELECT count(*) FROM worker_task_attempts a WHERE `+core.WorkerLiveAttempts("a", "w.id")+`)
		FROM organization_workers ow JOIN workers w ON w.id = ow.worker_id
		WHERE ow.organization_id = $3 AND ow.revoked_at IS NULL
		ORDER BY w.name, w.id`, onlineWindow.Seconds(), tenant.Arg(), org)
	if err != nil {
		return nil, fmt.Errorf("organization workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkerEligibility, error) {
		var e WorkerEligibility
		w := &e.Worker
		var busy int
		err := r.Scan(append(workerFields(w), &e.AssignmentEnabled, &busy)...)
		switch {
		case w.RevokedAt != nil:
			e.Reason = "revoked"
		case !w.Enabled:
			e.Reason = "disabled"
		case !e.AssignmentEnabled:
			e.Reason = "assignment_disabled"
		case !w.Online:
			e.Reason = "offline"
		case busy >= w.MaxConcurrentTasks:
			e.Reason = "at_capacity"
		default:
			e.Reason, e.Eligible = "eligible", true
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("organization workers: %w", err)
	}
	return out, nil
}
