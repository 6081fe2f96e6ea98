package security

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// preauthProtocols are the client protocols the pre-authentication checks
// run over: HTTP/2 (what workers use) and HTTP/1.1, where a refused request
// must also not make net/http drain its body.
var preauthProtocols = map[string]func(*http.Protocols){
	"h2":       func(p *http.Protocols) { p.SetHTTP2(true) },
	"http/1.1": func(p *http.Protocols) { p.SetHTTP1(true) },
}

// preauthClient is a TLS 1.3 client of g speaking one protocol, presenting
// cert when given.
func preauthClient(g *harness.Gateway, cert *tls.Certificate, protocol func(*http.Protocols)) *http.Client {
	tc := &tls.Config{RootCAs: g.CAPool, MinVersion: tls.VersionTLS13}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	var protocols http.Protocols
	protocol(&protocols)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Protocols: &protocols}}
}

// preauthSelfSigned is a client certificate no worker registered.
func preauthSelfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stranger"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// stalledBody sends prefix and then nothing, never ending, until the test
// ends: a server that reads the body before it authenticates waits on it
// forever; one that authenticates first answers at once.
func stalledBody(t *testing.T, prefix string) io.Reader {
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		if _, err := pw.Write([]byte(prefix)); err != nil {
			return
		}
		<-stop
		pw.CloseWithError(fmt.Errorf("test over"))
	}()
	t.Cleanup(func() { pr.Close() })
	return pr
}

// refusedUnread sends a request whose body stalls after its prefix and
// asserts the problem the gateway answers with.
func refusedUnread(t *testing.T, client *http.Client, method, url string, header http.Header, wantStatus int, wantCode string) {
	t.Helper()
	// Generous for a loaded box; the answer needs no body byte at all.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, stalledBody(t, `{"records":[{"a":`))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	require.NoError(t, err, "no answer while the body stalled: the gateway waited for the body before authenticating")
	defer res.Body.Close()
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	require.Equal(t, wantStatus, res.StatusCode)
	require.Equal(t, wantCode, p.Code)
}

