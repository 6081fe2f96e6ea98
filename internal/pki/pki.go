// Package pki issues and inspects the X.509 material the gateway uses: a
// development CA, server certificates, worker client certificates, CSR
// signing for enrollment, and certificate fingerprints.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"

	"github.com/worker-gateway/gateway/internal/atomicfile"
	"github.com/worker-gateway/gateway/problem"
)

const (
	pemTypeCertificate = "CERTIFICATE"
	pemTypePrivateKey  = "PRIVATE KEY"
	pemTypeECKey       = "EC PRIVATE KEY"
	pemTypeRSAKey      = "RSA PRIVATE KEY"
	pemTypeCSR         = "CERTIFICATE REQUEST"
	// Emitted by some older tools (e.g. Netscape-era and Java keytool).
	pemTypeCSRLegacy = "NEW CERTIFICATE REQUEST"

	caValidity = 10 * 365 * 24 * time.Hour

	// Backdating NotBefore keeps a freshly issued certificate usable by peers
	// whose clocks run slightly behind ours.
	clockSkew = time.Minute

	// RSA keys must be at least minRSABits; above maxRSABits verifying a
	// signature costs enough to be a way to load the gateway.
	minRSABits = 2048
	maxRSABits = 8192
)

// ErrBadCSR is wrapped by every error SignCSR returns for a request that is
// malformed, badly signed or uses an unacceptable key; problem.PublicText
// gives the reason a requester may read.
var ErrBadCSR = errors.New("pki: bad certificate signing request")

// Fingerprint returns the lowercase hex SHA-256 of the certificate's DER
// bytes — the worker identity key stored in the database.
func Fingerprint(cert *x509.Certificate) string {
	return FingerprintDER(cert.Raw)
}

// FingerprintDER is Fingerprint for raw DER bytes, for callers (such as TLS
// handshake hooks) that have not parsed the certificate.
func FingerprintDER(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// CA is a certificate authority able to issue server and worker certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// Issued is a certificate with its key, both PEM-encoded, and the parsed cert.
type Issued struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA (validity 10 years, KeyUsageCertSign|CRLSign,
// IsCA, MaxPathLen 0) with a fresh ECDSA P-256 key.
func NewCA(commonName string) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("pki: CA common name must not be empty")
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// MaxPathLenZero is needed for MaxPathLen 0 to be encoded at all;
		// without it 0 means "unset". Zero forbids intermediates, so a leaked
		// leaf can never mint further certificates the gateway would trust.
		MaxPathLen:     0,
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(der)}, nil
}

// LoadCA reads a PEM certificate and a PEM private key (PKCS#8 "PRIVATE KEY",
// SEC 1 "EC PRIVATE KEY" or PKCS#1 "RSA PRIVATE KEY").
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA key: %w", err)
	}
	cert, err := ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate %s: %w", certFile, err)
	}
	// Certificates signed by a non-CA would be rejected by every verifier, so
	// fail at startup rather than on the first enrollment.
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("pki: certificate %s is not a CA certificate", certFile)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("pki: CA certificate %s lacks the certSign key usage", certFile)
	}
	key, err := parsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key %s: %w", keyFile, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("pki: CA key %s does not match certificate %s", keyFile, certFile)
	}
	// Re-encode so CertPEM holds exactly the CA certificate even when the
	// file carries comments or a bundle.
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(cert.Raw)}, nil
}

// IssueServer issues a TLS server certificate (ExtKeyUsageServerAuth) for the
// given hosts; entries that parse as IP addresses become IP SANs, the rest
// DNS SANs. NotAfter is capped at the CA's own expiry.
func (ca *CA) IssueServer(hosts []string, validity time.Duration) (*Issued, error) {
	if len(hosts) == 0 {
		return nil, errors.New("pki: server certificate needs at least one host")
	}
	tmpl := &x509.Certificate{
		// Only informational: clients match on SANs, but operators reading
		// the certificate expect to see a name.
		Subject:     pkix.Name{CommonName: hosts[0]},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if h == "" {
			return nil, errors.New("pki: empty host name")
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issueWithNewKey(tmpl, validity)
}

// IssueClient issues a worker client certificate (ExtKeyUsageClientAuth) with
// the given CommonName. NotAfter is capped at the CA's own expiry.
func (ca *CA) IssueClient(commonName string, validity time.Duration) (*Issued, error) {
	if commonName == "" {
		return nil, errors.New("pki: client common name must not be empty")
	}
	return ca.issueWithNewKey(clientTemplate(commonName), validity)
}

// SignCSR verifies a PEM CSR and issues a worker client certificate for its
// public key. Only the key is taken from the CSR: the subject, SANs and
// extensions are ignored so a worker cannot choose its own identity. Errors
// about the request itself wrap ErrBadCSR.
func (ca *CA) SignCSR(csrPEM []byte, commonName string, validity time.Duration) (*x509.Certificate, []byte, error) {
	if commonName == "" {
		return nil, nil, errors.New("pki: client common name must not be empty")
	}
	csr, err := parseCSRPEM(csrPEM)
	if err != nil {
		return nil, nil, err
	}
	// The key is checked before the signature: verifying with a key we
	// would refuse anyway (say, a huge RSA modulus) is work for nothing.
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, problem.Wrap(fmt.Errorf("%w: signature does not verify: %w", ErrBadCSR, err), "the CSR's signature does not verify")
	}
	cert, err := ca.sign(clientTemplate(commonName), csr.PublicKey, validity)
	if err != nil {
		return nil, nil, err
	}
	return cert, encodeCertPEM(cert.Raw), nil
}

// NewCSR creates an ECDSA P-256 key and a CSR for it, as a worker does when
// enrolling; it returns the PKCS#8 key PEM and the CSR PEM.
func NewCSR(commonName string) (keyPEM, csrPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: create CSR: %w", err)
	}
	keyPEM, err = encodeKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: pemTypeCSR, Bytes: der}), nil
}

