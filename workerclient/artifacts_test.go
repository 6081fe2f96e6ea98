package workerclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// fakeArtifacts serves the artifact routes on a fakeGateway: sessions, the
// gateway's own PUT /v1/uploads/{id} (fs storage) and commits, with the
// gateway's answers. Artifacts named "s3-…" get a session whose URL is
// foreignURL instead, as a presigned S3 PUT would be; foreignPut serves it.
type fakeArtifacts struct {
	g          *fakeGateway
	gatewayURL string
	foreignURL string
	ttl        float64 // expires_in_seconds of a session

	mu          sync.Mutex
	uploads     map[uuid.UUID]*fakeUpload
	opens       []apiclient.OpenUploadRequest
	puts        []putRecord
	commits     int
	expireOnPut int    // the next n uploads find their session expired
	onPut       func() // runs while an upload is being received
	foreignFail []int  // statuses the foreign store answers first
	files       map[uuid.UUID]*apiclient.File
}

type fakeUpload struct {
	id     uuid.UUID
	req    apiclient.OpenUploadRequest
	status string // prepared, uploaded, committed, expired
	file   *apiclient.File
}

// putRecord is an upload as received.
type putRecord struct {
	upload        uuid.UUID
	foreign       bool
	header        http.Header
	contentLength int64
	received      int64
	sum           string
	peerCerts     int
}

func newFakeArtifacts(g *fakeGateway) *fakeArtifacts {
	f := &fakeArtifacts{g: g, gatewayURL: "https://gateway.test", ttl: 900,
		uploads: map[uuid.UUID]*fakeUpload{}, files: map[uuid.UUID]*apiclient.File{}}
	g.mux.HandleFunc("POST /v1/attempts/{id}/artifacts", f.handleOpen)
	g.mux.HandleFunc("PUT /v1/uploads/{id}", f.handlePut)
	g.mux.HandleFunc("POST /v1/uploads/{id}/commit", f.handleCommit)
	return f
}

func (f *fakeArtifacts) handleOpen(w http.ResponseWriter, r *http.Request) {
	id := uuid.MustParse(r.PathValue("id"))
	var req apiclient.OpenUploadRequest
	f.g.decode(r, &req)
	f.g.mu.Lock()
	st := f.g.status(id, r.Header.Get("Lease-Token"))
	f.g.mu.Unlock()
	if st.State == "lost" {
		writeProblem(w, http.StatusConflict, "lease-lost")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens = append(f.opens, req)
	u := &fakeUpload{id: uuid.New(), req: req, status: "prepared"}
	f.uploads[u.id] = u
	session := apiclient.UploadSession{UploadId: u.id, Method: apiclient.PUT, ExpiresInSeconds: f.ttl,
		ExpiresAt: time.Now().Add(time.Duration(f.ttl) * time.Second), Headers: map[string]string{"Content-Type": *req.ContentType}}
	if strings.HasPrefix(req.Name, "s3-") {
		sum, _ := hex.DecodeString(req.Sha256)
		session.Url = f.foreignURL + "/bucket/artifacts/" + u.id.String() + "?X-Amz-Signature=feed"
		session.Headers["x-amz-checksum-sha256"] = base64.StdEncoding.EncodeToString(sum)
	} else {
		session.Url = f.gatewayURL + "/v1/uploads/" + u.id.String()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(session)
}

// receive checks an upload against its session and takes it.
func (f *fakeArtifacts) receive(r *http.Request, foreign bool) (status int, code string) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return http.StatusNotFound, "not-found"
	}
	rec := putRecord{upload: id, foreign: foreign, header: r.Header.Clone(), contentLength: r.ContentLength}
	if r.TLS != nil {
		rec.peerCerts = len(r.TLS.PeerCertificates)
	}
	f.mu.Lock()
	u := f.uploads[id]
	if u != nil && u.status == "prepared" && f.expireOnPut > 0 {
		f.expireOnPut--
		u.status = "expired"
	}
	onPut := f.onPut
	f.mu.Unlock()
	if onPut != nil {
		onPut()
	}
	h := sha256.New()
	rec.received, _ = io.Copy(h, r.Body)
	rec.sum = hex.EncodeToString(h.Sum(nil))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts = append(f.puts, rec)
	switch {
	case u == nil:
		return http.StatusNotFound, "not-found"
	case u.status == "expired":
		return http.StatusConflict, "upload-expired"
	case u.status != "prepared" && !foreign:
		return http.StatusConflict, "upload-state"
	case rec.contentLength != u.req.SizeBytes || rec.received != u.req.SizeBytes || rec.sum != u.req.Sha256:
		return http.StatusBadRequest, "upload-mismatch"
	}
	u.status = "uploaded"
	return 0, ""
}

