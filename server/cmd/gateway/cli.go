package main

// gateway ctl: an operator's client for the REST API, built on the
// generated workerclient. `gateway admin` talks to the database directly
// (for bootstrap); ctl needs only a URL and an API token.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

const ctlUsage = `gateway ctl <resource> <verb> [args] [flags]

  orgs list [--limit N] [--cursor C]
  orgs create --name NAME
  orgs get ID
  workers list [--limit N] [--cursor C]
  workers get ID
  workers create --name NAME [--type scanner|ai] [--capacity N] [--org ID]   prints the one-time enrollment token
                (--org: the organization that owns it; an organization's admin token owns it anyway)
  workers update ID [--enabled=false] [--capacity N] [--name NAME] [--active cancel|drain]
  workers revoke ID --reason TEXT
  assign ORG WORKER
  unassign ORG WORKER [--active cancel|drain] [--reason TEXT]
  grant WORKER ORG      the worker's owner lets ORG assign it
  ungrant WORKER ORG [--active cancel|drain]   withdraws that, and ORG's assignment of it
  tokens list
  tokens create --name NAME --scopes admin,producer,reader [--org ID] [--expires 720h]   prints the token once
  tokens revoke ID
  tasks list [--org ID] [--state STATE] [--type TYPE] [--limit N] [--cursor C]
  tasks get ID
  tasks cancel ID
  tasks retry ID

Connection flags (anywhere on the line):
  --url URL     gateway base URL ($GATEWAY_URL)
  --token T     API token ($GATEWAY_TOKEN)
  --ca FILE     CA certificate PEM to trust for the gateway ($CA_CERT; default: system roots)
  --env FILE    read GATEWAY_URL, GATEWAY_TOKEN and CA_CERT from a KEY=value file (e.g. .dev/env,
                written by make run); it wins over the environment, flags win over it
  --json        print the API's JSON instead of tables
`

// ctlOptions are the connection and output flags every ctl command takes.
type ctlOptions struct {
	url, token, ca, envFile string
	json                    bool
}

// register adds the options to fs, keeping values already parsed as the
// defaults (they are registered twice: before and after the command words).
func (o *ctlOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", o.url, "gateway base URL ($GATEWAY_URL)")
	fs.StringVar(&o.token, "token", o.token, "API token ($GATEWAY_TOKEN)")
	fs.StringVar(&o.ca, "ca", o.ca, "CA certificate PEM file ($CA_CERT)")
	fs.StringVar(&o.envFile, "env", o.envFile, "KEY=value file with GATEWAY_URL, GATEWAY_TOKEN, CA_CERT")
	fs.BoolVar(&o.json, "json", o.json, "print the API's JSON")
}

// resolve fills unset options: flags first, then the --env file, then the
// environment.
func (o *ctlOptions) resolve(getenv func(string) string) error {
	file := map[string]string{}
	if o.envFile != "" {
		f, err := os.Open(o.envFile)
		if err != nil {
			return err
		}
		defer f.Close()
		if file, err = parseEnvFile(f); err != nil {
			return fmt.Errorf("%s: %w", o.envFile, err)
		}
	}
	for _, v := range []struct {
		dst *string
		key string
	}{{&o.url, "GATEWAY_URL"}, {&o.token, "GATEWAY_TOKEN"}, {&o.ca, "CA_CERT"}} {
		if *v.dst == "" {
			*v.dst = file[v.key]
		}
		if *v.dst == "" {
			*v.dst = getenv(v.key)
		}
	}
	switch {
	case o.url == "":
		return errors.New("no gateway URL: set --url, $GATEWAY_URL or --env FILE")
	case o.token == "":
		return errors.New("no API token: set --token, $GATEWAY_TOKEN or --env FILE")
	}
	return nil
}

// parseEnvFile reads KEY=value lines as `make run` writes them (and as a
// shell would source them): blank lines and # comments are skipped, an
// `export ` prefix and matching quotes around the value are dropped.
func parseEnvFile(r io.Reader) (map[string]string, error) {
	vars := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want KEY=value", n)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		vars[strings.TrimSpace(key)] = value
	}
	return vars, sc.Err()
}

