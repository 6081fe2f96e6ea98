package workerclient

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Artifacts: LeasedTask.UploadArtifact declares a file (name, content type,
// exact size and SHA-256) with POST /v1/attempts/{id}/artifacts, PUTs its
// bytes where the session says, and commits it with
// POST /v1/uploads/{id}/commit. The bytes are streamed from the caller's
// reader (or a temporary file), never held in memory.

const (
	// maxUploadRestarts: how many times an upload starts over with a new
	// session after the one it had expired.
	maxUploadRestarts = 2
	// OpenUploadRequest limits (characters).
	maxArtifactName        = 255
	maxArtifactContentType = 255
	defaultContentType     = "application/octet-stream"
	// How much of an upload answer is read.
	maxUploadAnswerBytes = 64 << 10
)

// UploadArtifact stores what r holds as a file of the attempt, named name,
// and returns the committed file. contentType defaults to
// application/octet-stream.
//
// The artifact is what r holds from where it stands to its end. r is read
// once to hash it. When r is an io.ReadSeeker that can seek (a file, a
// bytes.Reader) it is then read again for the upload, and its position
// afterwards is unspecified; any other reader (a pipe, a stream) is copied to
// a temporary file, removed before UploadArtifact returns. Either way the
// artifact is never held in memory, and r must not change until
// UploadArtifact returns.
//
// The upload goes where the gateway's session says: to the gateway itself
// (fs storage: the worker's mTLS client) or to a presigned object-storage URL
// (s3: a client without the worker's certificate, which sends only the
// headers the session lists). Each step (opening the session, the upload,
// the commit) is retried on transport errors, 408, 429 and 5xx, until ctx
// ends or the lease does; an expired session is replaced by a new one, at
// most twice. A lease-lost answer cancels the handler's context with
// ErrLeaseLost and the error wraps ErrLeaseLost. Other refusals (a name the
// gateway rejects, an artifact over its size limit, artifacts disabled) are
// returned as an *APIError.
func (t *LeasedTask) UploadArtifact(ctx context.Context, name, contentType string, r io.Reader) (*apiclient.File, error) {
	if t.sink != nil {
		return t.sink.UploadArtifact(ctx, name, cmp.Or(contentType, defaultContentType), r)
	}
	if t.lease == nil || t.lease.rt == nil {
		return nil, errNotLeased
	}
	return t.lease.rt.uploadArtifact(ctx, t.lease, name, contentType, r)
}

// artifactSource is an artifact's bytes, hashed, ready to be read from the
// start as often as an upload needs.
type artifactSource struct {
	size   int64
	sha256 string
	// open returns a reader of the whole artifact. The reader it returned
	// before must no longer be in use.
	open    func() (io.Reader, error)
	cleanup func()
}

// prepareArtifact hashes r, spooling it to a temporary file unless it can be
// read again.
func prepareArtifact(ctx context.Context, r io.Reader) (*artifactSource, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		if start, err := rs.Seek(0, io.SeekCurrent); err == nil { // pipes cannot seek: spool them
			return seekableSource(ctx, rs, start)
		}
	}
	return spooledSource(ctx, r)
}

func seekableSource(ctx context.Context, rs io.ReadSeeker, start int64) (*artifactSource, error) {
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, rs})
	if err != nil {
		return nil, fmt.Errorf("reading the artifact: %w", err)
	}
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewinding the artifact: %w", err)
	}
	src := &artifactSource{size: n, sha256: hex.EncodeToString(h.Sum(nil)), cleanup: func() {}}
	if ra, ok := rs.(io.ReaderAt); ok {
		// Each attempt gets its own reader: no shared position.
		src.open = func() (io.Reader, error) { return io.NewSectionReader(ra, start, n), nil }
	} else {
		src.open = func() (io.Reader, error) {
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return nil, fmt.Errorf("rewinding the artifact: %w", err)
			}
			return io.LimitReader(rs, n), nil
		}
	}
	return src, nil
}

