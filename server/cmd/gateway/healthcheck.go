package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/worker-gateway/gateway/internal/tlsclient"
)

const healthcheckLong = `Asks a gateway whether it is ready (GET /readyz): exit status 0 when it answers 200, 1
otherwise. For container health checks — the image has no shell or curl. Without -url it
asks https://127.0.0.1:PORT/readyz, PORT taken from -listen (GATEWAY_LISTEN, as serve reads it).`

// healthcheckFlags are what `gateway healthcheck` needs to reach /readyz.
type healthcheckFlags struct {
	url                string
	listen             string
	caFile             string
	insecureSkipVerify bool
	timeout            time.Duration
}

func healthcheckCommand(a *cli) *command {
	return &command{name: "healthcheck", short: "exit 0 when a gateway answers /readyz with 200, else 1 (for container health checks)",
		long: healthcheckLong,
		setup: func(fs *flagSet) execFunc {
			h := &healthcheckFlags{}
			fs.StringVar(&h.url, "url", "", "the readiness URL, or the gateway's base URL (then its /readyz); empty: https://127.0.0.1:PORT/readyz with PORT from -listen")
			fs.StringVar(&h.listen, "listen", "127.0.0.1:8443", "the gateway's listen address (serve's -listen), for the default -url")
			fs.StringVar(&h.caFile, "ca-file", "", "CA certificate (PEM) that signed the gateway's server certificate; empty: the system's roots")
			fs.BoolVar(&h.insecureSkipVerify, "insecure-skip-verify", false, "do not verify the server certificate; only for a loopback -url (a container probing itself)")
			fs.DurationVar(&h.timeout, "timeout", 3*time.Second, "give up after this long")
			return func(ctx context.Context, _ []string) error {
				return h.run(ctx, a.stdout)
			}
		}}
}

func (h *healthcheckFlags) run(ctx context.Context, stdout io.Writer) error {
	target, err := h.target()
	if err != nil {
		return err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if h.insecureSkipVerify {
		if !isLoopbackHost(target.Hostname()) {
			return usageError{"-insecure-skip-verify is only for a loopback -url (127.0.0.1, ::1, localhost)"}
		}
		tc.InsecureSkipVerify = true
	}
	if h.caFile != "" {
		if tc.RootCAs, err = tlsclient.ReadCAs(h.caFile, false); err != nil {
			return fmt.Errorf("-ca-file: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return err
	}
	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil},
		// A redirect is not readiness.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s answered %d: %s", target, res.StatusCode, body)
	}
	fmt.Fprintf(stdout, "ready: %s\n", target)
	return nil
}

// target is -url, or the loopback address of -listen's port.
func (h *healthcheckFlags) target() (*url.URL, error) {
	if h.url != "" {
		u, err := url.Parse(h.url)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, usageError{fmt.Sprintf("-url %q: an http(s) URL", h.url)}
		}
		// The gateway's base URL (as ctl's GATEWAY_URL names it) means its /readyz.
		if u.Path == "" || u.Path == "/" {
			u.Path = "/readyz"
		}
		return u, nil
	}
	host, port, err := net.SplitHostPort(h.listen)
	if err != nil {
		return nil, usageError{fmt.Sprintf("-listen %q: %v", h.listen, err)}
	}
	// A wildcard listener is reached on loopback from inside its container.
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(host, port), Path: "/readyz"}, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