// newAPIClient builds the generated client: TLS trusting caFile (or the
// system roots), a bearer token on every request.
func newAPIClient(baseURL, token, caFile string) (*apiclient.ClientWithResponses, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pemBytes, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("%s: no PEM certificates", caFile)
		}
	}
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
	return apiclient.NewClientWithResponses(strings.TrimRight(baseURL, "/"),
		apiclient.WithHTTPClient(hc),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
}

// ctl runs one command against the API.
type ctl struct {
	api         *apiclient.ClientWithResponses
	out, errOut io.Writer
	json        bool
}

type runFunc func(ctx context.Context, c *ctl, args []string) error

// command is one `ctl <resource> [verb]`: its positional arguments and a
// setup that defines its flags and returns what runs once they are parsed.
type command struct {
	args  []string // names of the positional arguments, for usage
	setup func(fs *flag.FlagSet) runFunc
}

// usageError is a command line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// runCtl runs `gateway ctl args...` and returns the exit status: 0, 1 for a
// failed request (or a problem answer), 2 for a usage mistake.
func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := ctlMain(ctx, args, stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, ctlUsage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %s\n(gateway ctl -h lists the commands)\n", ue.msg)
		return 2
	}
	fmt.Fprintln(stderr, "error:", err)
	return 1
}

func ctlMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var opts ctlOptions
	// Connection flags may come before the command words...
	pre := flag.NewFlagSet("ctl", flag.ContinueOnError)
	pre.SetOutput(io.Discard)
	opts.register(pre)
	if err := pre.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	args = pre.Args()
	if len(args) == 0 || args[0] == "help" {
		return flag.ErrHelp
	}
	name, cmd := lookupCommand(args)
	if cmd == nil {
		return usageError{fmt.Sprintf("unknown command %q", strings.Join(args[:min(2, len(args))], " "))}
	}
	args = args[len(strings.Fields(name)):]

	// ...or anywhere after them, among the command's own flags.
	fs := flag.NewFlagSet("ctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.register(fs)
	run := cmd.setup(fs)
	synopsis := strings.TrimSpace("gateway ctl " + name + " " + strings.Join(cmd.args, " "))
	positional, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: %s [flags]\n", synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	if err != nil {
		return usageError{fmt.Sprintf("%s: %v", name, err)}
	}
	if len(positional) != len(cmd.args) {
		return usageError{fmt.Sprintf("usage: %s", synopsis)}
	}
	if err := opts.resolve(os.Getenv); err != nil {
		return err
	}
	api, err := newAPIClient(opts.url, opts.token, opts.ca)
	if err != nil {
		return err
	}
	return run(ctx, &ctl{api: api, out: stdout, errOut: stderr, json: opts.json}, positional)
}

// lookupCommand finds "resource verb" or a verb-less "resource" (assign).
func lookupCommand(args []string) (string, *command) {
	if len(args) >= 2 {
		if c, ok := ctlCommands[args[0]+" "+args[1]]; ok {
			return args[0] + " " + args[1], c
		}
	}
	if c, ok := ctlCommands[args[0]]; ok {
		return args[0], c
	}
	return "", nil
}

// parseInterleaved parses flags that may come before, between and after
// positional arguments (the flag package stops at the first positional).
// After a "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// flag helpers

func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.UUID{}, usageError{fmt.Sprintf("bad %s id %q", what, s)}
	}
	return id, nil
}