func (f *fakeArtifacts) handlePut(w http.ResponseWriter, r *http.Request) {
	if status, code := f.receive(r, false); status != 0 {
		writeProblem(w, status, code)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// foreignPut is the object store's side of a presigned PUT.
func (f *fakeArtifacts) foreignPut(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	var fail int
	if len(f.foreignFail) > 0 {
		fail, f.foreignFail = f.foreignFail[0], f.foreignFail[1:]
	}
	f.mu.Unlock()
	if fail != 0 {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(fail)
		fmt.Fprint(w, `<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		return
	}
	if status, _ := f.receive(r, true); status != 0 {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>`)
		return
	}
	f.mu.Lock()
	rec := f.puts[len(f.puts)-1]
	u := f.uploads[rec.upload]
	f.mu.Unlock()
	sum, _ := hex.DecodeString(u.req.Sha256)
	if r.Header.Get("X-Amz-Checksum-Sha256") != base64.StdEncoding.EncodeToString(sum) {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeArtifacts) handleCommit(w http.ResponseWriter, r *http.Request) {
	id := uuid.MustParse(r.PathValue("id"))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits++
	u := f.uploads[id]
	switch {
	case u == nil:
		writeProblem(w, http.StatusNotFound, "not-found")
		return
	case u.status == "expired":
		writeProblem(w, http.StatusConflict, "upload-expired")
		return
	case u.status == "prepared":
		writeProblem(w, http.StatusConflict, "upload-missing")
		return
	case u.status == "uploaded":
		u.status = "committed"
		u.file = &apiclient.File{Id: uuid.New(), OrganizationId: uuid.New(), Name: u.req.Name, ContentType: *u.req.ContentType,
			SizeBytes: u.req.SizeBytes, Sha256: u.req.Sha256, CreatedAt: time.Now()}
		f.files[u.file.Id] = u.file
	}
	writeJSON(w, u.file)
}

func (f *fakeArtifacts) state() (opens []apiclient.OpenUploadRequest, puts []putRecord, commits int, files int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apiclient.OpenUploadRequest(nil), f.opens...), append([]putRecord(nil), f.puts...), f.commits, len(f.files)
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// uploadResult is what a handler's UploadArtifact returned.
type uploadResult struct {
	file  *apiclient.File
	err   error
	cause error
}

// runUpload runs one task whose handler calls upload and returns what it
// returned, after the attempt ended.
func runUpload(t *testing.T, g *fakeGateway, upload func(ctx context.Context, task *LeasedTask) (*apiclient.File, error)) (apiclient.Lease, uploadResult) {
	t.Helper()
	got := make(chan uploadResult, 1)
	w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
		f, err := upload(ctx, task)
		got <- uploadResult{file: f, err: err, cause: context.Cause(ctx)}
		return err
	}})
	stop := runInBackground(t.Context(), w)
	l := g.enqueue(`{}`)
	res := <-got
	time.Sleep(time.Minute)
	require.NoError(t, stop())
	return l, res
}

