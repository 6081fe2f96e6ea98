package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var fingerprintRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("Worker Gateway Test CA")
	require.NoError(t, err)
	return ca
}

func caPool(ca *CA) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

func TestNewCA(t *testing.T) {
	ca := newTestCA(t)

	c := ca.Cert
	assert.Equal(t, "Worker Gateway Test CA", c.Subject.CommonName)
	assert.True(t, c.IsCA)
	assert.True(t, c.BasicConstraintsValid)
	assert.Equal(t, 0, c.MaxPathLen)
	assert.True(t, c.MaxPathLenZero)
	assert.Equal(t, x509.KeyUsageCertSign|x509.KeyUsageCRLSign, c.KeyUsage)
	assert.WithinDuration(t, time.Now().Add(10*365*24*time.Hour), c.NotAfter, time.Minute)
	assert.LessOrEqual(t, c.SerialNumber.BitLen(), 128)
	require.NoError(t, c.CheckSignatureFrom(c), "CA must be self-signed")

	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	require.True(t, ok)
	assert.Equal(t, elliptic.P256(), pub.Curve)

	parsed, err := ParseCertificatePEM(ca.CertPEM)
	require.NoError(t, err)
	assert.True(t, parsed.Equal(c))

	_, err = NewCA("")
	assert.Error(t, err)
}

func TestIssueServer(t *testing.T) {
	ca := newTestCA(t)

	tests := []struct {
		name    string
		hosts   []string
		wantDNS []string
		wantIPs []string
		wantErr bool
	}{
		{name: "dns", hosts: []string{"localhost"}, wantDNS: []string{"localhost"}},
		{name: "ipv4", hosts: []string{"127.0.0.1"}, wantIPs: []string{"127.0.0.1"}},
		{name: "ipv6", hosts: []string{"::1"}, wantIPs: []string{"::1"}},
		{
			name:    "mixed",
			hosts:   []string{"localhost", "127.0.0.1", "::1", "gw.example.com"},
			wantDNS: []string{"localhost", "gw.example.com"},
			wantIPs: []string{"127.0.0.1", "::1"},
		},
		{name: "no hosts", hosts: nil, wantErr: true},
		{name: "empty host", hosts: []string{""}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iss, err := ca.IssueServer(tt.hosts, time.Hour)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)

			c := iss.Cert
			assert.Equal(t, tt.wantDNS, c.DNSNames)
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			assert.Equal(t, tt.wantIPs, ips)
			assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, c.ExtKeyUsage)
			assert.False(t, c.IsCA)

			for _, h := range tt.hosts {
				_, err := c.Verify(x509.VerifyOptions{
					DNSName:   h,
					Roots:     caPool(ca),
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				})
				assert.NoError(t, err, "verify for host %q", h)
			}

			_, err = tls.X509KeyPair(iss.CertPEM, iss.KeyPEM)
			assert.NoError(t, err)
			block, _ := pem.Decode(iss.KeyPEM)
			require.NotNil(t, block)
			assert.Equal(t, "PRIVATE KEY", block.Type)
		})
	}
}