// TestUnauthenticatedBodyIsNeverRead: on bearer and mTLS routes the gateway
// refuses an unauthenticated request from its headers and TLS state alone,
// without waiting for (or reading) its body.
func TestUnauthenticatedBodyIsNeverRead(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "preauth")
	revoked := g.NewWorker(t, "revoked", 1, org)
	res, err := g.Control.RevokeWorkerWithResponse(context.Background(), revoked.ID, apiclient.RevokeRequest{Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	stranger := preauthSelfSigned(t)

	results := g.URL + "/v1/attempts/" + uuid.NewString() + "/results"
	workerHeader := http.Header{"Lease-Token": {strings.Repeat("a", 32)}, "Idempotency-Key": {uuid.NewString()}}
	for name, protocol := range preauthProtocols {
		t.Run(name, func(t *testing.T) {
			anonymous := preauthClient(g, nil, protocol)
			t.Run("bearer route without a token", func(t *testing.T) {
				refusedUnread(t, anonymous, http.MethodPost, g.URL+"/v1/tasks", nil, http.StatusUnauthorized, "unauthenticated")
			})
			t.Run("bearer route with an unknown token", func(t *testing.T) {
				h := http.Header{"Authorization": {"Bearer wgt_" + strings.Repeat("x", 40)}}
				refusedUnread(t, anonymous, http.MethodPost, g.URL+"/v1/tasks", h, http.StatusUnauthorized, "unauthenticated")
			})
			t.Run("mTLS route without a certificate", func(t *testing.T) {
				refusedUnread(t, anonymous, http.MethodPost, results, workerHeader, http.StatusUnauthorized, "certificate-required")
			})
			t.Run("mTLS route with an unknown self-signed certificate", func(t *testing.T) {
				refusedUnread(t, preauthClient(g, &stranger, protocol), http.MethodPost, results, workerHeader,
					http.StatusUnauthorized, "certificate-unknown")
			})
			t.Run("mTLS route with a revoked worker's certificate", func(t *testing.T) {
				refusedUnread(t, preauthClient(g, &revoked.Cert, protocol), http.MethodPost, results, workerHeader,
					http.StatusForbidden, "worker-revoked")
			})
		})
	}

	// An authenticated caller still has its body read and strictly checked:
	// a duplicate key is refused by the JSON pre-check, which reads the body.
	duplicate := `{"sequence_number":1,"sequence_number":2,"records":[]}`
	worker := g.NewWorker(t, "valid", 1, org)
	req, err := http.NewRequest(http.MethodPost, results, strings.NewReader(duplicate))
	require.NoError(t, err)
	req.Header = workerHeader.Clone()
	req.Header.Set("Content-Type", "application/json")
	assertBodyRefused(t, worker.HTTP, req)

	req, err = http.NewRequest(http.MethodPost, g.URL+"/v1/tasks", strings.NewReader(`{"task_type":"a","task_type":"b"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+g.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	assertBodyRefused(t, g.HTTPClient(nil), req)
}

func assertBodyRefused(t *testing.T, client *http.Client, req *http.Request) {
	t.Helper()
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, string(body))
	require.Contains(t, string(body), "duplicate key", "the authenticated caller's body was read and checked")
}

// TestRefusedBodyCost measures (in the gateway process's own CPU time) what
// an unauthenticated 4 MiB result batch costs against a tiny one. It logs
// both figures; the bound it checks is generous (reading the body before
// authenticating cost about 180 times a tiny request).
//
//	go test -count=1 -run TestRefusedBodyCost -v ./tests/security/
func TestRefusedBodyCost(t *testing.T) {
	if testing.Short() {
		t.Skip("measures CPU over hundreds of requests")
	}
	g, procs := harness.StartProcesses(t, 1)
	gateway := procs[0]
	results := gateway.URL + "/v1/attempts/" + uuid.NewString() + "/results"
	// A valid 4 MiB JSON batch of many small tokens: the most expensive kind
	// to check. The result body limit is 4 MiB, so it is not refused for
	// its size.
	var big bytes.Buffer
	big.WriteString(`{"sequence_number":1,"records":[{"n":[`)
	for big.Len() < 4<<20-64 {
		big.WriteString("1,")
	}
	big.WriteString(`1]}]}`)
	require.LessOrEqual(t, big.Len(), 4<<20)
	tiny := []byte(`{"sequence_number":1,"records":[]}`)

	for name, protocol := range preauthProtocols {
		t.Run(name, func(t *testing.T) {
			client := preauthClient(g, nil, protocol)
			send := func(body []byte) {
				req, err := http.NewRequest(http.MethodPost, results, bytes.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Lease-Token", strings.Repeat("a", 32))
				req.Header.Set("Idempotency-Key", uuid.NewString())
				res, err := client.Do(req)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				require.Equal(t, http.StatusUnauthorized, res.StatusCode)
			}
			perRequest := func(body []byte, n int) time.Duration {
				send(body) // warm the connection and the code path
				before := processCPU(t, gateway.Cmd.Process.Pid)
				for range n {
					send(body)
				}
				return (processCPU(t, gateway.Cmd.Process.Pid) - before) / time.Duration(n)
			}
			const n = 200
			tinyCost := perRequest(tiny, n)
			bigCost := perRequest(big.Bytes(), n)
			ratio := float64(bigCost) / float64(max(tinyCost, time.Microsecond))
			t.Logf("%s: refused tiny body %v/request, refused 4 MiB body %v/request, ratio %.1f (gateway CPU over %d requests each)",
				name, tinyCost, bigCost, ratio, n)
			require.Less(t, ratio, 20.0, "a refused 4 MiB body costs far more than a tiny one: it is read before authentication")
		})
	}
}

// processCPU is a process's user+system CPU time so far, from
// /proc/<pid>/stat (clock ticks of 1/100 s on Linux).
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if os.IsNotExist(err) {
		t.Skip("no /proc: CPU time is measured on Linux only")
	}
	require.NoError(t, err)
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields of the whole line.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
