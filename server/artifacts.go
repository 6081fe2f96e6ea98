package server

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/server/objectstore"
	"github.com/worker-gateway/gateway/store"
)

// artifactKeyPrefix starts every artifact's object key, so the orphan
// sweep lists only what the gateway put there.
const artifactKeyPrefix = "artifacts"

// ArtifactConfig is where artifacts go and how big they may be.
type ArtifactConfig struct {
	// Backend keeps the bytes; nil disables artifacts (503).
	Backend objectstore.Backend
	// PublicURL is the gateway's URL as workers reach it, for fs upload
	// URLs; empty means the address of the listener that accepted the
	// worker's connection (never the Host header, which the client chooses).
	PublicURL string
	// SessionTTL is how long an upload session stays open.
	SessionTTL time.Duration
	// MaxBytes bounds one artifact; MaxBytesPerAttempt all of an attempt's.
	MaxBytes           int64
	MaxBytesPerAttempt int64
	// UploadIdleTimeout is how long an upload's body may go without a byte
	// arriving. Uploads are not bound by RequestReadTimeout: a large one
	// may take minutes, so its bound is on progress instead.
	UploadIdleTimeout time.Duration
}

func (h *handlers) artifacts() (objectstore.Backend, error) {
	if h.cfg.Artifacts.Backend == nil {
		return nil, newProblem(http.StatusServiceUnavailable, problem.ArtifactsDisabled, "this gateway has no artifact storage configured")
	}
	return h.cfg.Artifacts.Backend, nil
}

// OpenArtifactUpload opens an upload session and says how to upload.
func (h *handlers) OpenArtifactUpload(ctx context.Context, req api.OpenArtifactUploadRequestObject) (api.OpenArtifactUploadResponseObject, error) {
	backend, err := h.artifacts()
	if err != nil {
		return nil, err
	}
	b := req.Body
	cfg := h.cfg.Artifacts
	contentType := "application/octet-stream"
	if b.ContentType != nil && *b.ContentType != "" {
		contentType = *b.ContentType
	}
	ref := store.AttemptRef{WorkerID: workerFrom(ctx), AttemptID: req.AttemptId, LeaseToken: req.Params.LeaseToken}
	u, err := h.store.OpenUpload(ctx, store.OpenUploadParams{
		AttemptRef: ref, Name: b.Name, ContentType: contentType, SizeBytes: b.SizeBytes, SHA256: b.Sha256,
		ObjectKey: objectstore.NewKey(artifactKeyPrefix), TTL: cfg.SessionTTL,
		MaxBytes: cfg.MaxBytes, MaxBytesPerAttempt: cfg.MaxBytesPerAttempt,
	})
	if err != nil {
		return nil, err
	}
	session := api.UploadSession{
		UploadId: u.ID, Method: api.PUT, ExpiresAt: u.ExpiresAt, ExpiresInSeconds: secondsOf(u.ExpiresIn),
		Headers: map[string]string{"Content-Type": contentType},
	}
	if backend.Direct() {
		put, err := backend.PresignPut(ctx, u.ObjectKey, u.SizeBytes, u.SHA256, contentType, u.ExpiresIn)
		if err != nil {
			return nil, fmt.Errorf("presign upload: %w", err)
		}
		session.Url, session.Headers = put.URL, put.Headers
	} else {
		base, err := h.publicURL(ctx)
		if err != nil {
			return nil, err
		}
		session.Url = strings.TrimSuffix(base, "/") + "/v1/uploads/" + u.ID.String()
	}
	return api.OpenArtifactUpload201JSONResponse(session), nil
}

// publicURL is the base of the gateway's own upload URLs: the configured
// public URL, else "https://" and the local address of the connection the
// request came on. That address is the socket's, set by net/http: never the
// Host header, which whoever sends the request (or a proxy) chooses.
func (h *handlers) publicURL(ctx context.Context) (string, error) {
	if h.cfg.Artifacts.PublicURL != "" {
		return h.cfg.Artifacts.PublicURL, nil
	}
	addr, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return "", errors.New("no public URL configured and no listener address to build upload URLs from")
	}
	return (&url.URL{Scheme: "https", Host: addr.String()}).String(), nil
}

