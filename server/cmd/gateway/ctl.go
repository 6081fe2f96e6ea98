package main

// gateway ctl: an operator's client for the REST API, built on the
// generated client. `gateway admin` talks to the database directly (for
// bootstrap); ctl needs only a URL and an API token.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/envfile"
	"github.com/worker-gateway/gateway/internal/tlsclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

const ctlLong = `Connection flags go anywhere on the line; each also comes from its environment variable
(-url: GATEWAY_URL, -token: GATEWAY_TOKEN, -ca: GATEWAY_CA or CA_CERT). --env FILE reads
KEY=value lines (e.g. .dev/env, written by make run) with the same names: it wins over the
environment, flags win over it.`

// ctlOptions are the connection and output flags every ctl command takes.
type ctlOptions struct {
	url, token, ca, envFile string
	json                    bool
}

// register adds the options to fs; ctl and each of its commands define
// them, bound to the same variables, so they go anywhere on the line.
func (o *ctlOptions) register(fs *flagSet) {
	fs.StringVar(&o.url, "url", "", "gateway base URL, e.g. https://127.0.0.1:8443")
	fs.StringVar(&o.token, "token", "", "API token")
	fs.StringVar(&o.ca, "ca", "", "CA certificate PEM to trust for the gateway (default: the system roots)")
	fs.alias("ca", "CA_CERT")
	fs.StringVar(&o.envFile, "env", "", "KEY=value file with GATEWAY_URL, GATEWAY_TOKEN, CA_CERT (e.g. .dev/env)")
	fs.BoolVar(&o.json, "json", false, "print the API's JSON instead of tables")
}

// sources are where ctl flags not on the command line come from: the
// --env file, then the environment.
func (o *ctlOptions) sources([]*flagSet) ([]lookupFunc, error) {
	envFile, from := o.envFile, "--env"
	if envFile == "" {
		envFile, from = os.Getenv(envVarName("env")), "$"+envVarName("env")
	}
	if envFile == "" {
		return []lookupFunc{osEnv}, nil
	}
	vars, err := envfile.Read(envFile)
	if err != nil {
		return nil, fmt.Errorf("%s names a KEY=value file: %w", from, err)
	}
	return []lookupFunc{vars.Lookup, osEnv}, nil
}

// check reports the connection settings that are missing.
func (o *ctlOptions) check() error {
	switch {
	case o.url == "":
		return usageError{"no gateway URL: set --url, $GATEWAY_URL or --env FILE"}
	case o.token == "":
		return usageError{"no API token: set --token, $GATEWAY_TOKEN or --env FILE"}
	}
	return nil
}

// newAPIClient builds the generated client: TLS trusting caFile (or the
// system roots), a bearer token on every request. The timeout is above
// the longest log-follow wait the API allows (60 s).
func newAPIClient(baseURL, token, caFile string) (*apiclient.ClientWithResponses, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		var err error
		if tlsConfig.RootCAs, err = tlsclient.ReadCAs(caFile, false); err != nil {
			return nil, err
		}
	}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: tlsclient.Transport(tlsConfig)}
	return apiclient.NewClientWithResponses(strings.TrimRight(baseURL, "/"),
		apiclient.WithHTTPClient(hc),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
}

// tlsHint adds what to do when the gateway's certificate is not trusted,
// the usual first stumble against a gateway with a private CA.
func tlsHint(err error) error {
	if tlsclient.Untrusted(err) {
		return fmt.Errorf("%w\nhint: the gateway's certificate is not trusted; pass --ca FILE (or set $GATEWAY_CA or $CA_CERT) "+
			"naming the CA certificate that signed it (make run writes CA_CERT to .dev/env)", err)
	}
	return err
}

// ctl runs one command against the API.
type ctl struct {
	api         *apiclient.ClientWithResponses
	out, errOut io.Writer
	json        bool
	// url and ca are the connection settings, for the commands printed
	// for a worker to reach the same gateway.
	url, ca string
}

// ctlRun runs one ctl command with its positional arguments.
type ctlRun func(ctx context.Context, c *ctl, args []string) error