func isSet(fs *flag.FlagSet, name string) bool {
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

func pageFlags(fs *flag.FlagSet) (limit *int, cursor *string) {
	return fs.Int("limit", 0, "page size (0: the API's default)"), fs.String("cursor", "", "continue from a next_cursor")
}

// pageParams returns the API's optional limit and cursor.
func pageParams(limit int, cursor string) (*int, *string) {
	var l *int
	var c *string
	if limit > 0 {
		l = &limit
	}
	if cursor != "" {
		c = &cursor
	}
	return l, c
}

// finish turns a response into output: a problem becomes an error, --json
// prints the body as the API sent it (indented), otherwise human writes
// the table or fields.
func (c *ctl) finish(hr *http.Response, body []byte, human func(w io.Writer)) error {
	if hr.StatusCode < 200 || hr.StatusCode > 299 {
		return problemError(hr.StatusCode, hr.Header.Get("X-Request-Id"), body)
	}
	if c.json {
		var buf bytes.Buffer
		if json.Indent(&buf, body, "", "  ") != nil {
			buf.Reset()
			buf.Write(body)
		}
		buf.WriteByte('\n')
		_, err := c.out.Write(buf.Bytes())
		return err
	}
	human(c.out)
	return nil
}

// morePages tells a human reader how to get the next page.
func (c *ctl) morePages(next *string) {
	if next != nil && *next != "" && !c.json {
		fmt.Fprintf(c.errOut, "more: --cursor %s\n", *next)
	}
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

// The commands.

var ctlCommands map[string]*command

func init() {
	ctlCommands = map[string]*command{
		"orgs list": {setup: func(fs *flag.FlagSet) runFunc {
			limit, cursor := pageFlags(fs)
			return func(ctx context.Context, c *ctl, _ []string) error {
				l, cur := pageParams(*limit, *cursor)
				res, err := c.api.ListOrganizationsWithResponse(ctx, &apiclient.ListOrganizationsParams{Limit: l, Cursor: cur})
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
					writeOrgTable(w, res.JSON200.Items)
					c.morePages(res.JSON200.NextCursor)
				})
			}
		}},
		"orgs create": {setup: func(fs *flag.FlagSet) runFunc {
			name := fs.String("name", "", "organization name (required)")
			return func(ctx context.Context, c *ctl, _ []string) error {
				if *name == "" {
					return usageError{"orgs create needs --name"}
				}
				res, err := c.api.CreateOrganizationWithResponse(ctx, apiclient.CreateOrganizationRequest{Name: *name})
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeOrgTable(w, []apiclient.Organization{*res.JSON201}) })
			}
		}},
		"orgs get": {args: []string{"ID"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("organization", args[0])
				if err != nil {
					return err
				}
				res, err := c.api.GetOrganizationWithResponse(ctx, id)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeOrgTable(w, []apiclient.Organization{*res.JSON200}) })
			}
		}},

		"workers list": {setup: func(fs *flag.FlagSet) runFunc {
			limit, cursor := pageFlags(fs)
			return func(ctx context.Context, c *ctl, _ []string) error {
				l, cur := pageParams(*limit, *cursor)
				res, err := c.api.ListWorkersWithResponse(ctx, &apiclient.ListWorkersParams{Limit: l, Cursor: cur})
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
					writeWorkerTable(w, res.JSON200.Items)
					c.morePages(res.JSON200.NextCursor)
				})
			}
		}},
		"workers get": {args: []string{"ID"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("worker", args[0])
				if err != nil {
					return err
				}
				res, err := c.api.GetWorkerWithResponse(ctx, id)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFields(w, workerFields(*res.JSON200)) })
			}
		}},
		"workers create": {setup: func(fs *flag.FlagSet) runFunc {
			name := fs.String("name", "", "worker name (required)")
			workerType := fs.String("type", "scanner", "worker type: scanner or ai")
			capacity := fs.Int("capacity", 0, "max concurrent tasks (0: the API's default)")
			owner := fs.String("org", "", "the organization that owns the worker")
			return func(ctx context.Context, c *ctl, _ []string) error {
				if *name == "" {
					return usageError{"workers create needs --name"}
				}
				req := apiclient.CreateWorkerRequest{Name: *name, WorkerType: apiclient.WorkerType(*workerType)}
				if *capacity > 0 {
					req.MaxConcurrentTasks = capacity
				}
				if *owner != "" {
					id, err := parseID("organization", *owner)
					if err != nil {
						return err
					}
					req.OrganizationId = &id
				}
				res, err := c.api.CreateWorkerWithResponse(ctx, req)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
					cw := res.JSON201
					writeFields(w, [][2]string{
						{"ID", cw.Id.String()},
						{"Name", cw.Name},
						{"Type", string(cw.WorkerType)},
						{"Capacity", fmt.Sprint(cw.MaxConcurrentTasks)},
						{"Enrollment token", cw.EnrollmentToken},
						{"Token expires", fmtTime(cw.EnrollmentTokenExpiresAt)},
					})
					fmt.Fprintln(c.errOut, "The enrollment token is shown only once: the worker enrolls with it (POST /v1/enroll).")
				})
			}
		}},
		"workers update": {args: []string{"ID"}, setup: func(fs *flag.FlagSet) runFunc {
			enabled := fs.Bool("enabled", true, "enable or (--enabled=false) disable leasing")
			capacity := fs.Int("capacity", 0, "max concurrent tasks")
			name := fs.String("name", "", "new name")
			active := fs.String("active", "", "when disabling, what happens to active attempts: drain (default) or cancel")
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("worker", args[0])
				if err != nil {
					return err
				}
				if err := checkActive(*active); err != nil {
					return err
				}
				var req apiclient.UpdateWorkerRequest
				if isSet(fs, "enabled") {
					req.Enabled = enabled
				}
				if isSet(fs, "capacity") {
					req.MaxConcurrentTasks = capacity
				}
				if isSet(fs, "name") {
					req.Name = name
				}
				if req == (apiclient.UpdateWorkerRequest{}) {
					return usageError{"workers update needs --enabled, --capacity or --name"}
				}
				params := &apiclient.UpdateWorkerParams{}
				if *active != "" {
					a := apiclient.UpdateWorkerParamsActive(*active)
					params.Active = &a
				}
				res, err := c.api.UpdateWorkerWithResponse(ctx, id, params, req)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeWorkerTable(w, []apiclient.Worker{*res.JSON200}) })
			}
		}},
		"workers revoke": {args: []string{"ID"}, setup: func(fs *flag.FlagSet) runFunc {
			reason := fs.String("reason", "", "why (required; recorded)")
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("worker", args[0])
				if err != nil {
					return err
				}
				if *reason == "" {
					return usageError{"workers revoke needs --reason"}
				}
				res, err := c.api.RevokeWorkerWithResponse(ctx, id, apiclient.RevokeRequest{Reason: *reason})
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeWorkerTable(w, []apiclient.Worker{*res.JSON200}) })
			}
		}},

		"assign": {args: []string{"ORG", "WORKER"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				org, worker, err := orgAndWorker(args)
				if err != nil {
					return err
				}
				res, err := c.api.AssignWorkerWithResponse(ctx, org, worker)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFields(w, assignmentFields(*res.JSON200)) })
			}
		}},
		"unassign": {args: []string{"ORG", "WORKER"}, setup: func(fs *flag.FlagSet) runFunc {
			active := fs.String("active", "", "active attempts: cancel (default) or drain")
			reason := fs.String("reason", "", "why (recorded)")
			return func(ctx context.Context, c *ctl, args []string) error {
				org, worker, err := orgAndWorker(args)
				if err != nil {
					return err
				}
				if err := checkActive(*active); err != nil {
					return err
				}
				params := &apiclient.UnassignWorkerParams{}
				if *active != "" {
					a := apiclient.UnassignWorkerParamsActive(*active)
					params.Active = &a
				}
				if *reason != "" {
					params.Reason = reason
				}
				res, err := c.api.UnassignWorkerWithResponse(ctx, org, worker, params)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFields(w, assignmentFields(*res.JSON200)) })
			}
		}},

		"grant": {args: []string{"WORKER", "ORG"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				org, worker, err := orgAndWorker([]string{args[1], args[0]})
				if err != nil {
					return err
				}
				res, err := c.api.GrantWorkerWithResponse(ctx, worker, org)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
					writeFields(w, [][2]string{{"Worker", res.JSON200.WorkerId.String()},
						{"Organization", res.JSON200.OrganizationId.String()}, {"Granted", fmtTime(res.JSON200.GrantedAt)}})
				})
			}
		}},
		"ungrant": {args: []string{"WORKER", "ORG"}, setup: func(fs *flag.FlagSet) runFunc {
			active := fs.String("active", "", "the organization's active attempts on the worker: cancel (default) or drain")
			return func(ctx context.Context, c *ctl, args []string) error {
				org, worker, err := orgAndWorker([]string{args[1], args[0]})
				if err != nil {
					return err
				}
				if err := checkActive(*active); err != nil {
					return err
				}
				params := &apiclient.RevokeWorkerGrantParams{}
				if *active != "" {
					a := apiclient.RevokeWorkerGrantParamsActive(*active)
					params.Active = &a
				}
				res, err := c.api.RevokeWorkerGrantWithResponse(ctx, worker, org, params)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { fmt.Fprintln(w, "Grant withdrawn.") })
			}
		}},
		"tokens list": {setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, _ []string) error {
				res, err := c.api.ListApiTokensWithResponse(ctx)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeTokenTable(w, res.JSON200.Items) })
			}
		}},
		"tokens create": {setup: func(fs *flag.FlagSet) runFunc {
			name := fs.String("name", "", "token name (required)")
			scopes := fs.String("scopes", "", "comma-separated scopes: admin, producer, reader (required)")
			org := fs.String("org", "", "limit the token to one organization")
			expires := fs.Duration("expires", 0, "lifetime, e.g. 720h (0: never)")
			return func(ctx context.Context, c *ctl, _ []string) error {
				if *name == "" || *scopes == "" {
					return usageError{"tokens create needs --name and --scopes"}
				}
				req := apiclient.CreateApiTokenRequest{Name: *name}
				for s := range strings.SplitSeq(*scopes, ",") {
					if s = strings.TrimSpace(s); s != "" {
						req.Scopes = append(req.Scopes, apiclient.TokenScope(s))
					}
				}
				if *org != "" {
					id, err := parseID("organization", *org)
					if err != nil {
						return err
					}
					req.OrganizationId = &id
				}
				if *expires > 0 {
					seconds := int(expires.Seconds())
					req.ExpiresInSeconds = &seconds
				}
				res, err := c.api.CreateApiTokenWithResponse(ctx, req)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
					writeTokenTable(w, []apiclient.ApiToken{res.JSON201.ApiToken})
					fmt.Fprintf(w, "\nToken (shown only once): %s\n", res.JSON201.Token)
				})
			}
		}},
		"tokens revoke": {args: []string{"ID"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("token", args[0])
				if err != nil {
					return err
				}
				res, err := c.api.RevokeApiTokenWithResponse(ctx, id)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeTokenTable(w, []apiclient.ApiToken{*res.JSON200}) })
			}
		}},

		"tasks list": {setup: func(fs *flag.FlagSet) runFunc {
			org := fs.String("org", "", "organization id")
			state := fs.String("state", "", "pending, leased, running, retry_wait, cancelling, completed, failed_terminal or cancelled")
			taskType := fs.String("type", "", "task type")
			limit, cursor := pageFlags(fs)
			return func(ctx context.Context, c *ctl, _ []string) error {
				params := &apiclient.ListTasksParams{}
				params.Limit, params.Cursor = pageParams(*limit, *cursor)
				if *org != "" {
					id, err := parseID("organization", *org)
					if err != nil {
						return err
					}
					params.OrganizationId = &id
				}
				if *state != "" {
					s := apiclient.TaskState(*state)
					params.State = &s
				}
				if *taskType != "" {
					t := apiclient.TaskType(*taskType)
					params.TaskType = &t
				}
				res, err := c.api.ListTasksWithResponse(ctx, params)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
					writeTaskTable(w, res.JSON200.Items)
					c.morePages(res.JSON200.NextCursor)
				})
			}
		}},
		"tasks get": {args: []string{"ID"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("task", args[0])
				if err != nil {
					return err
				}
				res, err := c.api.GetTaskWithResponse(ctx, id)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeTaskDetail(w, *res.JSON200) })
			}
		}},
		"tasks cancel": {args: []string{"ID"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("task", args[0])
				if err != nil {
					return err
				}
				res, err := c.api.CancelTaskWithResponse(ctx, id)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeTaskTable(w, []apiclient.Task{*res.JSON200}) })
			}
		}},
		"tasks retry": {args: []string{"ID"}, setup: func(*flag.FlagSet) runFunc {
			return func(ctx context.Context, c *ctl, args []string) error {
				id, err := parseID("task", args[0])
				if err != nil {
					return err
				}
				res, err := c.api.RetryTaskWithResponse(ctx, id)
				if err != nil {
					return err
				}
				return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeTaskTable(w, []apiclient.Task{*res.JSON200}) })
			}
		}},
	}
}