func TestIssueClient(t *testing.T) {
	ca := newTestCA(t)

	iss, err := ca.IssueClient("worker-1", 24*time.Hour)
	require.NoError(t, err)
	c := iss.Cert
	assert.Equal(t, "worker-1", c.Subject.CommonName)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, c.ExtKeyUsage)
	assert.False(t, c.IsCA)
	assert.WithinDuration(t, time.Now().Add(-time.Minute), c.NotBefore, 5*time.Second)
	assert.WithinDuration(t, time.Now().Add(24*time.Hour), c.NotAfter, 5*time.Second)

	_, err = c.Verify(x509.VerifyOptions{
		Roots:     caPool(ca),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	assert.NoError(t, err)

	_, err = ca.IssueClient("", time.Hour)
	assert.Error(t, err)
	_, err = ca.IssueClient("worker-1", 0)
	assert.Error(t, err)
}

func TestIssueCapsValidityAtCAExpiry(t *testing.T) {
	ca := newTestCA(t)
	iss, err := ca.IssueClient("long-lived", 100*365*24*time.Hour)
	require.NoError(t, err)
	assert.Equal(t, ca.Cert.NotAfter, iss.Cert.NotAfter)
}

func TestSerialsAreRandom(t *testing.T) {
	ca := newTestCA(t)
	seen := map[string]bool{ca.Cert.SerialNumber.String(): true}
	for range 20 {
		iss, err := ca.IssueClient("w", time.Hour)
		require.NoError(t, err)
		s := iss.Cert.SerialNumber
		assert.Positive(t, s.Sign())
		assert.LessOrEqual(t, s.BitLen(), 128)
		assert.False(t, seen[s.String()], "duplicate serial %s", s)
		seen[s.String()] = true
	}
}

// TestMutualTLSHandshake checks the property the gateway relies on: the
// fingerprint the server computes from the handshake's peer certificate is
// the one recorded when the certificate was issued.
func TestMutualTLSHandshake(t *testing.T) {
	ca := newTestCA(t)
	server, err := ca.IssueServer([]string{"127.0.0.1", "::1", "localhost"}, time.Hour)
	require.NoError(t, err)
	client, err := ca.IssueClient("worker-tls", time.Hour)
	require.NoError(t, err)

	serverPair, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	require.NoError(t, err)
	clientPair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	require.NoError(t, err)

	tests := []struct {
		name       string
		clientAuth tls.ClientAuthType
	}{
		{name: "require any client cert", clientAuth: tls.RequireAnyClientCert},
		{name: "require and verify client cert", clientAuth: tls.RequireAndVerifyClientCert},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { _ = ln.Close() })

			type result struct {
				state tls.ConnectionState
				err   error
			}
			results := make(chan result, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					results <- result{err: err}
					return
				}
				defer conn.Close()
				tconn := tls.Server(conn, &tls.Config{
					Certificates: []tls.Certificate{serverPair},
					ClientAuth:   tt.clientAuth,
					ClientCAs:    caPool(ca),
					MinVersion:   tls.VersionTLS13,
				})
				_ = tconn.SetDeadline(time.Now().Add(10 * time.Second))
				err = tconn.Handshake()
				results <- result{state: tconn.ConnectionState(), err: err}
			}()

			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{
				Certificates: []tls.Certificate{clientPair},
				RootCAs:      caPool(ca),
				MinVersion:   tls.VersionTLS13,
			})
			require.NoError(t, err)
			defer conn.Close()
			assert.Equal(t, uint16(tls.VersionTLS13), conn.ConnectionState().Version)

			var res result
			select {
			case res = <-results:
			case <-time.After(10 * time.Second):
				t.Fatal("server handshake timed out")
			}
			require.NoError(t, res.err)
			require.NotEmpty(t, res.state.PeerCertificates)
			peer := res.state.PeerCertificates[0]
			assert.Equal(t, Fingerprint(client.Cert), Fingerprint(peer))
			assert.Equal(t, "worker-tls", peer.Subject.CommonName)
		})
	}
}

func TestFingerprint(t *testing.T) {
	ca := newTestCA(t)
	a, err := ca.IssueClient("a", time.Hour)
	require.NoError(t, err)
	b, err := ca.IssueClient("a", time.Hour)
	require.NoError(t, err)

	for _, c := range []*x509.Certificate{ca.Cert, a.Cert, b.Cert} {
		fp := Fingerprint(c)
		assert.Regexp(t, fingerprintRE, fp)
		assert.Equal(t, FingerprintDER(c.Raw), fp)
		sum := sha256.Sum256(c.Raw)
		assert.Equal(t, hex.EncodeToString(sum[:]), fp)
	}
	assert.NotEqual(t, Fingerprint(a.Cert), Fingerprint(b.Cert), "same CN must not mean same identity")

	// Known-answer check so the encoding (hex, lowercase, SHA-256) can never
	// drift silently: these are the identity keys stored in the database.
	assert.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", FingerprintDER(nil))
}

