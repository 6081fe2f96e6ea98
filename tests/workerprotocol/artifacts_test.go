package workerprotocol

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/services/sweeper"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
)

func TestArtifactUploadCommitAndDownload(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]

	content := []byte(`{"report": "all good"}`)
	opened := openUpload(t, w, l, "report.json", int64(len(content)), sha256Hex(content))
	require.Equal(t, http.StatusCreated, opened.StatusCode(), string(opened.Body))
	session := opened.JSON201
	require.Equal(t, g.URL+"/v1/uploads/"+session.UploadId.String(), session.Url, "fs uploads go to the gateway itself")
	require.Positive(t, session.ExpiresInSeconds)

	status, body := put(t, w.HTTP, session, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusNoContent, status, string(body))
	status, body = put(t, w.HTTP, session, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusConflict, status, "one upload per session: %s", body)

	first := commit(t, w, session)
	require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
	second := commit(t, w, session)
	require.Equal(t, http.StatusOK, second.StatusCode())
	require.Equal(t, first.JSON200.Id, second.JSON200.Id, "a second commit returns the same file")
	require.Equal(t, 1, countRows(t, g, "files"))

	list, err := g.Control.ListTaskArtifactsWithResponse(context.Background(), l.Task.Id)
	require.NoError(t, err)
	require.Len(t, list.JSON200.Items, 1)
	require.Equal(t, "report.json", list.JSON200.Items[0].Name)

	res, err := g.Control.GetFileContent(context.Background(), first.JSON200.Id)
	require.NoError(t, err)
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, content, got)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
	require.Equal(t, int64(len(content)), res.ContentLength)
	sum := sha256.Sum256(content)
	require.Equal(t, "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":", res.Header.Get("Repr-Digest"))
}