func orgAndWorker(args []string) (org, worker uuid.UUID, err error) {
	if org, err = parseID("organization", args[0]); err != nil {
		return
	}
	worker, err = parseID("worker", args[1])
	return
}

// Output: tables for lists, "Field: value" blocks for single things.

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

func row(tw io.Writer, cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

func str(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// revokedText is "<when>" or "<when> (<reason>)".
func revokedText(at *time.Time, reason *string) string {
	if reason == nil || *reason == "" {
		return fmtTimePtr(at)
	}
	return fmtTimePtr(at) + " (" + *reason + ")"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func joinIDs(ids []uuid.UUID) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ",")
}

func writeOrgTable(w io.Writer, orgs []apiclient.Organization) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "CREATED")
	for _, o := range orgs {
		row(tw, o.Id.String(), o.Name, fmtTime(o.CreatedAt))
	}
	tw.Flush()
}

// workerEnabled is "yes", "no" or, for a revoked worker, "revoked".
func workerEnabled(w apiclient.Worker) string {
	if w.Revoked {
		return "revoked"
	}
	return yesNo(w.Enabled)
}

func writeWorkerTable(w io.Writer, workers []apiclient.Worker) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "TYPE", "ONLINE", "ENABLED", "ACTIVE/CAPACITY", "ORGS")
	for _, wk := range workers {
		row(tw, wk.Id.String(), wk.Name, string(wk.WorkerType), yesNo(wk.Online), workerEnabled(wk),
			fmt.Sprintf("%d/%d", wk.ActiveAttempts, wk.MaxConcurrentTasks), joinIDs(wk.OrganizationIds))
	}
	tw.Flush()
}