func TestSignCSR(t *testing.T) {
	ca := newTestCA(t)

	keyPEM, csrPEM, err := NewCSR("i-want-to-be-admin")
	require.NoError(t, err)

	cert, certPEM, err := ca.SignCSR(csrPEM, "worker-42", time.Hour)
	require.NoError(t, err)
	assert.Equal(t, "worker-42", cert.Subject.CommonName, "CN must come from the gateway, not the CSR")
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
	assert.WithinDuration(t, time.Now().Add(-time.Minute), cert.NotBefore, 5*time.Second)
	assert.WithinDuration(t, time.Now().Add(time.Hour), cert.NotAfter, 5*time.Second)

	fromPEM, err := ParseCertificatePEM(certPEM)
	require.NoError(t, err)
	assert.True(t, fromPEM.Equal(cert))

	_, err = cert.Verify(x509.VerifyOptions{
		Roots:     caPool(ca),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	require.NoError(t, err)

	// The worker's own key must pair with the certificate it gets back.
	_, err = tls.X509KeyPair(certPEM, keyPEM)
	assert.NoError(t, err)
}

func TestSignCSRIgnoresRequestedExtensions(t *testing.T) {
	ca := newTestCA(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	csrPEM := makeCSR(t, key, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "evil", Organization: []string{"Admins"}},
		DNSNames:    []string{"gateway.example.com"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	})

	cert, _, err := ca.SignCSR(csrPEM, "worker-7", time.Hour)
	require.NoError(t, err)
	assert.Equal(t, pkix.Name{CommonName: "worker-7"}.String(), cert.Subject.String())
	assert.Empty(t, cert.DNSNames)
	assert.Empty(t, cert.IPAddresses)
	assert.NotContains(t, cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	assert.False(t, cert.IsCA)
}

func TestSignCSRKeyTypes(t *testing.T) {
	ca := newTestCA(t)

	genECDSA := func(c elliptic.Curve) func(t *testing.T) crypto.Signer {
		return func(t *testing.T) crypto.Signer {
			k, err := ecdsa.GenerateKey(c, rand.Reader)
			require.NoError(t, err)
			return k
		}
	}
	genRSA := func(bits int) func(t *testing.T) crypto.Signer {
		return func(t *testing.T) crypto.Signer {
			k, err := rsa.GenerateKey(rand.Reader, bits)
			require.NoError(t, err)
			return k
		}
	}
	tests := []struct {
		name    string
		key     func(t *testing.T) crypto.Signer
		wantOK  bool
		wantMsg string
	}{
		{name: "ecdsa p256", key: genECDSA(elliptic.P256()), wantOK: true},
		{name: "ecdsa p384", key: genECDSA(elliptic.P384()), wantOK: true},
		{name: "ecdsa p521", key: genECDSA(elliptic.P521()), wantMsg: "curve P-521 not accepted"},
		{name: "ecdsa p224", key: genECDSA(elliptic.P224()), wantMsg: "curve P-224 not accepted"},
		{name: "rsa 2048", key: genRSA(2048), wantOK: true},
		{name: "rsa 1024", key: genRSA(1024), wantMsg: "RSA key of 1024 bits is too small"},
		{name: "ed25519", key: func(t *testing.T) crypto.Signer {
			_, k, err := ed25519.GenerateKey(rand.Reader)
			require.NoError(t, err)
			return k
		}, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csrPEM := makeCSR(t, tt.key(t), &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}})
			cert, certPEM, err := ca.SignCSR(csrPEM, "worker", time.Hour)
			if !tt.wantOK {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrBadCSR)
				assert.Contains(t, err.Error(), tt.wantMsg)
				assert.Nil(t, cert)
				assert.Nil(t, certPEM)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "worker", cert.Subject.CommonName)
		})
	}
}

func TestSignCSRRejectsMalformed(t *testing.T) {
	ca := newTestCA(t)
	_, good, err := NewCSR("w")
	require.NoError(t, err)
	block, _ := pem.Decode(good)
	require.NotNil(t, block)

	// The signature BIT STRING is the last field of the CSR, so flipping the
	// final byte corrupts the signature while keeping the DER parseable.
	tampered := append([]byte(nil), block.Bytes...)
	tampered[len(tampered)-1] ^= 0x01
	_, err = x509.ParseCertificateRequest(tampered)
	require.NoError(t, err, "tampering must only break the signature, not the encoding")

	// A genuine signature made by some other key must not vouch for the key
	// this CSR carries.
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	otherBlock, _ := pem.Decode(makeCSR(t, otherKey, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w"}}))
	require.NotNil(t, otherBlock)
	foreignSig := spliceSignature(t, block.Bytes, otherBlock.Bytes)

	tests := []struct {
		name    string
		pem     []byte
		wantMsg string
	}{
		{name: "tampered signature", pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}), wantMsg: "signature does not verify"},
		{name: "signature from another key", pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: foreignSig}), wantMsg: "signature does not verify"},
		{name: "not pem", pem: []byte("hello"), wantMsg: "no PEM block"},
		{name: "empty", pem: nil, wantMsg: "no PEM block"},
		{name: "wrong block type", pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), wantMsg: "unexpected PEM block type"},
		{name: "garbage der", pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x03, 0x01, 0x02, 0x03}}), wantMsg: "cannot parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, certPEM, err := ca.SignCSR(tt.pem, "w", time.Hour)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadCSR)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Nil(t, cert)
			assert.Nil(t, certPEM)
		})
	}
}