func TestTamperedExpiredStaleAndForeignUploadsAreRefused(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]
	content := []byte("the real bytes")

	// Wrong bytes of the right length, and the wrong length: refused while
	// streaming; the commit then finds nothing and the session fails.
	s1 := openUpload(t, w, l, "a.txt", int64(len(content)), sha256Hex(content)).JSON201
	status, body := put(t, w.HTTP, s1, bytes.NewReader([]byte("the fake bytes")), int64(len(content)))
	require.Equal(t, http.StatusBadRequest, status, string(body))
	require.Equal(t, "upload-mismatch", problemCode(t, body))
	status, _ = put(t, w.HTTP, s1, bytes.NewReader([]byte("short")), 5)
	require.Equal(t, http.StatusBadRequest, status)
	c := commit(t, w, s1)
	require.Equal(t, http.StatusConflict, c.StatusCode())
	require.Equal(t, "upload-missing", problemCode(t, c.Body))
	require.Zero(t, countRows(t, g, "files"))

	// Another worker of the same organization: not found.
	other := g.NewWorker(t, "w2", 1, org)
	s2 := openUpload(t, w, l, "b.txt", int64(len(content)), sha256Hex(content)).JSON201
	status, _ = put(t, other.HTTP, s2, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, http.StatusNotFound, commit(t, other, s2).StatusCode())

	// An expired session can be neither uploaded to nor committed.
	_, err := g.Pool.Exec(context.Background(), `UPDATE worker_artifact_uploads SET expires_at = now() - interval '1 second' WHERE id = $1`, s2.UploadId)
	require.NoError(t, err)
	status, body = put(t, w.HTTP, s2, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "upload-expired", problemCode(t, body))
	require.Equal(t, "upload-expired", problemCode(t, commit(t, w, s2).Body))

	// A stale attempt cannot open, upload or commit.
	s3 := openUpload(t, w, l, "c.txt", int64(len(content)), sha256Hex(content)).JSON201
	status, _ = put(t, w.HTTP, s3, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusNoContent, status)
	s4 := openUpload(t, w, l, "d.txt", int64(len(content)), sha256Hex(content)).JSON201
	g.ExpireLeases(t, task)
	g.WaitTaskState(t, task, "retry_wait")
	require.Equal(t, http.StatusConflict, openUpload(t, w, l, "e.txt", 1, sha256Hex([]byte("x"))).StatusCode())
	status, body = put(t, w.HTTP, s4, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "lease-lost", problemCode(t, body))
	require.Equal(t, "lease-lost", problemCode(t, commit(t, w, s3).Body))
	require.Zero(t, countRows(t, g, "files"))

	// The sweeper expires open sessions and deletes their objects.
	require.True(t, g.Server.Kick(sweeper.Name))
	harness.WaitFor(t, 10*time.Second, "sessions expired", func() bool {
		var open int
		require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_artifact_uploads
			WHERE status IN ('prepared', 'uploaded') AND expires_at <= now()`).Scan(&open))
		return open == 0
	})
}

func TestFilesAreOrganizationScoped(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	workerB := g.NewWorker(t, "wb", 1, orgB)
	g.CreateTask(t, orgB, harness.TaskSpec{})
	l := lease(t, workerB, 1, 5)[0]
	content := []byte("secret-b contents")
	opened := openUpload(t, workerB, l, "secret-b.txt", int64(len(content)), sha256Hex(content))
	require.Equal(t, http.StatusCreated, opened.StatusCode(), string(opened.Body))
	s := opened.JSON201
	status, _ := put(t, workerB.HTTP, s, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusNoContent, status)
	file := commit(t, workerB, s).JSON200

	workerA := g.NewWorker(t, "wa", 1, orgA)
	require.Equal(t, http.StatusNotFound, commit(t, workerA, s).StatusCode())
	tokenA, _, err := g.Store.CreateAPIToken(context.Background(), store.EveryOrganization(), storeTokenParams(orgA))
	require.NoError(t, err)
	scoped := g.ControlClient(t, tokenA)
	meta, err := scoped.GetFileWithResponse(context.Background(), file.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, meta.StatusCode())
	res, err := scoped.GetFileContent(context.Background(), file.Id)
	require.NoError(t, err)
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.NotContains(t, string(raw), "secret-b")
	list, err := scoped.ListTaskArtifactsWithResponse(context.Background(), l.Task.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, list.StatusCode())
}

// TestLargeUploadStreamsWithBoundedHeap uploads 128 MiB through the fs
// backend and samples the gateway's heap meanwhile (the gateway runs in this
// process): it must stay far below the artifact's size.
func TestLargeUploadStreamsWithBoundedHeap(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 600})
	l := lease(t, w, 1, 5)[0]

	const size = 128 << 20
	seed := make([]byte, 1<<20)
	_, _ = rand.Read(seed)
	h := sha256.New()
	for range size / len(seed) {
		h.Write(seed)
	}
	s := openUpload(t, w, l, "big.bin", size, hex.EncodeToString(h.Sum(nil))).JSON201

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	})
	status, body := put(t, w.HTTP, s, &repeatReader{chunk: seed, left: size}, size)
	close(stop)
	wg.Wait()
	require.Equal(t, http.StatusNoContent, status, string(body))
	require.Equal(t, http.StatusOK, commit(t, w, s).StatusCode())
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("128 MiB upload: peak heap growth %.1f MiB (gateway and test client in one process)", float64(growth)/(1<<20))
	require.Less(t, growth, int64(64<<20), "the upload is streamed, not buffered")
}

// repeatReader yields chunk over and over, left bytes in all.
type repeatReader struct {
	chunk []byte
	left  int
	pos   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.left)], r.chunk[r.pos:])
	r.pos = (r.pos + n) % len(r.chunk)
	r.left -= n
	return n, nil
}

// trickle yields chunk, n times, each after a tick of the given period: an
// upload that arrives slowly but steadily.
type trickle struct {
	chunk  []byte
	left   int
	period time.Duration
}

func (r *trickle) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	<-time.After(r.period) // the slowness is what is tested
	r.left--
	return copy(p, r.chunk), nil
}

// stalled yields its bytes, then nothing until closed (as a pipe whose
// writer hung would: the HTTP client closes it when the answer comes).
type stalled struct {
	data    []byte
	release chan struct{}
	once    sync.Once
}

func (r *stalled) Close() error {
	r.once.Do(func() { close(r.release) })
	return nil
}

func (r *stalled) Read(p []byte) (int, error) {
	if len(r.data) > 0 {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	<-r.release
	return 0, io.ErrUnexpectedEOF
}

// TestUploadBoundByProgressNotByTime: an upload's body is bound by its
// progress, not by the server's whole-request read timeout: one that keeps
// arriving for longer than that timeout is stored; one that stops is
// refused with 408 request-timeout (not a 503 that blames the database),
// and the session takes the same bytes again.
func TestUploadBoundByProgressNotByTime(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.RequestReadTimeout = time.Second
		c.Artifacts.UploadIdleTimeout = 3 * time.Second
	}})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 600})
	l := lease(t, w, 1, 5)[0]

	// Steady: 20 chunks, 150 ms apart — three times the read timeout.
	chunk := bytes.Repeat([]byte("artifact "), 1000)
	whole := bytes.Repeat(chunk, 20)
	s := openUpload(t, w, l, "slow.bin", int64(len(whole)), sha256Hex(whole)).JSON201
	status, body := put(t, w.HTTP, s, &trickle{chunk: chunk, left: 20, period: 150 * time.Millisecond}, int64(len(whole)))
	require.Equal(t, http.StatusNoContent, status, string(body))
	require.Equal(t, http.StatusOK, commit(t, w, s).StatusCode())

	// Stalled halfway: 408, and the same session then takes the bytes.
	s2 := openUpload(t, w, l, "stalled.bin", int64(len(whole)), sha256Hex(whole)).JSON201
	stall := &stalled{data: whole[:len(whole)/2], release: make(chan struct{})}
	defer stall.Close()
	status, body = put(t, w.HTTP, s2, stall, int64(len(whole)))
	require.Equal(t, http.StatusRequestTimeout, status, string(body))
	require.Equal(t, "request-timeout", problemCode(t, body))
	status, body = put(t, w.HTTP, s2, bytes.NewReader(whole), int64(len(whole)))
	require.Equal(t, http.StatusNoContent, status, string(body))
	require.Equal(t, http.StatusOK, commit(t, w, s2).StatusCode())
}