func workerFields(wk apiclient.Worker) [][2]string {
	f := [][2]string{
		{"ID", wk.Id.String()},
		{"Name", wk.Name},
		{"Type", string(wk.WorkerType)},
		{"Online", yesNo(wk.Online)},
		{"Last seen", fmtTimePtr(wk.LastSeenAt)},
		{"Enabled", workerEnabled(wk)},
	}
	if wk.Revoked {
		f = append(f, [2]string{"Revoked", revokedText(wk.RevokedAt, wk.RevocationReason)})
	}
	return append(f,
		[2]string{"Active/capacity", fmt.Sprintf("%d/%d", wk.ActiveAttempts, wk.MaxConcurrentTasks)},
		[2]string{"Organizations", joinIDs(wk.OrganizationIds)},
		[2]string{"Capabilities", compactJSON(wk.Capabilities)},
		[2]string{"Certificate", str(wk.CertificateSubject)},
		[2]string{"Fingerprint", str(wk.CertificateFingerprint)},
		[2]string{"Software", str(wk.SoftwareVersion)},
		[2]string{"Protocol", str(wk.ProtocolVersion)},
		[2]string{"Created", fmtTime(wk.CreatedAt)},
	)
}

func assignmentFields(a apiclient.Assignment) [][2]string {
	f := [][2]string{
		{"Organization", a.OrganizationId.String()},
		{"Worker", a.WorkerId.String()},
		{"Enabled", yesNo(a.Enabled)},
		{"Assigned", fmtTime(a.AssignedAt)},
	}
	if a.Revoked {
		f = append(f, [2]string{"Revoked", revokedText(a.RevokedAt, a.RevocationReason)})
	}
	if a.CancelledAttempts != nil {
		f = append(f, [2]string{"Cancelled attempts", fmt.Sprint(*a.CancelledAttempts)})
	}
	return f
}