func TestSignCSRArguments(t *testing.T) {
	ca := newTestCA(t)
	_, csrPEM, err := NewCSR("w")
	require.NoError(t, err)

	_, _, err = ca.SignCSR(csrPEM, "", time.Hour)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrBadCSR, "a missing CN is the caller's fault, not the worker's")

	_, _, err = ca.SignCSR(csrPEM, "w", -time.Hour)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrBadCSR)
}

func TestNewCSR(t *testing.T) {
	keyPEM, csrPEM, err := NewCSR("worker-9")
	require.NoError(t, err)

	keyBlock, _ := pem.Decode(keyPEM)
	require.NotNil(t, keyBlock)
	assert.Equal(t, "PRIVATE KEY", keyBlock.Type)
	key, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	require.NoError(t, err)
	ecKey, ok := key.(*ecdsa.PrivateKey)
	require.True(t, ok)
	assert.Equal(t, elliptic.P256(), ecKey.Curve)

	csrBlock, _ := pem.Decode(csrPEM)
	require.NotNil(t, csrBlock)
	assert.Equal(t, "CERTIFICATE REQUEST", csrBlock.Type)
	csr, err := x509.ParseCertificateRequest(csrBlock.Bytes)
	require.NoError(t, err)
	require.NoError(t, csr.CheckSignature())
	assert.Equal(t, "worker-9", csr.Subject.CommonName)
	assert.True(t, ecKey.PublicKey.Equal(csr.PublicKey))
}

func TestParseCertificatePEM(t *testing.T) {
	ca := newTestCA(t)
	keyPEM, err := encodeKeyPEM(ca.Key)
	require.NoError(t, err)

	tests := []struct {
		name    string
		in      []byte
		wantErr bool
	}{
		{name: "single", in: ca.CertPEM},
		{name: "after other block", in: append(append([]byte{}, keyPEM...), ca.CertPEM...)},
		{name: "with leading text", in: append([]byte("# dev CA\n"), ca.CertPEM...)},
		{name: "empty", in: nil, wantErr: true},
		{name: "only key", in: keyPEM, wantErr: true},
		{name: "bad der", in: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCertificatePEM(tt.in)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.True(t, c.Equal(ca.Cert))
		})
	}
}

