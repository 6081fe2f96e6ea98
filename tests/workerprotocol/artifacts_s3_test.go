package workerprotocol

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/objectstore"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestArtifactsThroughS3 runs the upload flow against an S3-compatible store
// (gofakes3 on loopback): the worker gets a presigned PUT and never a
// credential; the gateway verifies at commit. gofakes3 checks neither
// signatures nor expiry, so those are covered by the fs tests.
func TestArtifactsThroughS3(t *testing.T) {
	t.Parallel()
	mem := s3mem.New()
	require.NoError(t, mem.CreateBucket("artifacts"))
	fake := httptest.NewServer(gofakes3.New(mem, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(fake.Close)
	const secret = "gateway-secret-key"
	backend, err := objectstore.NewS3(context.Background(), objectstore.S3Config{
		Endpoint: fake.Listener.Addr().String(), Region: "us-east-1", Bucket: "artifacts",
		AccessKeyID: "gateway", SecretAccessKey: secret, PathStyle: true,
	})
	require.NoError(t, err)
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Artifacts.Backend = backend }})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	g.CreateTask(t, org, harness.TaskSpec{})
	l := lease(t, w, 1, 5)[0]

	content := []byte("scan report stored in S3")
	opened := openUpload(t, w, l, "report.txt", int64(len(content)), sha256Hex(content))
	require.Equal(t, http.StatusCreated, opened.StatusCode(), string(opened.Body))
	s := opened.JSON201
	require.True(t, strings.HasPrefix(s.Url, fake.URL), "a presigned URL of the store, not the gateway")
	require.NotContains(t, string(opened.Body), secret, "no credential reaches the worker")
	require.NotEmpty(t, s.Headers["x-amz-checksum-sha256"])

	plain := &http.Client{} // the worker's certificate never goes to the store
	status, body := put(t, plain, s, bytes.NewReader(content), int64(len(content)))
	require.Equal(t, http.StatusOK, status, string(body))
	first := commit(t, w, s)
	require.Equal(t, http.StatusOK, first.StatusCode(), string(first.Body))
	require.Equal(t, first.JSON200.Id, commit(t, w, s).JSON200.Id)

	res, err := g.Control.GetFileContent(context.Background(), first.JSON200.Id)
	require.NoError(t, err)
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, content, got)

	// Other bytes under the same session: the store may take them, the
	// gateway's commit does not.
	s2 := openUpload(t, w, l, "tampered.txt", int64(len(content)), sha256Hex(content)).JSON201
	put(t, plain, s2, bytes.NewReader(bytes.ToUpper(content)), int64(len(content)))
	c := commit(t, w, s2)
	require.Equal(t, http.StatusConflict, c.StatusCode(), string(c.Body))
	require.Contains(t, []string{"upload-mismatch", "upload-missing"}, problemCode(t, c.Body))
	require.Equal(t, 1, countRows(t, g, "files"))
}