// tokenStatus is "active", "revoked" or "expired" (as of now).
func tokenStatus(t apiclient.ApiToken, now time.Time) string {
	switch {
	case t.Revoked:
		return "revoked"
	case t.ExpiresAt != nil && !t.ExpiresAt.After(now):
		return "expired"
	}
	return "active"
}

func writeTokenTable(w io.Writer, tokens []apiclient.ApiToken) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "SCOPES", "ORG", "STATUS", "EXPIRES", "LAST USED", "CREATED")
	now := time.Now()
	for _, t := range tokens {
		scopes := make([]string, len(t.Scopes))
		for i, s := range t.Scopes {
			scopes[i] = string(s)
		}
		org := "-"
		if t.OrganizationId != nil {
			org = t.OrganizationId.String()
		}
		row(tw, t.Id.String(), t.Name, strings.Join(scopes, ","), org, tokenStatus(t, now),
			fmtTimePtr(t.ExpiresAt), fmtTimePtr(t.LastUsedAt), fmtTime(t.CreatedAt))
	}
	tw.Flush()
}

func pendingReason(p *apiclient.PendingReason) string {
	if p == nil || *p == "" {
		return "-"
	}
	return string(*p)
}

func writeTaskTable(w io.Writer, tasks []apiclient.Task) {
	tw := newTable(w)
	row(tw, "ID", "STATE", "TYPE", "ATTEMPTS", "PENDING REASON", "CREATED")
	for _, t := range tasks {
		row(tw, t.Id.String(), string(t.State), string(t.TaskType),
			fmt.Sprintf("%d/%d", t.AttemptCount, t.MaxAttempts), pendingReason(t.PendingReason), fmtTime(t.CreatedAt))
	}
	tw.Flush()
}