// UploadArtifact streams an fs-backend upload to disk, checking its length
// and SHA-256 as it goes. The body is never held in memory.
func (h *handlers) UploadArtifact(ctx context.Context, req api.UploadArtifactRequestObject) (api.UploadArtifactResponseObject, error) {
	backend, err := h.artifacts()
	if err != nil {
		return nil, err
	}
	if backend.Direct() {
		return nil, newProblem(http.StatusConflict, problem.UploadDirect, "upload to the URL the session named, not to the gateway")
	}
	workerID := workerFrom(ctx)
	u, err := h.store.UploadForWorker(ctx, workerID, req.UploadId)
	if err != nil {
		return nil, err
	}
	if n := requestContentLengthFrom(ctx); n >= 0 && n != u.SizeBytes {
		return nil, newProblem(http.StatusBadRequest, problem.UploadMismatch,
			problem.Text(fmt.Sprintf("the session declared %d bytes; the request has %d", u.SizeBytes, n)))
	}
	if err := backend.Put(ctx, u.ObjectKey, req.Body, u.SizeBytes, u.SHA256, u.ContentType); err != nil {
		switch {
		case errors.Is(err, objectstore.ErrExists):
			return nil, store.ErrUploadState
		case errors.Is(err, objectstore.ErrMismatch), errors.Is(err, objectstore.ErrTooLarge):
			return nil, withCause(newProblem(http.StatusBadRequest, problem.UploadMismatch,
				"the body does not match the size or SHA-256 the session declared"), err)
		}
		return nil, fmt.Errorf("store upload: %w", err)
	}
	if err := h.store.MarkUploaded(ctx, workerID, req.UploadId); err != nil {
		// The session closed while we streamed: the object must not linger.
		_ = backend.Delete(context.WithoutCancel(ctx), u.ObjectKey)
		return nil, err
	}
	h.metrics.uploadBytes.Add(float64(u.SizeBytes))
	return api.UploadArtifact204Response{}, nil
}

// CommitArtifactUpload verifies the stored object and creates the file.
func (h *handlers) CommitArtifactUpload(ctx context.Context, req api.CommitArtifactUploadRequestObject) (api.CommitArtifactUploadResponseObject, error) {
	backend, err := h.artifacts()
	if err != nil {
		return nil, err
	}
	f, err := h.store.CommitUpload(ctx, workerFrom(ctx), req.UploadId, func(ctx context.Context, u store.Upload) error {
		info, err := backend.Stat(ctx, u.ObjectKey)
		switch {
		case errors.Is(err, objectstore.ErrNotFound):
			return store.ErrUploadMissing
		case err != nil:
			return fmt.Errorf("verify upload: %w", err)
		case info.Size != u.SizeBytes || info.SHA256 != u.SHA256:
			// A tampered object never becomes a file; remove it now.
			_ = backend.Delete(context.WithoutCancel(ctx), u.ObjectKey)
			return store.ErrUploadMismatch
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return api.CommitArtifactUpload200JSONResponse(toFile(f)), nil
}

func toFile(f store.File) api.File {
	return api.File{
		Id: f.ID, OrganizationId: f.OrganizationID, TaskId: f.TaskID, AttemptId: f.AttemptID, Name: f.Name,
		ContentType: f.ContentType, SizeBytes: f.SizeBytes, Sha256: f.SHA256, CreatedAt: f.CreatedAt,
	}
}

// ListTaskArtifacts lists a task's committed files.
func (h *handlers) ListTaskArtifacts(ctx context.Context, req api.ListTaskArtifactsRequestObject) (api.ListTaskArtifactsResponseObject, error) {
	tenant := tenantFrom(ctx)
	files, err := h.store.ListTaskFiles(ctx, tenant, req.TaskId)
	if err != nil {
		return nil, err
	}
	return api.ListTaskArtifacts200JSONResponse{Items: mapSlice(files, toFile)}, nil
}

// GetFile returns a file's metadata.
func (h *handlers) GetFile(ctx context.Context, req api.GetFileRequestObject) (api.GetFileResponseObject, error) {
	tenant := tenantFrom(ctx)
	f, err := h.store.GetFile(ctx, tenant, req.FileId)
	if err != nil {
		return nil, err
	}
	return api.GetFile200JSONResponse(toFile(f)), nil
}

// GetFileContent streams a file's bytes.
func (h *handlers) GetFileContent(ctx context.Context, req api.GetFileContentRequestObject) (api.GetFileContentResponseObject, error) {
	tenant := tenantFrom(ctx)
	backend, err := h.artifacts()
	if err != nil {
		return nil, err
	}
	f, err := h.store.GetFile(ctx, tenant, req.FileId)
	if err != nil {
		return nil, err
	}
	body, _, err := backend.Open(ctx, f.ObjectKey)
	if errors.Is(err, objectstore.ErrNotFound) {
		return nil, withCause(newProblem(http.StatusNotFound, problem.NotFound, "the file's content is gone"), err)
	}
	if err != nil {
		return nil, fmt.Errorf("open file: %w", err)
	}
	return fileContentResponse{file: f, body: body}, nil
}

// fileContentResponse streams a file with its length, digest and a content
// type from its declared one (artifactContentType; the generated type would
// force application/octet-stream).
type fileContentResponse struct {
	file store.File
	body io.ReadCloser
}

func (r fileContentResponse) VisitGetFileContentResponse(w http.ResponseWriter) error {
	defer r.body.Close()
	setDownloadHeaders(w, r.file.ContentType, r.file.Name)
	w.Header().Set("Content-Length", strconv.FormatInt(r.file.SizeBytes, 10))
	if sum, err := hex.DecodeString(r.file.SHA256); err == nil {
		w.Header().Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":")
	}
	w.WriteHeader(http.StatusOK)
	_, err := io.Copy(w, r.body)
	return err
}

// sanitizeFilename keeps a header-safe file name.
func sanitizeFilename(name string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == '"' || r == '\\' || r > 0x7e {
			return '_'
		}
		return r
	}, name)
}