func TestUploadArtifactThroughTheGateway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		fa := newFakeArtifacts(g)
		content := []byte(`skip{"report": "all good"}`)
		l, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			r := bytes.NewReader(content)
			_, _ = r.Seek(4, io.SeekStart) // read from where the reader stands
			return task.UploadArtifact(ctx, "report.json", "application/json", r)
		})
		require.NoError(t, res.err)
		want := content[4:]
		opens, puts, commits, files := fa.state()
		require.Len(t, opens, 1)
		assert.Equal(t, apiclient.OpenUploadRequest{Name: "report.json", ContentType: new("application/json"),
			SizeBytes: int64(len(want)), Sha256: hexSum(want)}, opens[0])
		require.Len(t, puts, 1)
		put := puts[0]
		assert.Equal(t, int64(len(want)), put.contentLength)
		assert.Equal(t, hexSum(want), put.sum)
		assert.Equal(t, "application/json", put.header.Get("Content-Type"))
		assert.Empty(t, put.header.Get("Lease-Token"), "the session's headers only")
		assert.Equal(t, 1, commits)
		assert.Equal(t, 1, files)
		assert.Equal(t, "report.json", res.file.Name)
		assert.Equal(t, int64(len(want)), res.file.SizeBytes)
		assert.Equal(t, apiclient.AttemptOutcomeSucceeded, g.completionsOf(l.AttemptId)[0].req.Outcome)

		// An empty artifact is an empty PUT; no content type means
		// application/octet-stream.
		g2 := newFakeGateway(t)
		fa2 := newFakeArtifacts(g2)
		_, res = runUpload(t, g2, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			return task.UploadArtifact(ctx, "empty", "", strings.NewReader(""))
		})
		require.NoError(t, res.err)
		opens, puts, _, _ = fa2.state()
		assert.Equal(t, "application/octet-stream", *opens[0].ContentType)
		assert.Equal(t, hexSum(nil), opens[0].Sha256)
		assert.Zero(t, puts[0].contentLength)
	})
}

func TestUploadArtifactRetriesEachStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		fa := newFakeArtifacts(g)
		content := bytes.Repeat([]byte("artifact "), 10_000)
		g.inject("artifacts", fault{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: "1"})
		g.inject("upload",
			fault{transport: true},                    // never arrived
			fault{status: http.StatusTooManyRequests}, // refused for now
			fault{transport: true, afterServe: true},  // stored; the answer lost: the retry is told upload-state
		)
		g.inject("commit",
			fault{status: http.StatusBadGateway},
			fault{transport: true, afterServe: true}, // committed; the answer lost: the retry gets the same file
		)
		_, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			return task.UploadArtifact(ctx, "big.txt", "text/plain", bytes.NewReader(content))
		})
		require.NoError(t, res.err)
		opens, puts, commits, files := fa.state()
		assert.Len(t, opens, 1, "one session")
		require.Len(t, puts, 2, "the lost answer's upload and its retry reached the gateway")
		for _, p := range puts {
			assert.Equal(t, int64(len(content)), p.received, "every attempt sends the whole body")
			assert.Equal(t, hexSum(content), p.sum)
		}
		assert.Equal(t, 2, commits)
		assert.Equal(t, 1, files, "committed once")
		assert.Equal(t, hexSum(content), res.file.Sha256)
	})
}

func TestUploadArtifactStartsOverWhenItsSessionExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		fa := newFakeArtifacts(g)
		fa.expireOnPut = 1
		_, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			return task.UploadArtifact(ctx, "a.txt", "text/plain", strings.NewReader("a"))
		})
		require.NoError(t, res.err)
		opens, puts, _, files := fa.state()
		assert.Len(t, opens, 2, "a new session after upload-expired")
		assert.Len(t, puts, 2)
		assert.Equal(t, 1, files)
	})
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		fa := newFakeArtifacts(g)
		fa.ttl = 2
		// The retry would come after the session ran out: a new one instead.
		g.inject("upload", fault{status: http.StatusServiceUnavailable, retryAfter: "3"})
		_, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			return task.UploadArtifact(ctx, "a.txt", "text/plain", strings.NewReader("a"))
		})
		require.NoError(t, res.err)
		opens, puts, _, _ := fa.state()
		assert.Len(t, opens, 2)
		assert.Len(t, puts, 1, "nothing is sent to a session known to have expired")
	})
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		fa := newFakeArtifacts(g)
		fa.expireOnPut = 10
		l, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			return task.UploadArtifact(ctx, "a.txt", "text/plain", strings.NewReader("a"))
		})
		require.Error(t, res.err)
		assert.ErrorContains(t, res.err, "gave up after 3 sessions")
		var apiErr *APIError
		require.ErrorAs(t, res.err, &apiErr)
		assert.Equal(t, "upload-expired", apiErr.Code)
		opens, _, commits, _ := fa.state()
		assert.Len(t, opens, 1+maxUploadRestarts)
		assert.Zero(t, commits)
		assert.Equal(t, apiclient.AttemptOutcomeFailed, g.completionsOf(l.AttemptId)[0].req.Outcome)
	})
}

func TestUploadArtifactLeaseLostAndRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		fa := newFakeArtifacts(g)
		l, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			g.setState(task.AttemptID, "lost")
			return task.UploadArtifact(ctx, "a.txt", "text/plain", strings.NewReader("a"))
		})
		assert.ErrorIs(t, res.err, ErrLeaseLost)
		assert.ErrorIs(t, res.cause, ErrLeaseLost, "the handler's context is cancelled")
		assert.Empty(t, g.completionsOf(l.AttemptId))
		opens, _, _, _ := fa.state()
		assert.Empty(t, opens)
		assert.Equal(t, 1, g.callCount("artifacts"), "lease-lost is not retried")
	})
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		newFakeArtifacts(g)
		g.inject("artifacts", fault{status: http.StatusServiceUnavailable, code: "artifacts-disabled"})
		_, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			return task.UploadArtifact(ctx, "a.txt", "text/plain", strings.NewReader("a"))
		})
		var apiErr *APIError
		require.ErrorAs(t, res.err, &apiErr)
		assert.Equal(t, "artifacts-disabled", apiErr.Code)
		assert.Equal(t, 1, g.callCount("artifacts"), "no retry can enable artifacts")
	})
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		newFakeArtifacts(g)
		_, res := runUpload(t, g, func(ctx context.Context, task *LeasedTask) (*apiclient.File, error) {
			if _, err := task.UploadArtifact(ctx, "", "", strings.NewReader("a")); err == nil {
				return nil, errors.New("an empty name was accepted")
			}
			if _, err := task.UploadArtifact(ctx, strings.Repeat("n", 256), "", strings.NewReader("a")); err == nil {
				return nil, errors.New("a long name was accepted")
			}
			return nil, nil
		})
		require.NoError(t, res.err)
		assert.Zero(t, g.callCount("artifacts"), "refused before asking the gateway")
	})
	_, err := (&LeasedTask{}).UploadArtifact(t.Context(), "a", "", strings.NewReader("a"))
	assert.ErrorIs(t, err, errNotLeased)
}

// genReader yields n pseudo-random bytes, and is nothing but an io.Reader.
type genReader struct {
	n, pos int64
	block  []byte
}

func newGenReader(n int64) *genReader {
	block := make([]byte, 64<<10)
	for i := range block {
		block[i] = byte(i*7 + i/251)
	}
	return &genReader{n: n, block: block}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.pos >= g.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.n-g.pos)]
	for i := range p {
		p[i] = g.block[(g.pos+int64(i))%int64(len(g.block))] ^ byte((g.pos+int64(i))>>16)
	}
	g.pos += int64(len(p))
	return len(p), nil
}

func tempFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]int64{}
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		files[e.Name()] = info.Size()
	}
	return files
}

