package workerclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/worker-gateway/gateway/internal/tlsclient"
)

const (
	// An HTTP/2 connection silent this long is pinged, and closed when the
	// ping goes unanswered for h2PingTimeout: a half-open connection would
	// otherwise swallow every multiplexed poll and heartbeat until they time
	// out, one after the other.
	h2SendPingTimeout = 15 * time.Second
	h2PingTimeout     = 10 * time.Second
	// The http.Client timeout is only a backstop: every call has its own,
	// shorter deadline, and a long-poll's is wait_seconds plus pollMargin.
	clientTimeoutSlack = 15 * time.Second
)

// NewHTTPClient returns the mTLS client a worker uses: TLS 1.3 at least,
// HTTP/2, the certificate from cfg.CertFile and cfg.KeyFile (re-read when the
// files change, so a renewed certificate is used by new connections) and the
// gateway trusted through cfg.CAFile — or cfg.TLSConfig when set. With
// neither CertFile nor KeyFile but a StateDir, it uses the enrolled
// certificate kept there (worker.pem and worker.key, re-read likewise) and
// trusts the gateway as the Worker does: cfg.CAFile, else the system roots
// plus StateDir/ca.pem. Its timeout allows a long-poll of cfg.WaitSeconds.
// cfg.HTTPClient is ignored.
func NewHTTPClient(cfg Config) (*http.Client, error) {
	tlsCfg, err := clientTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: newWorkerTransport(tlsCfg), Timeout: clientTimeout(cfg.WaitSeconds)}, nil
}

// newWorkerTransport is the transport of calls to the gateway: the shared
// gateway transport (HTTP/2, the proxy and timeouts of
// http.DefaultTransport) with HTTP/2 pings.
func newWorkerTransport(tlsCfg *tls.Config) *http.Transport {
	tr := tlsclient.Transport(tlsCfg)
	tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: h2SendPingTimeout, PingTimeout: h2PingTimeout}
	return tr
}

// clientTimeout is the backstop timeout of a client whose long-polls wait
// waitSeconds (0: the default).
func clientTimeout(waitSeconds int) time.Duration {
	if waitSeconds <= 0 {
		waitSeconds = defaultWaitSeconds
	}
	return time.Duration(waitSeconds)*time.Second + pollMargin + clientTimeoutSlack
}

func clientTLSConfig(cfg Config) (*tls.Config, error) {
	var c *tls.Config
	if cfg.TLSConfig != nil {
		c = cfg.TLSConfig.Clone()
	} else {
		certFile, keyFile := cfg.CertFile, cfg.KeyFile
		if certFile == "" && keyFile == "" && cfg.StateDir != "" {
			certFile, keyFile = filepath.Join(cfg.StateDir, StateCertFile), filepath.Join(cfg.StateDir, StateKeyFile)
		}
		if certFile == "" || keyFile == "" {
			return nil, errors.New("workerclient: CertFile and KeyFile are required for mTLS")
		}
		kp, err := newKeyPairReloader(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		roots, err := gatewayRoots(cfg)
		if err != nil {
			return nil, err
		}
		c = &tls.Config{GetClientCertificate: kp.getClientCertificate, RootCAs: roots}
	}
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return c, nil
}

// gatewayRoots is the pool of CAs trusted to sign the gateway's certificate:
// cfg.CAFile's alone when set; else, with a StateDir holding ca.pem (written
// by enrollment), the system roots plus that CA; else nil, the system roots.
func gatewayRoots(cfg Config) (*x509.CertPool, error) {
	if cfg.CAFile != "" {
		pool, err := tlsclient.ReadCAs(cfg.CAFile, false)
		if err != nil {
			return nil, fmt.Errorf("workerclient: CA file: %w", err)
		}
		return pool, nil
	}
	if cfg.StateDir == "" {
		return nil, nil
	}
	pool, err := tlsclient.ReadCAs(filepath.Join(cfg.StateDir, StateCAFile), true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workerclient: state CA file: %w", err)
	}
	return pool, nil
}

// keyPairReloader serves the client certificate for each TLS handshake and
// reloads it when either file changes. A pair that fails to load (say, the
// files are being rewritten) keeps the previous one in use.
type keyPairReloader struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	certStat fileStamp
	keyStat  fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

func newKeyPairReloader(certFile, keyFile string) (*keyPairReloader, error) {
	k := &keyPairReloader{certFile: certFile, keyFile: keyFile}
	if err := k.reload(); err != nil {
		return nil, fmt.Errorf("workerclient: client certificate: %w", err)
	}
	return k, nil
}

// reload loads the pair if a file changed since the last load. Called with
// k.mu held, or before k is shared.
func (k *keyPairReloader) reload() error {
	cs, err := stamp(k.certFile)
	if err != nil {
		return err
	}
	ks, err := stamp(k.keyFile)
	if err != nil {
		return err
	}
	if k.cert != nil && cs == k.certStat && ks == k.keyStat {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return err
	}
	k.cert, k.certStat, k.keyStat = &cert, cs, ks
	return nil
}

func (k *keyPairReloader) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	_ = k.reload() // on failure keep serving the pair that worked
	return k.cert, nil
}

// newForeignHTTPClient returns the client of uploads to URLs other than the
// gateway's (presigned object-storage URLs): it never presents the worker's
// certificate, trusts the system roots plus cfg.CAFile (or cfg.TLSConfig's
// RootCAs, or the system roots when it has none), honours the proxy
// environment and has no overall timeout (each upload has a deadline).
func newForeignHTTPClient(cfg Config) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case cfg.TLSConfig != nil:
		if cfg.TLSConfig.RootCAs != nil {
			tlsCfg.RootCAs = cfg.TLSConfig.RootCAs.Clone()
		}
	case cfg.CAFile != "":
		pool, err := tlsclient.ReadCAs(cfg.CAFile, true)
		if err != nil {
			return nil, fmt.Errorf("workerclient: CA file: %w", err)
		}
		tlsCfg.RootCAs = pool
	}
	return &http.Client{Transport: tlsclient.Transport(tlsCfg)}, nil
}
