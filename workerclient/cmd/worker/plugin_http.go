package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// http-probe: GETs each URL and reports it as a url asset with its status,
// Server header and HTML title, served_by its port asset. For https it
// inspects the server's leaf certificate, without trusting it: the url's
// details name it (the gateway compares them between scans), it is reported
// as a certificate asset that covers each of its DNS names, and a threat
// with vulnerability details is reported on the url asset when the
// certificate is expired, self-signed or expires within 14 days.
//
// The URLs are input.urls when given; otherwise the scan's targets that are
// http(s) URLs and one per port asset: https for ports 443 and 8443, http for
// 80 and 8080, and for any other port https, then http if https gets no
// answer.
//
// Input: {"urls": ["https://…", …], "timeout_ms": 10000} (per request,
// redirects included).

const (
	httpDefaultTimeout = 10 * time.Second
	httpConcurrency    = 8
	httpMaxRedirects   = 3
	httpMaxBody        = 64 << 10 // read for the title
	httpMaxTitle       = 200      // characters
	certExpiryWarning  = 14 * 24 * time.Hour
)

type httpProbeInput struct {
	URLs      []string `json:"urls"`
	TimeoutMS int      `json:"timeout_ms"`
}

// httpTarget is one endpoint: URLs to try in turn until one answers.
type httpTarget []string

func httpProbePlugin(ctx context.Context, c *Call) error {
	var in httpProbeInput
	if err := decodeInput(c, &in); err != nil {
		return err
	}
	timeout, err := timeoutInput(in.TimeoutMS, httpDefaultTimeout)
	if err != nil {
		return err
	}
	targets, err := httpTargets(c, in)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		c.Log.Info("nothing to probe: no urls, URL targets or port assets")
		c.Printf("http-probe: nothing to probe (no urls, URL targets or port assets)")
		return nil
	}
	c.Printf("http-probe: probing %d endpoints (timeout %s per request)", len(targets), timeout)

	transport := &http.Transport{
		Proxy:       nil, // a scanner connects directly
		DialContext: (&net.Dialer{Timeout: timeout}).DialContext,
		// We report the certificate rather than trust it: verification
		// would hide exactly the servers worth reporting.
		TLSClientConfig:        &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10}, //nolint:gosec // see above
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
		DisableKeepAlives:      true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) > httpMaxRedirects {
				return http.ErrUseLastResponse // report the redirect itself
			}
			return nil
		},
	}

	var answered, threats atomic.Int64
	err = forEach(ctx, targets, httpConcurrency, func(ctx context.Context, t httpTarget) error {
		for _, u := range t {
			recs, err := probeURL(ctx, client, u, time.Now())
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.Log.Info("no HTTP answer", "url", u, "error", err)
				continue
			}
			answered.Add(1)
			threats.Add(int64(len(recs) - 1))
			return c.Emit(ctx, recs...)
		}
		return nil
	})
	c.Printf("http-probe: %d of %d endpoints answered; %d certificate findings", answered.Load(), len(targets), threats.Load())
	return err
}

