package faults

import (
	"crypto/tls"
	"io"
	"log"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/stretchr/testify/require"
)

// startProxy puts a recording reverse proxy in front of the cluster's
// replicas for a worker process (StartProxy through the cluster's load
// balancer).
func (w *Workload) startProxy(name string, cert tls.Certificate) (string, int) {
	w.t.Helper()
	return w.StartProxy(name, cert, w.cl.dial)
}

// StartProxy puts a recording reverse proxy in front of the replicas for a
// worker process: the process talks TLS to the proxy, the proxy presents the
// worker's certificate to the replica dial picks, and every call goes into
// the history like those of in-process workers. Returns its URL and the
// history's client id of the calls it forwards.
func (w *Workload) StartProxy(name string, cert tls.Certificate, dial DialFunc) (string, int) {
	w.t.Helper()
	issued, err := w.g.CA.IssueServer([]string{"127.0.0.1"}, time.Hour)
	require.NoError(w.t, err)
	serverCert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	require.NoError(w.t, err)
	id := &identity{Name: name, Cert: cert}
	tr := id.transport(w.g, dial)
	w.transports = append(w.transports, tr)
	target := &url.URL{Scheme: "https", Host: "localhost"} // the dialer picks the replica
	client := w.h.NewClient(name)
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: w.h.Transport(client, tr),
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	srv := httptest.NewUnstartedServer(proxy)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS13}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	w.t.Cleanup(srv.Close)
	return srv.URL, client
}
