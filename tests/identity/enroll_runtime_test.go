package identity

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// TestWorkerEnrollsAndRenewsThroughWorkerclient: a worker created by an
// operator enrolls with its one-time token, with no files prepared by hand
// (only the CA it trusts), runs tasks, renews its short-lived certificate by
// itself, restarts from its state directory, and stops when revoked.
func TestWorkerEnrollsAndRenewsThroughWorkerclient(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) {
		c.Identity.CertificateValidity = 9 * time.Second
		c.Identity.RenewalGrace = time.Minute
	}})
	org := g.NewOrganization(t, "acme")
	created, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{Name: "enrolling", WorkerType: "scanner"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	g.Assign(t, org, created.JSON201.Id)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, g.CA.CertPEM, 0o644))
	state := filepath.Join(dir, "state")

	var mu sync.Mutex
	ran := map[string]bool{}
	run := func(token string) (stop func(), result chan error) {
		rt, err := workerclient.NewWorker(workerclient.Config{
			GatewayURL: g.URL, StateDir: state, EnrollmentToken: token, CAFile: caFile,
			WaitSeconds: 1, DrainTimeout: 5 * time.Second, Logger: harness.Logger(),
			Handler: func(_ context.Context, lt *workerclient.LeasedTask) error {
				mu.Lock()
				ran[lt.ID.String()] = true
				mu.Unlock()
				return nil
			},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		result = make(chan error, 1)
		go func() { result <- rt.Run(ctx) }()
		t.Cleanup(cancel)
		return cancel, result
	}

	stop, result := run(created.JSON201.EnrollmentToken)
	first := g.CreateTask(t, org, harness.TaskSpec{})
	g.WaitTaskState(t, first, "completed")
	certPEM, err := os.ReadFile(filepath.Join(state, workerclient.StateCertFile))
	require.NoError(t, err)
	cert, err := pki.ParseCertificatePEM(certPEM)
	require.NoError(t, err)
	require.Equal(t, created.JSON201.Id.String(), cert.Subject.CommonName)
	info, err := os.Stat(filepath.Join(state, workerclient.StateKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	keyPEM, err := os.ReadFile(filepath.Join(state, workerclient.StateKeyFile))
	require.NoError(t, err)
	firstPair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)

	// The runtime renews by itself (two thirds of a 9 s lifetime).
	harness.WaitFor(t, 30*time.Second, "a renewed certificate", func() bool {
		renewed, err := os.ReadFile(filepath.Join(state, workerclient.StateCertFile))
		return err == nil && string(renewed) != string(certPEM)
	})
	second := g.CreateTask(t, org, harness.TaskSpec{})
	g.WaitTaskState(t, second, "completed")
	old, err := apiclient.NewClientWithResponses(g.URL, apiclient.WithHTTPClient(g.HTTPClient(&firstPair)))
	require.NoError(t, err)
	stale, err := old.HeartbeatWorkerWithResponse(context.Background(), apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, stale.StatusCode(), "the first certificate stopped once the new one was used")

	// A restart reuses the state directory: no token needed.
	stop()
	require.NoError(t, <-result)
	_, result = run("")
	third := g.CreateTask(t, org, harness.TaskSpec{})
	g.WaitTaskState(t, third, "completed")

	events, err := g.Control.ListAuditEventsWithResponse(context.Background(), &apiclient.ListAuditEventsParams{TargetId: ptr(created.JSON201.Id.String())})
	require.NoError(t, err)
	count := map[string]int{}
	for _, e := range events.JSON200.Items {
		count[e.Action]++
		require.NotContains(t, string(*e.Details), created.JSON201.EnrollmentToken)
	}
	require.Equal(t, 1, count["worker.enroll"])
	require.GreaterOrEqual(t, count["worker.renew_certificate"], 1)

	// Revocation stops the runtime.
	_, err = g.Control.RevokeWorkerWithResponse(context.Background(), created.JSON201.Id, apiclient.RevokeRequest{Reason: "test"})
	require.NoError(t, err)
	select {
	case err := <-result:
		require.True(t, errors.Is(err, workerclient.ErrWorkerRevoked), "%v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the runtime kept running after revocation")
	}
	mu.Lock()
	defer mu.Unlock()
	require.True(t, ran[first.String()] && ran[second.String()] && ran[third.String()])
}
