package faults

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// certWindow is how far a worker certificate's validity reaches either side
// of now: wider than any clock skew a scenario gives a replica.
const certWindow = 2 * time.Hour

// identity is a registered worker and its client certificate.
type identity struct {
	ID              uuid.UUID
	Name            string
	Cert            tls.Certificate
	CertPEM, KeyPEM []byte
}

// newIdentity registers a scanner worker with a certificate valid from
// certWindow ago to certWindow ahead, assigned to org.
func newIdentity(t *testing.T, g *harness.Gateway, name string, capacity int, org uuid.UUID) *identity {
	t.Helper()
	now := time.Now()
	return registerIdentity(t, g, name, capacity, org, now.Add(-certWindow), now.Add(certWindow))
}

// registerIdentity registers a worker whose certificate is valid from
// notBefore to notAfter.
func registerIdentity(t *testing.T, g *harness.Gateway, name string, capacity int, org uuid.UUID, notBefore, notAfter time.Time) *identity {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, g.CA.Cert, key.Public(), g.CA.Key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	id := &identity{Name: name,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
	id.Cert, err = tls.X509KeyPair(id.CertPEM, id.KeyPEM)
	require.NoError(t, err)

	certText := string(id.CertPEM)
	res, err := g.Control.CreateWorkerWithResponse(context.Background(), apiclient.CreateWorkerRequest{
		Name: name, WorkerType: "scanner", MaxConcurrentTasks: &capacity, CertificatePem: &certText})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	id.ID = res.JSON201.Id
	g.Assign(t, org, id.ID)
	return id
}

// transport is an HTTP transport presenting the identity's certificate. A
// non-nil dial replaces the address the URL names (the load balancer).
func (id *identity) transport(g *harness.Gateway, dial DialFunc) *http.Transport {
	return &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: g.CAPool, Certificates: []tls.Certificate{id.Cert}, MinVersion: tls.VersionTLS13},
		DialContext:         dial,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 8,
	}
}
