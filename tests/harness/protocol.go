package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Raw worker-protocol calls the black-box tests make: leases, completions,
// logs, artifact uploads and result batches.

// Lease takes up to n leases with the raw protocol, waiting up to wait.
func Lease(t testing.TB, w *Worker, n, wait int) []apiclient.Lease {
	t.Helper()
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil,
		apiclient.LeaseRequest{MaxTasks: &n, WaitSeconds: &wait})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200.Leases
}

// LeaseAsync starts a poll with client (a worker's, or one of its on
// another replica) and returns the channel its leases arrive on, nil when
// the poll failed: for tests that act while the poll waits.
func LeaseAsync(client *apiclient.ClientWithResponses, req apiclient.LeaseRequest) <-chan []apiclient.Lease {
	got := make(chan []apiclient.Lease, 1)
	go func() {
		res, err := client.AcquireLeasesWithResponse(context.Background(), nil, req)
		if err != nil || res.JSON200 == nil {
			got <- nil
			return
		}
		got <- res.JSON200.Leases
	}()
	return got
}

// ProblemCode is the code of a problem+json body.
func ProblemCode(t testing.TB, body []byte) string {
	t.Helper()
	var p struct {
		Code   string `json:"code"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &p), string(body))
	return p.Code
}

// CompleteAs completes a lease with an outcome over the raw protocol.
func CompleteAs(t testing.TB, w *Worker, l apiclient.Lease, outcome string, e *apiclient.AttemptError) {
	t.Helper()
	res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken},
		apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcome(outcome), Error: e})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
}

// AppendLog appends data at offset to a lease's log.
func AppendLog(t testing.TB, w *Worker, l apiclient.Lease, offset int64, data string) *apiclient.AppendLogsResponse {
	t.Helper()
	res, err := w.Client.AppendLogsWithResponse(context.Background(), l.AttemptId,
		&apiclient.AppendLogsParams{LeaseToken: l.LeaseToken}, apiclient.LogChunk{Offset: offset, Data: data})
	require.NoError(t, err)
	return res
}

// SHA256Hex is the hex SHA-256 of b, as uploads declare it.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// OpenUpload opens an artifact upload for a lease.
func OpenUpload(t testing.TB, w *Worker, l apiclient.Lease, name string, size int64, sum string) *apiclient.OpenArtifactUploadResponse {
	t.Helper()
	ct := "application/json"
	res, err := w.Client.OpenArtifactUploadWithResponse(context.Background(), l.AttemptId,
		&apiclient.OpenArtifactUploadParams{LeaseToken: l.LeaseToken},
		apiclient.OpenUploadRequest{Name: name, ContentType: &ct, SizeBytes: size, Sha256: sum})
	require.NoError(t, err)
	return res
}

// PutUpload sends bytes to an upload session's URL with its headers.
func PutUpload(t testing.TB, client *http.Client, s *apiclient.UploadSession, body io.Reader, size int64) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(string(s.Method), s.Url, body)
	require.NoError(t, err)
	req.ContentLength = size
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// CommitUpload commits an upload session.
func CommitUpload(t testing.TB, w *Worker, s *apiclient.UploadSession) *apiclient.CommitArtifactUploadResponse {
	t.Helper()
	res, err := w.Client.CommitArtifactUploadWithResponse(context.Background(), s.UploadId)
	require.NoError(t, err)
	return res
}

// ResultSender posts raw result batches, so tests control bytes and keys.
type ResultSender struct {
	T    testing.TB
	W    *Worker
	Base string
}

// BatchAnswer is the gateway's answer to one result batch.
type BatchAnswer struct {
	Status   int
	Body     []byte
	Replayed bool
	State    string
}

// Send posts one result batch under an idempotency key.
func (s ResultSender) Send(l apiclient.Lease, key string, body string) BatchAnswer {
	s.T.Helper()
	req, err := http.NewRequest(http.MethodPost, s.Base+"/v1/attempts/"+l.AttemptId.String()+"/results", bytes.NewReader([]byte(body)))
	require.NoError(s.T, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lease-Token", l.LeaseToken)
	req.Header.Set("Idempotency-Key", key)
	res, err := s.W.HTTP.Do(req)
	require.NoError(s.T, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.T, err)
	return BatchAnswer{Status: res.StatusCode, Body: raw, Replayed: res.Header.Get("Idempotent-Replayed") == "true", State: res.Header.Get("Lease-State")}
}

// SendUntilSettled retries while the key is in flight, as a worker would.
func (s ResultSender) SendUntilSettled(l apiclient.Lease, key, body string) BatchAnswer {
	for {
		a := s.Send(l, key, body)
		if a.Status != http.StatusConflict || ProblemCode(s.T, a.Body) != "idempotency-in-flight" {
			return a
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ScannerBatch is a result batch of two assets, a threat and data.
func ScannerBatch(seq int, host string) string {
	return fmt.Sprintf(`{"sequence_number": %d, "records": [
		{"kind": "asset", "asset": {"type": "hostname", "value": %q}, "details": {"source": "test"}},
		{"kind": "asset", "asset": {"type": "ip", "value": "127.0.0.1"}},
		{"kind": "threat", "asset": {"type": "ip", "value": "127.0.0.1"}, "external_id": "open-ssh", "title": "SSH open", "severity": "low"},
		{"kind": "data", "data": {"note": "kept for producers"}}]}`, seq, host)
}