func spooledSource(ctx context.Context, r io.Reader) (_ *artifactSource, err error) {
	f, err := os.CreateTemp("", "workerclient-artifact-*")
	if err != nil {
		return nil, fmt.Errorf("spooling the artifact: %w", err)
	}
	cleanup := func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err != nil {
		return nil, fmt.Errorf("spooling the artifact: %w", err)
	}
	return &artifactSource{
		size:    n,
		sha256:  hex.EncodeToString(h.Sum(nil)),
		open:    func() (io.Reader, error) { return io.NewSectionReader(f, 0, n), nil },
		cleanup: cleanup,
	}, nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// guardedBody is one request's body. detach cuts it off from its source, so
// that a transport still reading it after Do returned (which RoundTrip
// allows) cannot read what the next attempt reads.
type guardedBody struct {
	mu       sync.Mutex
	r        io.Reader
	detached bool
}

var errBodyDetached = errors.New("workerclient: upload body reused after its request ended")

func (g *guardedBody) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.detached {
		return 0, errBodyDetached
	}
	return g.r.Read(p)
}

func (g *guardedBody) detach() {
	g.mu.Lock()
	g.detached = true
	g.mu.Unlock()
}

// uploadSession is an open session and when it expires, by the local clock.
type uploadSession struct {
	*apiclient.UploadSession
	expiresAt time.Time
	foreign   bool // the URL is not the gateway's
}

// errSessionExpired: the session expired before the upload was committed;
// the upload starts over with a new one.
type errSessionExpired struct{ err error }

func (e *errSessionExpired) Error() string { return "upload session expired: " + e.err.Error() }
func (e *errSessionExpired) Unwrap() error { return e.err }

func (r *runner) uploadArtifact(ctx context.Context, ls *lease, name, contentType string, body io.Reader) (*apiclient.File, error) {
	wrap := func(err error) error { return fmt.Errorf("workerclient: artifact %q: %w", name, err) }
	if n := utf8.RuneCountInString(name); n < 1 || n > maxArtifactName {
		return nil, wrap(fmt.Errorf("a name has 1..%d characters, not %d", maxArtifactName, n))
	}
	if contentType == "" {
		contentType = defaultContentType
	}
	if n := utf8.RuneCountInString(contentType); n > maxArtifactContentType {
		return nil, wrap(fmt.Errorf("a content type has at most %d characters, not %d", maxArtifactContentType, n))
	}
	if body == nil {
		return nil, wrap(errors.New("no content"))
	}
	// The upload stops when the lease does (lost, cancelled, out of time)
	// as well as with ctx.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ls.ctx, func() { cancel(context.Cause(ls.ctx)) })
	defer stop()

	src, err := prepareArtifact(ctx, body)
	if err != nil {
		return nil, wrap(err)
	}
	defer src.cleanup()
	req := apiclient.OpenUploadRequest{Name: name, ContentType: &contentType, SizeBytes: src.size, Sha256: src.sha256}

	for restarts := 0; ; restarts++ {
		file, err := r.uploadOnce(ctx, ls, req, src)
		var expired *errSessionExpired
		switch {
		case err == nil:
			ls.log.Info("artifact uploaded", "name", name, "file_id", file.Id, "size_bytes", file.SizeBytes)
			return file, nil
		case ctx.Err() != nil, !errors.As(err, &expired):
			return nil, wrap(err)
		case restarts >= maxUploadRestarts:
			return nil, wrap(fmt.Errorf("gave up after %d sessions: %w", restarts+1, err))
		}
		ls.log.Warn("artifact upload session expired; starting over with a new one", "name", name, "error", err)
	}
}

// uploadOnce opens a session, uploads and commits. An *errSessionExpired
// means start over.
func (r *runner) uploadOnce(ctx context.Context, ls *lease, req apiclient.OpenUploadRequest, src *artifactSource) (*apiclient.File, error) {
	s, err := r.openUpload(ctx, ls, req)
	if err != nil {
		return nil, err
	}
	if err := r.putUpload(ctx, ls, s, src); err != nil {
		return nil, err
	}
	return r.commitUpload(ctx, ls, s)
}

