// Package tlsclient is the TLS side of the HTTP clients that call a
// gateway: gateway ctl's, gateway healthcheck's and the worker runtime's.
// It reads the CA file that signs the gateway's certificate and builds the
// transport those clients share.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// ReadCAs returns a pool of the PEM certificates in file: alone, or added
// to the system roots when withSystemRoots is set. A file without a
// certificate is an error; a file that cannot be read wraps the os error
// (errors.Is(err, fs.ErrNotExist) holds for a missing one).
func ReadCAs(file string, withSystemRoots bool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pool *x509.CertPool
	if withSystemRoots {
		pool, _ = x509.SystemCertPool()
	}
	if pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// Untrusted reports whether err is the server's certificate failing
// verification: signed by an unknown authority, for another host name,
// or invalid (expired, say). Against a gateway with a private CA it is the
// usual first stumble: the client was not given that CA.
func Untrusted(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// Transport returns the transport of calls to a gateway: the proxy from
// the environment and the dial, handshake and idle timeouts of
// http.DefaultTransport, tlsCfg, and HTTP/2, which a transport with its own
// TLSClientConfig does not attempt unless told to.
func Transport(tlsCfg *tls.Config) *http.Transport {
	var tr *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		tr = dt.Clone()
	} else {
		tr = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
		}
	}
	tr.TLSClientConfig = tlsCfg
	tr.ForceAttemptHTTP2 = true
	return tr
}