// TestUploadArtifactSpoolsAReaderThatCannotSeek uploads 32 MiB from a plain
// io.Reader: it goes through one temporary file, removed afterwards, and the
// heap stays far below the artifact's size. (Not parallel: it measures the
// process's heap, and sets TMPDIR.)
func TestUploadArtifactSpoolsAReaderThatCannotSeek(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const size = 32 << 20
	h := sha256.New()
	_, _ = io.Copy(h, newGenReader(size))
	want := hex.EncodeToString(h.Sum(nil))

	g := newFakeGateway(t)
	fa := newFakeArtifacts(g)
	var spooled map[string]int64
	fa.onPut = func() { spooled = tempFiles(t, tmp) }

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		var m runtime.MemStats
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	})
	got := make(chan uploadResult, 1)
	w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
		f, err := task.UploadArtifact(ctx, "big.bin", "", newGenReader(size))
		got <- uploadResult{file: f, err: err}
		return err
	}})
	stop := runInBackground(t.Context(), w)
	g.enqueue(`{}`)
	res := <-got
	close(stopSampling)
	sampler.Wait()
	require.NoError(t, stop())

	require.NoError(t, res.err)
	assert.Equal(t, want, res.file.Sha256)
	_, puts, _, _ := fa.state()
	require.Len(t, puts, 1)
	assert.Equal(t, int64(size), puts[0].received)
	assert.Equal(t, want, puts[0].sum)
	assert.Len(t, spooled, 1, "one temporary file while uploading")
	for name, n := range spooled {
		assert.True(t, strings.HasPrefix(name, "workerclient-artifact-"), name)
		assert.Equal(t, int64(size), n)
	}
	assert.Empty(t, tempFiles(t, tmp), "the temporary file is removed")
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("32 MiB upload: peak heap growth %.1f MiB", float64(growth)/(1<<20))
	assert.Less(t, growth, int64(8<<20), "the artifact is streamed, never held in memory")

	// A file is read where it is; a pipe (an *os.File that cannot seek)
	// is spooled.
	spooled = nil
	path := filepath.Join(t.TempDir(), "report.txt")
	require.NoError(t, os.WriteFile(path, []byte("from a file\n"), 0o600))
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		_, _ = pw.WriteString("from a pipe\n")
		_ = pw.Close()
	}()
	defer pr.Close()
	var pipeSpooled map[string]int64
	w = g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := task.UploadArtifact(ctx, "file.txt", "text/plain", f); err != nil {
			return err
		}
		fileSpooled := spooled
		fa.mu.Lock()
		fa.onPut = func() { pipeSpooled = tempFiles(t, tmp) }
		fa.mu.Unlock()
		if _, err := task.UploadArtifact(ctx, "pipe.txt", "text/plain", pr); err != nil {
			return err
		}
		if len(fileSpooled) != 0 {
			return fmt.Errorf("a file was spooled: %v", fileSpooled)
		}
		return nil
	}})
	stop = runInBackground(t.Context(), w)
	l := g.enqueue(`{}`)
	waitFor(t, 10*time.Second, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
	require.NoError(t, stop())
	req := g.completionsOf(l.AttemptId)[0].req
	require.Equal(t, apiclient.AttemptOutcomeSucceeded, req.Outcome, "%+v", req.Error)
	assert.Len(t, pipeSpooled, 1, "the pipe went through a temporary file")
	_, puts, _, _ = fa.state()
	assert.Equal(t, hexSum([]byte("from a file\n")), puts[1].sum)
	assert.Equal(t, hexSum([]byte("from a pipe\n")), puts[2].sum)
	assert.Empty(t, tempFiles(t, tmp))
}