// uploadStep runs one step of an upload (op), retrying what can be retried.
// call returns nil when the step is done; handled, when set, picks the
// errors the caller deals with itself (returned at once, never retried).
func (r *runner) uploadStep(ctx context.Context, ls *lease, op string, call func(context.Context) error, handled func(error) bool) error {
	policy := callRetry.withLog(func(err error, delay time.Duration) {
		ls.log.Warn("artifact upload step failed; retrying", "step", op, "error", err, "retry_in", delay.String())
	})
	err := retry(ctx, policy, func(ctx context.Context) error {
		if r.isLost(ls) {
			return &permanentError{fmt.Errorf("%s: %w", op, ErrLeaseLost)}
		}
		err := call(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		var apiErr *APIError
		isAPI := errors.As(err, &apiErr)
		switch {
		case isRevoked(err):
			r.revoked(err)
			return &permanentError{fmt.Errorf("%w: %w", ErrLeaseLost, err)}
		case isAPI && apiErr.Code == problem.LeaseLost:
			ls.log.Warn("the gateway refused an artifact upload: lease lost", "step", op)
			r.markLost(ls)
			return &permanentError{fmt.Errorf("%w: %w", ErrLeaseLost, err)}
		case handled != nil && handled(err),
			isAPI && apiErr.Code == problem.ArtifactsDisabled: // 503, but no retry will help
			return &permanentError{err}
		}
		return err
	})
	if isInterrupted(err) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return err
}

func (r *runner) openUpload(ctx context.Context, ls *lease, req apiclient.OpenUploadRequest) (*uploadSession, error) {
	var s *uploadSession
	err := r.uploadStep(ctx, ls, "open upload", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		sent := time.Now()
		resp, err := r.w.client.OpenArtifactUploadWithResponse(ctx, ls.id, &apiclient.OpenArtifactUploadParams{LeaseToken: ls.token}, req)
		if err != nil {
			return fmt.Errorf("open upload: %w", err)
		}
		r.applyLeaseHeaders(ls, resp.HTTPResponse.Header, sent)
		if err := checkResponse("open upload", resp.HTTPResponse, resp.Body); err != nil {
			return err
		}
		if resp.JSON201 == nil {
			return fmt.Errorf("open upload: unexpected answer %s", resp.Status())
		}
		s, err = r.session(resp.JSON201, sent)
		return err
	}, nil)
	return s, err
}

// session checks an upload session and says where its URL points.
func (r *runner) session(us *apiclient.UploadSession, sent time.Time) (*uploadSession, error) {
	if us.Method != apiclient.PUT {
		return nil, &permanentError{fmt.Errorf("open upload: the session asks for method %q; only PUT is supported", us.Method)}
	}
	u, err := url.Parse(us.Url)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, &permanentError{errors.New("open upload: the session's URL is not an http(s) URL")}
	}
	return &uploadSession{
		UploadSession: us,
		expiresAt:     sent.Add(seconds(us.ExpiresInSeconds)),
		foreign:       !sameOrigin(u, r.w.gatewayURL),
	}, nil
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		switch strings.ToLower(u.Scheme) {
		case "https":
			return "443"
		case "http":
			return "80"
		}
		return ""
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func (r *runner) putUpload(ctx context.Context, ls *lease, s *uploadSession, src *artifactSource) error {
	// expired reports whether a refusal means the session is over.
	expired := func(err error) bool {
		var apiErr *APIError
		if !errors.As(err, &apiErr) {
			return false
		}
		return apiErr.Code == problem.UploadExpired ||
			s.foreign && apiErr.Status == http.StatusForbidden && !time.Now().Before(s.expiresAt)
	}
	err := r.uploadStep(ctx, ls, "upload", func(ctx context.Context) error {
		if !time.Now().Before(s.expiresAt) {
			return &errSessionExpired{err: errors.New("it ran out before the upload went through")}
		}
		err := r.putOnce(ctx, ls, s, src)
		var apiErr *APIError
		if errors.As(err, &apiErr) && !s.foreign && apiErr.Code == problem.UploadState {
			// The session no longer takes an upload: an earlier attempt
			// whose answer was lost stored it. The commit verifies it.
			ls.log.Info("the upload was already stored; committing it", "upload_id", s.UploadId)
			return nil
		}
		return err
	}, func(err error) bool {
		var se *errSessionExpired
		return errors.As(err, &se) || expired(err)
	})
	var se *errSessionExpired
	if err != nil && !errors.As(err, &se) && expired(err) {
		return &errSessionExpired{err: err}
	}
	return err
}

