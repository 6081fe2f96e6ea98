package workerprotocol

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
)

// TestWorkerRuntimeLogsAndArtifacts drives logs and uploads through the Go
// worker runtime: a long multi-byte log comes back exactly, and a seekable
// and a streamed (pipe) artifact arrive intact.
func TestWorkerRuntimeLogsAndArtifacts(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Limits.LogBytesPerAttempt = 4 << 20 }})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})

	var logText strings.Builder
	logText.WriteString("hello\n")
	for i := 0; logText.Len() < 200<<10; i++ {
		logText.WriteString("ligne é n°")
		logText.WriteString(strings.Repeat("x", i%50))
		logText.WriteString("\n")
	}
	logText.WriteString("bye\n")
	report := []byte(`{"ok": true}`)
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)

	w.Runtime(t, 1, func(ctx context.Context, lt *workerclient.LeasedTask) error {
		if _, err := io.WriteString(lt.Log(), logText.String()); err != nil {
			return err
		}
		if _, err := lt.UploadArtifact(ctx, "report.json", "application/json", bytes.NewReader(report)); err != nil {
			return err
		}
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(big)
			_ = pw.Close()
		}()
		_, err := lt.UploadArtifact(ctx, "big.bin", "application/octet-stream", pr)
		return err
	})
	g.WaitTaskState(t, task, "completed")

	var got strings.Builder
	offset := 0
	for {
		part := readLog(t, g, task, offset, false)
		got.WriteString(part.Data)
		if int(part.NextOffset) == offset {
			break
		}
		offset = int(part.NextOffset)
	}
	require.Equal(t, logText.String(), got.String())

	files, err := g.Control.ListTaskArtifactsWithResponse(context.Background(), task)
	require.NoError(t, err)
	require.Len(t, files.JSON200.Items, 2)
	for _, f := range files.JSON200.Items {
		res, err := g.Control.GetFileContent(context.Background(), f.Id)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		sum := sha256.Sum256(body)
		require.Equal(t, f.Sha256, hex.EncodeToString(sum[:]))
		want := big
		if f.Name == "report.json" {
			want = report
		}
		require.Equal(t, want, body, f.Name)
	}
}

func TestWorkerRuntimeLogTruncation(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Limits.LogBytesPerAttempt = 1024 }})
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{})
	w.Runtime(t, 1, func(_ context.Context, lt *workerclient.LeasedTask) error {
		_, err := io.WriteString(lt.Log(), strings.Repeat("0123456789\n", 1000))
		return err
	})
	g.WaitTaskState(t, task, "completed")
	text := readLog(t, g, task, 0, false)
	require.Equal(t, 1, strings.Count(text.Data, "[log truncated"))
	require.LessOrEqual(t, len(text.Data), 1024+200)
}