func writeTaskDetail(w io.Writer, t apiclient.TaskDetail) {
	f := [][2]string{
		{"ID", t.Id.String()},
		{"Organization", t.OrganizationId.String()},
		{"Type", string(t.TaskType)},
		{"State", string(t.State)},
		{"Pending reason", pendingReason(t.PendingReason)},
		{"Attempts", fmt.Sprintf("%d/%d", t.AttemptCount, t.MaxAttempts)},
		{"Priority", fmt.Sprint(t.Priority)},
		{"Available", fmtTime(t.AvailableAt)},
	}
	if t.LastErrorCode != nil || t.LastError != nil {
		f = append(f, [2]string{"Last error", str(t.LastErrorCode) + ": " + str(t.LastError)})
	}
	if t.ScanId != nil {
		f = append(f, [2]string{"Scan", t.ScanId.String()})
	}
	f = append(f,
		[2]string{"Payload", compactJSON(t.Payload)},
		[2]string{"Requires", compactJSON(t.RequiredCapabilities)},
		[2]string{"Created", fmtTime(t.CreatedAt)},
		[2]string{"Updated", fmtTime(t.UpdatedAt)},
		[2]string{"Completed", fmtTimePtr(t.CompletedAt)},
	)
	writeFields(w, f)
	if len(t.Attempts) == 0 {
		return
	}
	attempts := slices.Clone(t.Attempts)
	slices.SortFunc(attempts, func(a, b apiclient.Attempt) int { return a.AttemptNumber - b.AttemptNumber })
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "#", "ATTEMPT", "WORKER", "STATUS", "STARTED", "FINISHED", "ERROR")
	for _, a := range attempts {
		errText := "-"
		if a.ErrorCode != nil || a.ErrorMessage != nil {
			errText = str(a.ErrorCode) + ": " + str(a.ErrorMessage)
		}
		row(tw, fmt.Sprint(a.AttemptNumber), a.Id.String(), a.WorkerId.String(), string(a.Status),
			fmtTime(a.StartedAt), fmtTimePtr(a.FinishedAt), errText)
	}
	tw.Flush()
}

// writeFields writes "Field:  value" lines, values aligned.
func writeFields(w io.Writer, fields [][2]string) {
	tw := newTable(w)
	for _, f := range fields {
		row(tw, f[0]+":", f[1])
	}
	tw.Flush()
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}
