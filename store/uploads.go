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
	"github.com/worker-gateway/gateway/store/internal/fencing"
	"github.com/worker-gateway/gateway/store/internal/lease"
)

// Upload is a worker_artifact_uploads row.
type Upload struct {
	ID             uuid.UUID
	TaskID         uuid.UUID
	AttemptID      uuid.UUID
	OrganizationID uuid.UUID
	ObjectKey      string
	Name           string
	ContentType    string
	SizeBytes      int64
	SHA256         string
	Status         string
	ExpiresAt      time.Time
	ExpiresIn      time.Duration
	FileID         *uuid.UUID
}

const uploadColumns = `u.id, u.task_id, u.attempt_id, u.organization_id, u.object_key, u.original_name, u.content_type,
	coalesce(u.size_bytes, 0), u.sha256, u.status, u.expires_at, extract(epoch FROM u.expires_at - now())::float8, u.file_id`

func scanUpload(row pgx.Row) (Upload, error) {
	var u Upload
	var in float64
	err := row.Scan(&u.ID, &u.TaskID, &u.AttemptID, &u.OrganizationID, &u.ObjectKey, &u.Name, &u.ContentType,
		&u.SizeBytes, &u.SHA256, &u.Status, &u.ExpiresAt, &in, &u.FileID)
	u.ExpiresIn = core.Seconds(in)
	return u, err
}

// OpenUploadParams declares an artifact.
type OpenUploadParams struct {
	AttemptRef
	Name, ContentType string
	SizeBytes         int64
	SHA256            string
	ObjectKey         string
	TTL               time.Duration
	// MaxBytes bounds one artifact; MaxBytesPerAttempt all of an attempt's.
	MaxBytes, MaxBytesPerAttempt int64
}

// OpenUpload creates an upload session, fenced on the attempt's live lease
// and bounded by the size limits, in one statement.
func (s *Store) OpenUpload(ctx context.Context, p OpenUploadParams) (Upload, error) {
	if p.SizeBytes > p.MaxBytes {
		return Upload{}, ErrUploadTooLarge
	}
	var u Upload
	err := s.inTx(ctx, "open upload", func(tx pgx.Tx) error {
		var err error
		u, err = scanUpload(tx.QueryRow(ctx, `
			WITH a AS (
				SELECT a.id, a.task_id, t.organization_id, t.scan_id, t.scan_job_id
				FROM worker_task_attempts a JOIN worker_tasks t ON t.id = a.task_id
				WHERE `+fencing.LeaseHeld("a", "$1", "$2", "$3")+`
				FOR SHARE OF a
			)
			INSERT INTO worker_artifact_uploads AS u (task_id, attempt_id, organization_id, scan_id, scan_job_id,
				object_key, original_name, content_type, size_bytes, sha256, expires_at)
			SELECT a.task_id, a.id, a.organization_id, a.scan_id, a.scan_job_id, $4, $5, $6, $7::bigint, $8,
				now() + make_interval(secs => $9)
			FROM a
			WHERE $7::bigint + (SELECT coalesce(sum(size_bytes), 0)::bigint FROM worker_artifact_uploads
				WHERE attempt_id = a.id AND status IN ('prepared', 'uploaded', 'committed')) <= $10::bigint
			RETURNING `+uploadColumns,
			p.AttemptID, p.WorkerID, lease.TokenHash(p.LeaseToken), p.ObjectKey, p.Name, p.ContentType, p.SizeBytes, p.SHA256,
			p.TTL.Seconds(), p.MaxBytesPerAttempt))
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := currentLiveLease(ctx, tx, p.AttemptRef); err != nil {
				if errors.Is(err, ErrLeaseLost) {
					return lease.AttemptMissOrLost(ctx, tx, p.AttemptRef)
				}
				return err
			}
			return problem.Wrap(ErrUploadTooLarge, problem.Text(fmt.Sprintf("the attempt's artifacts would exceed %d bytes", p.MaxBytesPerAttempt)))
		}
		return err
	})
	if err != nil {
		return Upload{}, err
	}
	return u, nil
}

// UploadForWorker returns a session its worker may upload to now: its own,
// prepared, unexpired, with the attempt's lease live. Anything else about
// another worker's session is ErrNotFound.
func (s *Store) UploadForWorker(ctx context.Context, workerID, uploadID uuid.UUID) (Upload, error) {
	var live, expired bool
	u, err := scanUploadWith(s.pool.QueryRow(ctx, `
		SELECT `+uploadColumns+`,
			`+fencing.LeaseLive("a")+`, u.expires_at <= now()
		FROM worker_artifact_uploads u JOIN worker_task_attempts a ON a.id = u.attempt_id
		WHERE u.id = $1 AND a.worker_id = $2`, uploadID, workerID), &live, &expired)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Upload{}, ErrNotFound
	case err != nil:
		return Upload{}, fmt.Errorf("find upload: %w", err)
	case expired:
		return Upload{}, ErrUploadExpired
	case !live:
		return Upload{}, ErrLeaseLost
	case u.Status != "prepared":
		return Upload{}, ErrUploadState
	}
	return u, nil
}

