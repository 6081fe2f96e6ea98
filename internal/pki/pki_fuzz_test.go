package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net"
	"testing"
	"time"
)

func fuzzCA(f *testing.F) *CA {
	f.Helper()
	ca, err := NewCA("fuzz CA")
	if err != nil {
		f.Fatal(err)
	}
	return ca
}

func csrPEMFor(f *testing.F, key crypto.Signer, tmpl *x509.CertificateRequest, pemType string) []byte {
	f.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		f.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
}

// mutateCSR flips one bit of the CSR's signature so it no longer verifies.
func mutateCSR(f *testing.F, csrPEM []byte) []byte {
	f.Helper()
	block, _ := pem.Decode(csrPEM)
	der := bytes.Clone(block.Bytes)
	der[len(der)-3] ^= 0x01
	return pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der})
}

func checkFingerprint(t *testing.T, cert *x509.Certificate) {
	t.Helper()
	fp := Fingerprint(cert)
	if b, err := hex.DecodeString(fp); err != nil || len(b) != 32 || hex.EncodeToString(b) != fp {
		t.Fatalf("fingerprint %q is not 64 lowercase hex digits", fp)
	}
	if fp != FingerprintDER(cert.Raw) {
		t.Fatalf("Fingerprint and FingerprintDER differ")
	}
}

// FuzzParseCertificatePEM: never panics; what it returns is the first
// CERTIFICATE block of the input, and re-encoding it gives the same
// certificate and fingerprint.
func FuzzParseCertificatePEM(f *testing.F) {
	ca := fuzzCA(f)
	issued, err := ca.IssueClient("worker-1", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	_, csr, err := NewCSR("w")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM)
	f.Add(issued.CertPEM)
	f.Add(append(append(bytes.Clone(issued.KeyPEM), csr...), issued.CertPEM...)) // other blocks first
	f.Add(append(bytes.Clone(issued.CertPEM), ca.CertPEM...))
	f.Add(issued.CertPEM[:len(issued.CertPEM)/2])
	f.Add(csr)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cert, err := ParseCertificatePEM(data)
		if err != nil {
			if cert != nil {
				t.Fatalf("error %v with a certificate", err)
			}
			return
		}
		if cert == nil {
			t.Fatal("nil certificate without an error")
		}
		checkFingerprint(t, cert)
		// It is the first CERTIFICATE block's content.
		rest := data
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				t.Fatal("accepted input has no CERTIFICATE block")
			}
			if block.Type == "CERTIFICATE" {
				if !bytes.Equal(block.Bytes, cert.Raw) {
					t.Fatal("returned certificate is not the first CERTIFICATE block")
				}
				break
			}
		}
		again, err := ParseCertificatePEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
		if err != nil {
			t.Fatalf("re-encoded certificate does not parse: %v", err)
		}
		if Fingerprint(again) != Fingerprint(cert) || !again.Equal(cert) {
			t.Fatal("re-encoded certificate differs")
		}
	})
}

// FuzzSignCSR: never panics; anything it refuses wraps ErrBadCSR and comes
// with no certificate; anything it signs is a verifying, acceptable CSR, and
// the certificate carries the CSR's key but the CA's choice of identity.
func FuzzSignCSR(f *testing.F) {
	ca := fuzzCA(f)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)

	_, realCSR, err := NewCSR("worker-from-csr")
	if err != nil {
		f.Fatal(err)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		f.Fatal(err)
	}
	greedy := &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"root"}},
		DNSNames:    []string{"gateway.example"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	plain := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w"}}
	issued, err := ca.IssueClient("x", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	seeds := []struct {
		csr []byte
		ok  bool
	}{
		{realCSR, true},
		{mutateCSR(f, realCSR), false},
		{csrPEMFor(f, p256, greedy, "CERTIFICATE REQUEST"), true},
		{csrPEMFor(f, p256, plain, "NEW CERTIFICATE REQUEST"), true},
		{csrPEMFor(f, edKey, plain, "CERTIFICATE REQUEST"), true},
		{csrPEMFor(f, p224, plain, "CERTIFICATE REQUEST"), false},
		{csrPEMFor(f, rsa1024, plain, "CERTIFICATE REQUEST"), false},
		{issued.CertPEM, false},
		{realCSR[:len(realCSR)/2], false},
		{[]byte("garbage"), false},
		{nil, false},
	}
	for i, s := range seeds {
		cert, _, err := ca.SignCSR(s.csr, "worker-1", time.Hour)
		if (err == nil) != s.ok || (cert != nil) != s.ok {
			f.Fatalf("seed %d: SignCSR = %v, %v; want ok=%v", i, cert != nil, err, s.ok)
		}
		f.Add(s.csr)
	}
	f.Fuzz(func(t *testing.T, csrPEM []byte) {
		cert, certPEM, err := ca.SignCSR(csrPEM, "worker-1", time.Hour)
		if err != nil {
			if !errors.Is(err, ErrBadCSR) {
				t.Fatalf("error %v does not wrap ErrBadCSR", err)
			}
			if cert != nil || certPEM != nil {
				t.Fatalf("error %v came with a certificate", err)
			}
			return
		}
		if cert == nil || certPEM == nil {
			t.Fatal("no certificate and no error")
		}
		// Only a well-formed, verifying CSR with an acceptable key is signed.
		csr, err := parseCSRPEM(csrPEM)
		if err != nil {
			t.Fatalf("signed a CSR that does not parse: %v", err)
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("signed a CSR whose signature does not verify: %v", err)
		}
		if err := checkPublicKey(csr.PublicKey); err != nil {
			t.Fatalf("signed a CSR with an unacceptable key: %v", err)
		}
		type equaler interface{ Equal(crypto.PublicKey) bool }
		if k, ok := cert.PublicKey.(equaler); !ok || !k.Equal(csr.PublicKey) {
			t.Fatal("certificate key is not the CSR's key")
		}
		// The identity is the CA's choice, never the CSR's.
		if cert.Subject.CommonName != "worker-1" || len(cert.Subject.Organization) != 0 ||
			len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.URIs)+len(cert.EmailAddresses) != 0 || cert.IsCA {
			t.Fatalf("certificate took identity from the CSR: %+v", cert.Subject)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("issued certificate does not verify as a client certificate: %v", err)
		}
		parsed, err := ParseCertificatePEM(certPEM)
		if err != nil || Fingerprint(parsed) != Fingerprint(cert) {
			t.Fatalf("returned PEM is not the certificate: %v", err)
		}
		checkFingerprint(t, cert)
	})
}