// ParseCertificatePEM parses the first CERTIFICATE block, skipping any other
// blocks before it.
func ParseCertificatePEM(pemBytes []byte) (*x509.Certificate, error) {
	rest := pemBytes
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("pki: no CERTIFICATE PEM block found")
		}
		if block.Type != pemTypeCertificate {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: parse certificate: %w", err)
		}
		return cert, nil
	}
}

// WriteFiles writes the certificate (0644) and key (0600).
func (i *Issued) WriteFiles(certFile, keyFile string) error {
	return writePair(certFile, i.CertPEM, keyFile, i.KeyPEM)
}

// WriteFiles writes the CA certificate (0644) and its PKCS#8 key (0600), in
// the form LoadCA reads back.
func (ca *CA) WriteFiles(certFile, keyFile string) error {
	keyPEM, err := encodeKeyPEM(ca.Key)
	if err != nil {
		return err
	}
	return writePair(certFile, ca.CertPEM, keyFile, keyPEM)
}

func clientTemplate(commonName string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func (ca *CA) issueWithNewKey(tmpl *x509.Certificate, validity time.Duration) (*Issued, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	cert, err := ca.sign(tmpl, key.Public(), validity)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Issued{Cert: cert, CertPEM: encodeCertPEM(cert.Raw), KeyPEM: keyPEM}, nil
}

// sign fills in serial and validity window, then signs tmpl with the CA key.
func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey, validity time.Duration) (*x509.Certificate, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("pki: validity must be positive, got %v", validity)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(validity)
	// A certificate outliving its issuer would be rejected by strict
	// verifiers anyway; capping makes the real lifetime visible in the cert.
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse issued certificate: %w", err)
	}
	return cert, nil
}

func parseCSRPEM(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, problem.Wrap(ErrBadCSR, "no PEM block found")
	}
	if block.Type != pemTypeCSR && block.Type != pemTypeCSRLegacy {
		return nil, problem.Wrap(fmt.Errorf("%w: unexpected PEM block type %q", ErrBadCSR, block.Type), "the PEM block is not a CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, problem.Wrap(fmt.Errorf("%w: cannot parse request: %w", ErrBadCSR, err), "the CSR cannot be parsed")
	}
	return csr, nil
}

// checkPublicKey enforces a floor on worker key strength; anything weaker
// would make the worker's identity forgeable.
func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return problem.Wrap(ErrBadCSR, problem.Text(fmt.Sprintf("ECDSA curve %s not accepted (want P-256 or P-384)", k.Curve.Params().Name)))
		}
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < minRSABits {
			return problem.Wrap(ErrBadCSR, problem.Text(fmt.Sprintf("RSA key of %d bits is too small (want at least %d)", bits, minRSABits)))
		} else if bits > maxRSABits {
			return problem.Wrap(ErrBadCSR, problem.Text(fmt.Sprintf("RSA key of %d bits is too large (want at most %d)", bits, maxRSABits)))
		}
	case ed25519.PublicKey:
	default:
		return problem.Wrap(fmt.Errorf("%w: unsupported public key type %T", ErrBadCSR, pub), "unsupported public key type (want ECDSA, RSA or Ed25519)")
	}
	return nil
}

func parsePrivateKeyPEM(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case pemTypePrivateKey:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case pemTypeECKey:
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case pemTypeRSAKey:
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block type %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", key)
	}
	return signer, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate key: %w", err)
	}
	return key, nil
}

// newSerial returns a random positive 128-bit serial; randomness (rather than
// a counter) keeps serials unique without any shared state between issuers.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("pki: generate serial number: %w", err)
		}
		// RFC 5280 requires a positive serial.
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificate, Bytes: der})
}

func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemTypePrivateKey, Bytes: der}), nil
}

// writePair writes the key first so that a crash never leaves a certificate
// on disk whose key is missing.
func writePair(certFile string, certPEM []byte, keyFile string, keyPEM []byte) error {
	if err := atomicfile.Write(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := atomicfile.Write(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
