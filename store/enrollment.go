package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// EnrollmentTokenPrefix marks one-time enrollment tokens.
const EnrollmentTokenPrefix = "wge_"

// CreateEnrollmentToken mints a one-time token for a worker the scope
// manages (stored as a hash) and returns it with its expiry. A revoked
// worker gets none.
func (s *Store) CreateEnrollmentToken(ctx context.Context, tenant Tenant, workerID uuid.UUID, ttl time.Duration) (string, time.Time, error) {
	token, err := NewSecret(EnrollmentTokenPrefix)
	if err != nil {
		return "", time.Time{}, err
	}
	var expires time.Time
	err = s.inTx(ctx, "create enrollment token", func(tx pgx.Tx) error {
		if err := authorizeWorkerManagement(ctx, tx, tenant, workerID); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO enrollment_tokens (worker_id, token_hash, expires_at)
			SELECT id, $2, now() + make_interval(secs => $3) FROM workers WHERE id = $1 AND revoked_at IS NULL
			RETURNING expires_at`, workerID, HashToken(token), ttl.Seconds()).Scan(&expires)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("create enrollment token: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// Certificate is a certificate the gateway bound to a worker.
type Certificate struct {
	Fingerprint string
	Subject     string
	ExpiresAt   time.Time
	PEM         string
}

// Enroll consumes a one-time token and binds the certificate signed for the
// worker, in one transaction. sign is called inside it with the worker's id
// (it becomes the certificate's subject) and returns the certificate.
// publicKeySHA256 identifies the CSR's key: a repeat with a used but
// unexpired token and the same key — a worker whose answer was lost —
// gets the same certificate back (replayed), and nothing is signed.
func (s *Store) Enroll(ctx context.Context, token, publicKeySHA256 string, sign func(workerID uuid.UUID) (Certificate, error)) (workerID uuid.UUID, certPEM string, replayed bool, err error) {
	err = s.inTx(ctx, "enroll", func(tx pgx.Tx) error {
		replayed = false
		err := tx.QueryRow(ctx, `
			UPDATE enrollment_tokens e SET used_at = now()
			FROM workers w
			WHERE e.token_hash = $1 AND e.used_at IS NULL AND e.expires_at > now()
				AND w.id = e.worker_id AND w.revoked_at IS NULL
			RETURNING e.worker_id`, HashToken(token)).Scan(&workerID)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `
				SELECT e.worker_id, e.certificate_pem FROM enrollment_tokens e JOIN workers w ON w.id = e.worker_id
				WHERE e.token_hash = $1 AND e.used_at IS NOT NULL AND e.expires_at > now()
					AND e.public_key_sha256 = $2 AND e.certificate_pem IS NOT NULL AND w.revoked_at IS NULL`,
				HashToken(token), publicKeySHA256).Scan(&workerID, &certPEM)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrEnrollmentToken
			}
			replayed = err == nil
			core.AuditSkip(ctx) // the first enrollment was audited
			return err
		}
		if err != nil {
			return fmt.Errorf("consume enrollment token: %w", err)
		}
		cert, err := sign(workerID)
		if err != nil {
			return err
		}
		core.AuditWorkerActor(ctx, workerID)
		core.AuditDetail(ctx, "expires_at", cert.ExpiresAt)
		certPEM = cert.PEM
		if _, err := tx.Exec(ctx, `UPDATE enrollment_tokens SET public_key_sha256 = $2, certificate_pem = $3 WHERE token_hash = $1`,
			HashToken(token), publicKeySHA256, cert.PEM); err != nil {
			return fmt.Errorf("remember enrollment: %w", err)
		}
		return bindCertificate(ctx, tx, workerID, cert, "", 0)
	})
	if err != nil {
		return uuid.Nil, "", false, err
	}
	return workerID, certPEM, replayed, nil
}

// RenewCertificate binds a new certificate to a worker. The certificate the
// worker renewed with (callerFingerprint) keeps working until the new one is
// first used or grace passes. Keeping the caller's, not whichever was
// current, matters when a renewal's answer is lost: the retry comes with the
// old certificate, which must survive it.
func (s *Store) RenewCertificate(ctx context.Context, workerID uuid.UUID, cert Certificate, callerFingerprint string, grace time.Duration) error {
	return s.inTx(ctx, "renew certificate", func(tx pgx.Tx) error {
		return bindCertificate(ctx, tx, workerID, cert, callerFingerprint, grace)
	})
}

func bindCertificate(ctx context.Context, tx pgx.Tx, workerID uuid.UUID, cert Certificate, callerFingerprint string, grace time.Duration) error {
	tag, err := tx.Exec(ctx, `
		UPDATE workers SET
			previous_certificate_fingerprint = CASE WHEN $5 > 0 AND $6 <> '' THEN $6 END,
			previous_certificate_valid_until = CASE WHEN $5 > 0 AND $6 <> '' THEN now() + make_interval(secs => $5) END,
			certificate_fingerprint = $2, certificate_subject = $3, certificate_expires_at = $4, updated_at = now()
		WHERE id = $1 AND revoked_at IS NULL`, workerID, cert.Fingerprint, cert.Subject, cert.ExpiresAt, grace.Seconds(), callerFingerprint)
	if core.IsUniqueViolation(err) {
		return problem.Wrap(ErrConflict, "certificate already registered to another worker")
	}
	if err != nil {
		return fmt.Errorf("bind certificate: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrWorkerRevoked
	}
	return core.Notify(ctx, tx, Wakeup{Kind: WakeIdentityChanged, Worker: workerID})
}