func scanUploadWith(row pgx.Row, extra ...any) (Upload, error) {
	var u Upload
	var in float64
	dest := append([]any{&u.ID, &u.TaskID, &u.AttemptID, &u.OrganizationID, &u.ObjectKey, &u.Name, &u.ContentType,
		&u.SizeBytes, &u.SHA256, &u.Status, &u.ExpiresAt, &in, &u.FileID}, extra...)
	err := row.Scan(dest...)
	u.ExpiresIn = core.Seconds(in)
	return u, err
}

// MarkUploaded records that the gateway stored the session's object
// (prepared → uploaded), fenced on the lease and the session's expiry.
func (s *Store) MarkUploaded(ctx context.Context, workerID, uploadID uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE worker_artifact_uploads u SET status = 'uploaded'
		FROM worker_task_attempts a
		WHERE u.id = $1 AND a.id = u.attempt_id AND a.worker_id = $2 AND u.status = 'prepared' AND u.expires_at > now()
			AND `+fencing.LeaseLive("a"), uploadID, workerID)
	if err != nil {
		return fmt.Errorf("mark uploaded: %w", err)
	}
	if tag.RowsAffected() == 0 {
		_, err := s.UploadForWorker(ctx, workerID, uploadID)
		if err == nil {
			return ErrUploadState
		}
		return err
	}
	return nil
}

// File is a committed artifact.
type File struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	TaskID         *uuid.UUID
	AttemptID      *uuid.UUID
	Name           string
	ContentType    string
	SizeBytes      int64
	SHA256         string
	ObjectKey      string
	CreatedAt      time.Time
}

const fileColumns = `f.id, f.organization_id, f.task_id, f.attempt_id, f.name, f.content_type, f.size_bytes, f.sha256, f.object_key, f.created_at`

func scanFile(row pgx.Row) (File, error) {
	var f File
	err := row.Scan(&f.ID, &f.OrganizationID, &f.TaskID, &f.AttemptID, &f.Name, &f.ContentType, &f.SizeBytes, &f.SHA256, &f.ObjectKey, &f.CreatedAt)
	return f, err
}

// ObjectCheck verifies a session's stored object; it returns nil,
// ErrUploadMissing or ErrUploadMismatch.
type ObjectCheck func(ctx context.Context, u Upload) error

// CommitUpload turns a session into a file, idempotently: a committed
// session returns its file whatever the lease. Otherwise the session must be
// this worker's, open, unexpired, with a live lease; the object is verified
// first (outside the transaction: it may read the whole object), then the
// session is committed fenced on the same conditions. A failed check marks
// the session failed.
func (s *Store) CommitUpload(ctx context.Context, workerID, uploadID uuid.UUID, check ObjectCheck) (File, error) {
	if f, err := s.committedFile(ctx, workerID, uploadID); err == nil || !errors.Is(err, ErrUploadState) {
		return f, err
	}
	u, err := s.uploadForCommit(ctx, workerID, uploadID)
	if err != nil {
		return File{}, err
	}
	if err := check(ctx, u); err != nil {
		if errors.Is(err, ErrUploadMismatch) || errors.Is(err, ErrUploadMissing) {
			if _, ferr := s.pool.Exec(ctx, `UPDATE worker_artifact_uploads SET status = 'failed'
				WHERE id = $1 AND status IN ('prepared', 'uploaded')`, uploadID); ferr != nil {
				return File{}, fmt.Errorf("mark upload failed: %w", ferr)
			}
		}
		return File{}, err
	}
	var f File
	err = s.inTx(ctx, "commit upload", func(tx pgx.Tx) error {
		var id uuid.UUID
		err := tx.QueryRow(ctx, `
			WITH file AS (
				INSERT INTO files (organization_id, name, content_type, size_bytes, sha256, object_key, task_id, attempt_id)
				SELECT u.organization_id, u.original_name, u.content_type, u.size_bytes, u.sha256, u.object_key, u.task_id, u.attempt_id
				FROM worker_artifact_uploads u JOIN worker_task_attempts a ON a.id = u.attempt_id
				WHERE u.id = $1 AND a.worker_id = $2
					AND u.status IN ('prepared', 'uploaded') AND u.expires_at > now()
					AND `+fencing.LeaseLive("a")+`
				FOR UPDATE OF u
				RETURNING id
			)
			UPDATE worker_artifact_uploads SET status = 'committed', committed_at = now(), file_id = (SELECT id FROM file)
			WHERE id = $1 AND EXISTS (SELECT 1 FROM file)
			RETURNING file_id`, uploadID, workerID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			// A concurrent commit won, or the session closed meanwhile.
			return ErrUploadState
		}
		if err != nil {
			return fmt.Errorf("commit upload: %w", err)
		}
		f, err = scanFile(tx.QueryRow(ctx, `SELECT `+fileColumns+` FROM files f WHERE f.id = $1`, id))
		return err
	})
	if errors.Is(err, ErrUploadState) {
		if f, cerr := s.committedFile(ctx, workerID, uploadID); cerr == nil {
			return f, nil
		}
		_, err = s.uploadForCommit(ctx, workerID, uploadID)
		if err == nil {
			err = ErrUploadState
		}
	}
	if err != nil {
		return File{}, err
	}
	return f, nil
}

// committedFile returns the file of a committed session of this worker;
// ErrUploadState when the session is not committed.
func (s *Store) committedFile(ctx context.Context, workerID, uploadID uuid.UUID) (File, error) {
	f, err := scanFile(s.pool.QueryRow(ctx, `
		SELECT `+fileColumns+` FROM worker_artifact_uploads u
		JOIN worker_task_attempts a ON a.id = u.attempt_id
		JOIN files f ON f.id = u.file_id
		WHERE u.id = $1 AND a.worker_id = $2 AND u.status = 'committed'`, uploadID, workerID))
	if errors.Is(err, pgx.ErrNoRows) {
		return File{}, ErrUploadState
	}
	return f, err
}

// uploadForCommit is UploadForWorker that also accepts an uploaded session
// (fs) beside a prepared one (s3, uploaded straight to the store).
func (s *Store) uploadForCommit(ctx context.Context, workerID, uploadID uuid.UUID) (Upload, error) {
	u, err := s.UploadForWorker(ctx, workerID, uploadID)
	if errors.Is(err, ErrUploadState) && u.Status == "" {
		var live, expired bool
		u, err = scanUploadWith(s.pool.QueryRow(ctx, `
			SELECT `+uploadColumns+`, `+fencing.LeaseLive("a")+`, u.expires_at <= now()
			FROM worker_artifact_uploads u JOIN worker_task_attempts a ON a.id = u.attempt_id
			WHERE u.id = $1 AND a.worker_id = $2`, uploadID, workerID), &live, &expired)
		switch {
		case err != nil:
			return Upload{}, err
		case expired:
			return Upload{}, ErrUploadExpired
		case !live:
			return Upload{}, ErrLeaseLost
		case u.Status != "uploaded":
			return Upload{}, ErrUploadState
		}
	}
	return u, err
}

// GetFile returns a file the scope may see.
func (s *Store) GetFile(ctx context.Context, tenant Tenant, id uuid.UUID) (File, error) {
	f, err := scanFile(s.pool.QueryRow(ctx, `SELECT `+fileColumns+` FROM files f
		WHERE f.id = $1 AND `+core.InTenant("f.organization_id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return File{}, ErrNotFound
	}
	if err != nil {
		return File{}, fmt.Errorf("get file: %w", err)
	}
	return f, nil
}

// ListTaskFiles lists the files a task's attempts committed.
func (s *Store) ListTaskFiles(ctx context.Context, tenant Tenant, taskID uuid.UUID) ([]File, error) {
	if _, err := s.readTenantTask(ctx, s.pool, tenant, taskID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+fileColumns+` FROM files f WHERE f.task_id = $1 ORDER BY f.created_at, f.id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	files, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (File, error) { return scanFile(r) })
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	return files, nil
}

// ExpireUploads marks up to limit open sessions past their expiry expired
// and returns their object keys, for the caller to delete.
func (s *Store) ExpireUploads(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE worker_artifact_uploads SET status = 'expired'
		WHERE id IN (SELECT id FROM worker_artifact_uploads
			WHERE status IN ('prepared', 'uploaded') AND expires_at <= now()
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING object_key`, limit)
	if err != nil {
		return nil, fmt.Errorf("expire uploads: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// LiveObjectKeys reports which of keys belong to a session that may still
// be, or has been, committed — the objects an orphan sweep must keep.
func (s *Store) LiveObjectKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT object_key FROM worker_artifact_uploads
		WHERE object_key = ANY($1) AND status IN ('prepared', 'uploaded', 'committed')
		UNION SELECT object_key FROM files WHERE object_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("live object keys: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("live object keys: %w", err)
	}
	out := make(map[string]bool, len(live))
	for _, k := range live {
		out[k] = true
	}
	return out, nil
}
