// This file holds Check: one authenticated call that tells an operator
// whether the gateway accepts the worker, without leasing anything.

package workerclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// ErrNotEnrolled is returned by Check when the worker's StateDir holds no
// certificate yet: Run enrolls first, Check never does (it would use up the
// token).
var ErrNotEnrolled = errors.New("workerclient: not enrolled yet")

// CheckResult is what Check learned.
type CheckResult struct {
	// CommonName is the subject common name of the certificate the worker
	// presented: its worker id when the gateway issued it by enrollment.
	// Empty when the runtime cannot tell (Config.HTTPClient).
	CommonName string
}

// Check makes one call to the gateway with the worker's identity and
// reports whether the gateway accepts it: a heartbeat for no lease, which
// leases nothing, renews nothing and changes nothing but the worker's
// last-seen time (no capabilities are sent, so those advertised stay). It is
// not retried: the error is the first answer's (an *APIError, a TLS or a
// transport error).
func (w *Worker) Check(ctx context.Context) (CheckResult, error) {
	var res CheckResult
	if w.id != nil {
		if !w.id.enrolled() {
			return res, fmt.Errorf("%w: StateDir %s holds no certificate; the worker enrolls when it runs",
				ErrNotEnrolled, w.cfg.StateDir)
		}
		res.CommonName, _, _ = w.id.state()
	} else {
		res.CommonName = w.certificateName()
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := w.client.HeartbeatWorkerWithResponse(ctx, apiclient.WorkerHeartbeatRequest{Leases: []apiclient.LeaseRef{}})
	if err != nil {
		return res, fmt.Errorf("check: %w", err)
	}
	if err := checkResponse("check", resp.HTTPResponse, resp.Body); err != nil {
		return res, err
	}
	return res, nil
}

// certificateName is the common name of the configured client certificate,
// or "" when it cannot be read here.
func (w *Worker) certificateName() string {
	var cert tls.Certificate
	switch {
	case w.cfg.HTTPClient != nil:
		return ""
	case w.cfg.TLSConfig != nil && len(w.cfg.TLSConfig.Certificates) > 0:
		cert = w.cfg.TLSConfig.Certificates[0]
	case w.cfg.CertFile != "":
		var err error
		if cert, err = tls.LoadX509KeyPair(w.cfg.CertFile, w.cfg.KeyFile); err != nil {
			return ""
		}
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	if cert.Leaf == nil {
		return ""
	}
	return cert.Leaf.Subject.CommonName
}