func TestCAWriteFilesLoadCA(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile := filepath.Join(dir, "ca.crt")
	keyFile := filepath.Join(dir, "ca.key")
	require.NoError(t, ca.WriteFiles(certFile, keyFile))
	assertMode(t, certFile, 0o644)
	assertMode(t, keyFile, 0o600)

	loaded, err := LoadCA(certFile, keyFile)
	require.NoError(t, err)
	assert.True(t, loaded.Cert.Equal(ca.Cert))
	assert.Equal(t, ca.CertPEM, loaded.CertPEM)
	assert.True(t, ca.Key.Public().(*ecdsa.PublicKey).Equal(loaded.Key.Public()))

	// A reloaded CA must keep issuing certificates trusted under the original.
	iss, err := loaded.IssueClient("after-reload", time.Hour)
	require.NoError(t, err)
	_, err = iss.Cert.Verify(x509.VerifyOptions{
		Roots:     caPool(ca),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	assert.NoError(t, err)
}

func TestWriteFilesTightensExistingPermissions(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile := filepath.Join(dir, "ca.crt")
	keyFile := filepath.Join(dir, "ca.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("old"), 0o666))
	require.NoError(t, os.Chmod(keyFile, 0o666))

	require.NoError(t, ca.WriteFiles(certFile, keyFile))
	assertMode(t, keyFile, 0o600)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temp files may be left behind")
}

func TestLoadCAKeyFormats(t *testing.T) {
	ca := newTestCA(t)
	ecKey := ca.Key.(*ecdsa.PrivateKey)
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	require.NoError(t, err)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ecKey)
	require.NoError(t, err)

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	rsaCA := selfSignedCA(t, rsaKey)

	other := newTestCA(t)
	otherPKCS8, err := x509.MarshalPKCS8PrivateKey(other.Key)
	require.NoError(t, err)

	leaf, err := ca.IssueClient("not-a-ca", time.Hour)
	require.NoError(t, err)

	tests := []struct {
		name    string
		certPEM []byte
		keyPEM  []byte
		wantErr string
	}{
		{name: "pkcs8", certPEM: ca.CertPEM, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})},
		{name: "sec1", certPEM: ca.CertPEM, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})},
		{name: "pkcs1 rsa", certPEM: rsaCA, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})},
		{name: "mismatched key", certPEM: ca.CertPEM, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherPKCS8}), wantErr: "does not match"},
		{name: "unknown key block", certPEM: ca.CertPEM, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "OPENSSH PRIVATE KEY", Bytes: pkcs8}), wantErr: "unsupported PEM block type"},
		{name: "key not pem", certPEM: ca.CertPEM, keyPEM: []byte("nope"), wantErr: "no PEM block"},
		{name: "cert not pem", certPEM: []byte("nope"), keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), wantErr: "no CERTIFICATE"},
		{name: "leaf is not a CA", certPEM: leaf.CertPEM, keyPEM: leaf.KeyPEM, wantErr: "not a CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			certFile := filepath.Join(dir, "ca.crt")
			keyFile := filepath.Join(dir, "ca.key")
			require.NoError(t, os.WriteFile(certFile, tt.certPEM, 0o644))
			require.NoError(t, os.WriteFile(keyFile, tt.keyPEM, 0o600))

			loaded, err := LoadCA(certFile, keyFile)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			_, err = loaded.IssueClient("w", time.Hour)
			assert.NoError(t, err)
		})
	}

	t.Run("missing files", func(t *testing.T) {
		dir := t.TempDir()
		_, err := LoadCA(filepath.Join(dir, "nope.crt"), filepath.Join(dir, "nope.key"))
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestIssuedWriteFiles(t *testing.T) {
	ca := newTestCA(t)
	iss, err := ca.IssueServer([]string{"localhost"}, time.Hour)
	require.NoError(t, err)

	dir := t.TempDir()
	certFile := filepath.Join(dir, "server.crt")
	keyFile := filepath.Join(dir, "server.key")
	require.NoError(t, iss.WriteFiles(certFile, keyFile))
	assertMode(t, certFile, 0o644)
	assertMode(t, keyFile, 0o600)

	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	require.NotEmpty(t, pair.Certificate)
	assert.Equal(t, Fingerprint(iss.Cert), FingerprintDER(pair.Certificate[0]))

	err = iss.WriteFiles(filepath.Join(dir, "missing", "c.crt"), filepath.Join(dir, "missing", "c.key"))
	assert.Error(t, err)
}

func makeCSR(t *testing.T, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// spliceSignature returns the CSR body of tbsFrom carrying the signature of
// sigFrom, re-encoded as valid DER.
func spliceSignature(t *testing.T, tbsFrom, sigFrom []byte) []byte {
	t.Helper()
	type csrDER struct {
		TBS asn1.RawValue
		Alg asn1.RawValue
		Sig asn1.BitString
	}
	var body, donor csrDER
	_, err := asn1.Unmarshal(tbsFrom, &body)
	require.NoError(t, err)
	_, err = asn1.Unmarshal(sigFrom, &donor)
	require.NoError(t, err)
	body.Sig = donor.Sig
	out, err := asn1.Marshal(body)
	require.NoError(t, err)
	return out
}

// selfSignedCA builds a CA certificate for an arbitrary key, since NewCA only
// ever generates ECDSA keys.
func selfSignedCA(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	serial, err := newSerial()
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "RSA CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, want, fi.Mode().Perm(), "mode of %s", filepath.Base(path))
}