// tlsServer starts an HTTPS server for 127.0.0.1 with a certificate of ca;
// clientAuth says what it asks of clients.
func tlsServer(t *testing.T, ca *pki.CA, clientAuth tls.ClientAuthType, h http.Handler) *httptest.Server {
	t.Helper()
	srvCert, err := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(srvCert.CertPEM, srvCert.KeyPEM)
	require.NoError(t, err)
	clients := x509.NewCertPool()
	clients.AddCert(ca.Cert)
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: clientAuth, ClientCAs: clients}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestUploadArtifactToAForeignURLSendsNoCertificate runs a worker with its
// real mTLS client against a gateway that requires it, and uploads one
// artifact through the gateway and one to a presigned URL of another server
// that asks for client certificates: the first carries the worker's
// certificate, the second neither it nor any header the session did not
// list.
func TestUploadArtifactToAForeignURLSendsNoCertificate(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA")
	require.NoError(t, err)
	g := newFakeGateway(t)
	fa := newFakeArtifacts(g)
	fa.foreignFail = []int{http.StatusServiceUnavailable} // retried
	gateway := tlsServer(t, ca, tls.RequireAndVerifyClientCert, g.mux)
	store := tlsServer(t, ca, tls.RequestClientCert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.SetPathValue("id", r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
		fa.foreignPut(w, r)
	}))
	fa.gatewayURL, fa.foreignURL = gateway.URL, store.URL

	dir := t.TempDir()
	cfg := Config{
		GatewayURL: gateway.URL, WaitSeconds: 1, Logger: slog.New(slog.DiscardHandler),
		CertFile: filepath.Join(dir, "w.crt"), KeyFile: filepath.Join(dir, "w.key"), CAFile: filepath.Join(dir, "ca.crt"),
	}
	issued, err := ca.IssueClient("worker-1", time.Hour)
	require.NoError(t, err)
	writeFile(t, cfg.CertFile, issued.CertPEM)
	writeFile(t, cfg.KeyFile, issued.KeyPEM)
	writeFile(t, cfg.CAFile, ca.CertPEM)
	content := []byte(`{"findings": 3}`)
	files := make(chan []*apiclient.File, 1)
	cfg.Handler = func(ctx context.Context, task *LeasedTask) error {
		own, err := task.UploadArtifact(ctx, "report.json", "application/json", bytes.NewReader(content))
		if err != nil {
			return err
		}
		foreign, err := task.UploadArtifact(ctx, "s3-report.json", "application/json", bytes.NewReader(content))
		if err != nil {
			return err
		}
		files <- []*apiclient.File{own, foreign}
		return nil
	}
	w, err := NewWorker(cfg)
	require.NoError(t, err)
	stop := runInBackground(t.Context(), w)
	l := g.enqueue(`{}`)
	var got []*apiclient.File
	select {
	case got = <-files:
	case <-time.After(20 * time.Second):
		t.Fatal("no upload")
	}
	waitFor(t, 10*time.Second, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
	require.NoError(t, stop())

	assert.Equal(t, "report.json", got[0].Name)
	assert.Equal(t, "s3-report.json", got[1].Name)
	_, puts, _, _ := fa.state()
	require.Len(t, puts, 2)
	own, foreign := puts[0], puts[1]
	assert.False(t, own.foreign)
	assert.Equal(t, 1, own.peerCerts, "the gateway gets the worker's certificate")
	assert.True(t, foreign.foreign)
	assert.Zero(t, foreign.peerCerts, "a third party never gets the worker's certificate")
	assert.Equal(t, hexSum(content), foreign.sum)
	assert.Equal(t, int64(len(content)), foreign.contentLength)
	sum := sha256.Sum256(content)
	assert.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), foreign.header.Get("X-Amz-Checksum-Sha256"))
	var names []string
	for k := range foreign.header {
		names = append(names, k)
	}
	assert.ElementsMatch(t, []string{"Content-Type", "Content-Length", "X-Amz-Checksum-Sha256", "User-Agent", "Accept-Encoding"}, names,
		"only the session's headers (and the transport's own)")
}

func TestForeignUploadClientHasNoClientCertificate(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA")
	require.NoError(t, err)
	issued, err := ca.IssueClient("worker", time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(t, err)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	writeFile(t, caFile, ca.CertPEM)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	var sawCerts atomic.Int32
	srv := tlsServer(t, ca, tls.RequestClientCert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawCerts.Add(int32(len(r.TLS.PeerCertificates)))
		fmt.Fprint(w, "ok")
	}))
	for name, cfg := range map[string]Config{
		"CAFile":    {CAFile: caFile},
		"TLSConfig": {TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}},
	} {
		hc, err := newForeignHTTPClient(cfg)
		require.NoError(t, err, name)
		tlsCfg := hc.Transport.(*http.Transport).TLSClientConfig
		assert.Empty(t, tlsCfg.Certificates, name)
		assert.Nil(t, tlsCfg.GetClientCertificate, name)
		assert.Zero(t, hc.Timeout, "%s: an upload's deadline is its session's", name)
		assert.Equal(t, "ok", get(t, hc, srv.URL), "%s: the configured CA is trusted", name)
		hc.CloseIdleConnections()
	}
	assert.Zero(t, sawCerts.Load(), "no client certificate was ever presented")

	// Without a configured CA only the system roots are trusted.
	hc, err := newForeignHTTPClient(Config{})
	require.NoError(t, err)
	_, err = hc.Get(srv.URL)
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown)
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	gw := mustURL(t, "https://Gateway.example:443")
	for u, same := range map[string]bool{
		"https://gateway.example/v1/uploads/x":     true,
		"https://gateway.example:443/v1/uploads/x": true,
		"https://gateway.example:8443/x":           false,
		"http://gateway.example/x":                 false,
		"https://bucket.s3.amazonaws.com/k?sig=1":  false,
		"https://gateway.example.evil.test/x":      false,
	} {
		assert.Equal(t, same, sameOrigin(mustURL(t, u), gw), u)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}