// httpTargets lists the endpoints to probe, without repeats.
func httpTargets(c *Call, in httpProbeInput) ([]httpTarget, error) {
	var targets []httpTarget
	seen := map[string]bool{}
	add := func(urls ...string) {
		if !seen[urls[0]] {
			seen[urls[0]] = true
			targets = append(targets, urls)
		}
	}
	if len(in.URLs) > 0 {
		for _, s := range in.URLs {
			if !isHTTPURL(s) {
				return nil, workerclient.Permanent("bad-input", fmt.Sprintf("%q is not an http or https URL", s))
			}
			add(s)
		}
		return targets, nil
	}
	for _, t := range c.Targets {
		if t = strings.TrimSpace(t); isHTTPURL(t) {
			add(t)
		}
	}
	for _, v := range assetValues(c.Assets, "port") {
		host, ps, err := net.SplitHostPort(v)
		port, perr := strconv.Atoi(ps)
		if err != nil || perr != nil || host == "" {
			c.Log.Info("port asset is not host:port; skipped", "port", v)
			continue
		}
		switch port {
		case 443, 8443:
			add(endpointURL("https", host, port))
		case 80, 8080:
			add(endpointURL("http", host, port))
		default:
			add(endpointURL("https", host, port), endpointURL("http", host, port))
		}
	}
	return targets, nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// endpointURL is the root URL of host:port, without the scheme's default
// port, so that it matches how the same URL is usually written.
func endpointURL(scheme, host string, port int) string {
	hostport := net.JoinHostPort(host, strconv.Itoa(port))
	if scheme == "https" && port == 443 || scheme == "http" && port == 80 {
		hostport = host
		if strings.Contains(host, ":") {
			hostport = "[" + host + "]"
		}
	}
	return scheme + "://" + hostport + "/"
}

// probeURL GETs u and returns its url asset and the threats its certificate
// shows as of now; an error when u gives no HTTP answer.
func probeURL(ctx context.Context, client *http.Client, u string, now time.Time) ([]apiclient.ResultRecord, error) {
	// The first TLS handshake is u's own (later ones are redirects').
	var (
		mu   sync.Mutex
		leaf *x509.Certificate
	)
	trace := &httptrace.ClientTrace{TLSHandshakeDone: func(cs tls.ConnectionState, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil && leaf == nil && len(cs.PeerCertificates) > 0 {
			leaf = cs.PeerCertificates[0]
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", softwareVersion)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, httpMaxBody)) // a title may be had from a partial body

	details := map[string]any{
		"status": resp.StatusCode,
		"server": resp.Header.Get("Server"),
		"title":  htmlTitle(body),
	}
	if final := resp.Request.URL.String(); final != u {
		details["final_url"] = final
	}
	asset := apiclient.AssetRef{Type: "url", Value: u}
	mu.Lock()
	cert := leaf
	mu.Unlock()
	var certRecs []apiclient.ResultRecord
	if strings.HasPrefix(u, "https:") && cert != nil {
		sum := sha256.Sum256(cert.Raw)
		fingerprint := "sha256:" + hex.EncodeToString(sum[:])
		details["certificate"] = map[string]any{
			"sha256":    fingerprint,
			"subject":   cert.Subject.String(),
			"issuer":    cert.Issuer.String(),
			"not_after": cert.NotAfter.UTC().Format(time.RFC3339),
		}
		certRecs = append(certRecs, assetRecord("certificate", fingerprint, map[string]any{
			"subject": cert.Subject.String(), "issuer": cert.Issuer.String(),
			"not_after": cert.NotAfter.UTC().Format(time.RFC3339), "dns_names": cert.DNSNames,
		}))
		for _, name := range cert.DNSNames {
			// A wildcard name is no hostname asset; it is in dns_names.
			if name, ok := hostname(name); ok {
				certRecs = append(certRecs, edgeRecord("certificate", fingerprint, apiclient.Covers, "hostname", name))
			}
		}
		certRecs = append(certRecs, certificateThreats(asset, cert, now)...)
	}
	recs := []apiclient.ResultRecord{assetRecord(asset.Type, asset.Value, details)}
	if pu, err := url.Parse(u); err == nil && pu.Hostname() != "" {
		port := pu.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[pu.Scheme]
		}
		recs = append(recs, edgeRecord("url", u, apiclient.ServedBy, "port", net.JoinHostPort(pu.Hostname(), port)))
	}
	return append(recs, certRecs...), nil
}

var titlePattern = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title`)

// htmlTitle is the document's title with entities decoded and white space
// collapsed, at most httpMaxTitle characters; "" when it has none.
func htmlTitle(body []byte) string {
	m := titlePattern.FindSubmatch(body)
	if m == nil {
		return ""
	}
	title := strings.Join(strings.Fields(html.UnescapeString(string(bytes.ToValidUTF8(m[1], nil)))), " ")
	if utf8.RuneCountInString(title) > httpMaxTitle {
		title = strings.TrimSpace(string([]rune(title)[:httpMaxTitle]))
	}
	return title
}

// certificateThreats are the threats a server's leaf certificate shows as of
// now: expired (high) or expiring within certExpiryWarning (medium), and
// self-signed (medium): its issuer is its subject and its own key verifies
// its signature.
func certificateThreats(asset apiclient.AssetRef, cert *x509.Certificate, now time.Time) []apiclient.ResultRecord {
	details := map[string]any{
		"not_after": cert.NotAfter.UTC().Format(time.RFC3339),
		"subject":   cert.Subject.String(),
		"issuer":    cert.Issuer.String(),
	}
	var recs []apiclient.ResultRecord
	switch left := cert.NotAfter.Sub(now); {
	case left < 0:
		recs = append(recs, withVulnerability(threatRecord(asset, "tls-certificate-expired", "TLS certificate expired",
			apiclient.High, details), "CWE-298", "Renew the certificate and install it on the server."))
	case left < certExpiryWarning:
		recs = append(recs, withVulnerability(threatRecord(asset, "tls-certificate-expiring", "TLS certificate expires within 14 days",
			apiclient.Medium, details), "CWE-298", "Renew the certificate before it expires."))
	}
	if isSelfSigned(cert) {
		recs = append(recs, withVulnerability(threatRecord(asset, "tls-certificate-self-signed", "Self-signed TLS certificate",
			apiclient.Medium, details), "CWE-295", "Serve a certificate issued by a certificate authority clients trust."))
	}
	return recs
}

// withVulnerability adds vulnerability details (a CWE and a remediation) to
// a threat record.
func withVulnerability(r apiclient.ResultRecord, cwe, remediation string) apiclient.ResultRecord {
	r.Vulnerability = &apiclient.Vulnerability{
		CweIds:      &[]string{cwe},
		References:  &[]string{"https://cwe.mitre.org/data/definitions/" + strings.TrimPrefix(cwe, "CWE-") + ".html"},
		Remediation: &remediation,
	}
	return r
}

func isSelfSigned(cert *x509.Certificate) bool {
	return bytes.Equal(cert.RawIssuer, cert.RawSubject) &&
		cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) == nil
}