// putOnce sends the artifact's bytes once, with exactly the session's
// headers: through the worker's mTLS client to the gateway itself, through a
// client without the worker's certificate anywhere else.
func (r *runner) putOnce(ctx context.Context, ls *lease, s *uploadSession, src *artifactSource) error {
	// The PUT may take as long as the session lasts.
	ctx, cancel := context.WithDeadline(ctx, s.expiresAt.Add(callTimeout))
	defer cancel()
	var body io.Reader = http.NoBody
	var guard *guardedBody
	if src.size > 0 {
		rd, err := src.open()
		if err != nil {
			return &permanentError{err}
		}
		guard = &guardedBody{r: rd}
		body = guard
		defer guard.detach()
	}
	req, err := http.NewRequestWithContext(ctx, string(s.Method), s.Url, body)
	if err != nil {
		return &permanentError{fmt.Errorf("upload: %w", err)}
	}
	req.ContentLength = src.size
	for k, v := range s.Headers {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length":
			if v != strconv.FormatInt(src.size, 10) {
				return &permanentError{fmt.Errorf("upload: the session's Content-Length %q is not the artifact's size %d", v, src.size)}
			}
		case "Host":
			req.Host = v
		default:
			req.Header.Set(k, v)
		}
	}
	client := r.w.uploadHTTP
	if s.foreign {
		client = r.w.foreignHTTP
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxUploadAnswerBytes))
	if err != nil && resp.StatusCode/100 != 2 {
		return fmt.Errorf("upload: reading the answer: %w", err)
	}
	if !s.foreign {
		r.applyLeaseHeaders(ls, resp.Header, sent)
		return checkResponse("upload", resp, raw)
	}
	return checkForeignResponse(resp, raw)
}

var (
	s3CodePattern    = regexp.MustCompile(`<Code>([^<]{1,100})</Code>`)
	s3MessagePattern = regexp.MustCompile(`<Message>([^<]{1,1000})</Message>`)
)

// checkForeignResponse is checkResponse for an object store's answer, whose
// errors are XML (S3) rather than problems.
func checkForeignResponse(resp *http.Response, body []byte) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &APIError{Op: "upload to object storage", Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	if m := s3CodePattern.FindSubmatch(body); m != nil {
		e.Code = string(m[1])
	}
	if m := s3MessagePattern.FindSubmatch(body); m != nil {
		e.Detail = string(m[1])
	}
	if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), resp.Header.Get("Date")); ok {
		e.RetryAfter = d
	}
	return e
}

func (r *runner) commitUpload(ctx context.Context, ls *lease, s *uploadSession) (*apiclient.File, error) {
	var file *apiclient.File
	err := r.uploadStep(ctx, ls, "commit upload", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		sent := time.Now()
		resp, err := r.w.client.CommitArtifactUploadWithResponse(ctx, s.UploadId)
		if err != nil {
			return fmt.Errorf("commit upload: %w", err)
		}
		r.applyLeaseHeaders(ls, resp.HTTPResponse.Header, sent)
		if err := checkResponse("commit upload", resp.HTTPResponse, resp.Body); err != nil {
			return err
		}
		if resp.JSON200 == nil {
			return fmt.Errorf("commit upload: unexpected answer %s", resp.Status())
		}
		file = resp.JSON200
		return nil
	}, nil)
	var apiErr *APIError
	if errors.As(err, &apiErr) && (apiErr.Code == problem.UploadExpired || apiErr.Code == problem.UploadMissing) {
		// The session ended without the object (or before the commit): a
		// new session uploads it again.
		return nil, &errSessionExpired{err: err}
	}
	return file, err
}