// ctlLeaf makes a row of the table from a ctl command: the connection
// flags are added to its own, and it runs with a client built from them.
func (a *cli) ctlLeaf(o *ctlOptions, name, args, short string, setup func(fs *flagSet) ctlRun) *command {
	return &command{name: name, args: args, short: short, setup: func(fs *flagSet) execFunc {
		o.register(fs)
		run := setup(fs)
		return func(ctx context.Context, positional []string) error {
			if err := o.check(); err != nil {
				return err
			}
			api, err := newAPIClient(o.url, o.token, o.ca)
			if err != nil {
				return err
			}
			return tlsHint(run(ctx, &ctl{api: api, out: a.stdout, errOut: a.stderr, json: o.json, url: o.url, ca: o.ca}, positional))
		}
	}}
}

// ProblemError is an application/problem+json answer.
type ProblemError struct{ Problem apiclient.Problem }

func (e *ProblemError) Error() string { return formatProblem(e.Problem) }

// problemError decodes an error answer; a body that is not a problem (a
// proxy's HTML page, say) still gives a readable error.
func problemError(status int, requestID string, body []byte) error {
	var p apiclient.Problem
	if json.Unmarshal(body, &p) != nil || p.Title == "" {
		detail := strings.Join(strings.Fields(string(body)), " ")
		if len(detail) > 200 {
			detail = detail[:200] + "…"
		}
		p = apiclient.Problem{Title: http.StatusText(status), Code: fmt.Sprintf("HTTP %d", status), Status: status}
		if detail != "" {
			p.Detail = &detail
		}
	}
	if (p.RequestId == nil || *p.RequestId == "") && requestID != "" {
		p.RequestId = &requestID
	}
	return &ProblemError{p}
}

// formatProblem renders "<title> (<code>): <detail> [request <id>]",
// leaving out what the problem does not have.
func formatProblem(p apiclient.Problem) string {
	var b strings.Builder
	b.WriteString(p.Title)
	if p.Code != "" {
		fmt.Fprintf(&b, " (%s)", p.Code)
	}
	if p.Detail != nil && *p.Detail != "" {
		fmt.Fprintf(&b, ": %s", *p.Detail)
	}
	if p.RequestId != nil && *p.RequestId != "" {
		fmt.Fprintf(&b, " [request %s]", *p.RequestId)
	}
	return b.String()
}

// Argument and flag helpers.

func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.UUID{}, usageError{fmt.Sprintf("bad %s id %q", what, s)}
	}
	return id, nil
}

// optionalID parses a flag's id, nil when the flag is empty.
func optionalID(what, s string) (*uuid.UUID, error) {
	if s == "" {
		return nil, nil
	}
	id, err := parseID(what, s)
	return &id, err
}

func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func checkActive(active string) error {
	if active != "" && active != "cancel" && active != "drain" {
		return usageError{fmt.Sprintf("--active must be cancel or drain, not %q", active)}
	}
	return nil
}

// page is the paging flags of a list command.
type page struct {
	limit  *int
	cursor *string
}

func pageFlags(fs *flagSet) page {
	return page{fs.Int("limit", 0, "page size (0: the API's default)"), fs.String("cursor", "", "continue from a next_cursor")}
}

// params returns the API's optional limit and cursor.
func (p page) params() (*int, *string) {
	var l *int
	var c *string
	if *p.limit > 0 {
		l = p.limit
	}
	if *p.cursor != "" {
		c = p.cursor
	}
	return l, c
}

// jsonArg reads a JSON object given inline or, as @FILE, from a file.
func jsonArg(flagName, v string) (*json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	data := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, err
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, usageError{fmt.Sprintf("--%s: not a JSON object: %v", flagName, err)}
	}
	raw := json.RawMessage(data)
	return &raw, nil
}

func orgAndWorker(org, worker string) (orgID, workerID uuid.UUID, err error) {
	if orgID, err = parseID("organization", org); err != nil {
		return
	}
	workerID, err = parseID("worker", worker)
	return
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var items []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}
