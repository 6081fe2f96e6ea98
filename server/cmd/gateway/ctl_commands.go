package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// ctlCommand is the table of ctl commands: every control-plane operation
// of openapi.yaml (the worker-facing ones belong to workers).
func ctlCommand(a *cli) *command {
	o := &ctlOptions{}
	leaf := func(name, args, short string, setup func(fs *flagSet) ctlRun) *command {
		return a.ctlLeaf(o, name, args, short, setup)
	}
	noFlags := func(run ctlRun) func(*flagSet) ctlRun { return func(*flagSet) ctlRun { return run } }
	// Groups take the connection flags too, so they go anywhere on the line.
	group := func(name, short string, sub ...*command) *command {
		return &command{name: name, short: short, sub: sub, setup: func(fs *flagSet) execFunc { o.register(fs); return nil }}
	}
	return &command{
		name:  "ctl",
		short: "manage organizations, workers, tokens, tasks, scans, schedules and webhooks over the REST API",
		long:  ctlLong,
		setup: func(fs *flagSet) execFunc { o.register(fs); return nil },
		env:   o.sources,
		sub: []*command{
			group("orgs", "organizations",
				leaf("list", "", "list organizations", orgsList),
				leaf("create", "", "create an organization", orgsCreate),
				leaf("get", "ID", "show an organization", noFlags(orgsGet)),
				leaf("workers", "ORG", "the workers an organization may use, with whether each is eligible and why", noFlags(orgsWorkers)),
				leaf("assets", "ORG", "the assets scans found for an organization", orgsAssets),
				leaf("threats", "ORG", "the threats scans found for an organization", orgsThreats),
				leaf("exposure-changes", "ORG", "an organization's exposure-change timeline", orgsExposureChanges),
				leaf("asset-edges", "ORG", "an organization's asset graph (hostname resolves_to ip, ip has_port port, …)", orgsAssetEdges),
			),
			group("scope", "the targets an organization is approved to scan (changes: platform operators only)",
				leaf("list", "ORG", "an organization's scan scope", scopeList),
				leaf("add", "ORG", "approve a target; sets the organization's scope policy to allow_list", scopeAdd),
				leaf("remove", "ORG ID", "remove a scope entry (the policy stays allow_list; work it approved is cancelled)", noFlags(scopeRemove)),
				leaf("policy", "ORG POLICY", "set the scope policy: allow_list (only approved targets) or unrestricted", noFlags(scopePolicy)),
			),
			group("exclusions", "threat exclusions: suppress known or accepted findings",
				leaf("list", "ORG", "an organization's threat exclusions", exclusionsList),
				leaf("create", "ORG", "create a threat exclusion", exclusionsCreate),
				leaf("delete", "ORG ID", "delete a threat exclusion", noFlags(exclusionsDelete)),
			),
			group("workers", "workers",
				leaf("list", "", "list workers", workersList),
				leaf("get", "ID", "show a worker", noFlags(workersGet)),
				leaf("create", "", "create a worker; prints its one-time enrollment token", workersCreate),
				leaf("update", "ID", "enable, disable, rename or resize a worker", workersUpdate),
				leaf("label", "ID KEY=VALUE...", "set (KEY=VALUE) or remove (KEY-) a worker's labels", noFlags(workersLabel)),
				leaf("revoke", "ID", "revoke a worker for good", workersRevoke),
				leaf("certificate", "ID", "register a worker's client certificate", workersCertificate),
				leaf("enrollment-token", "ID", "issue a new one-time enrollment token", noFlags(workersEnrollmentToken)),
				leaf("grants", "ID", "the organizations a worker's owner lets assign it", noFlags(workersGrants)),
			),
			leaf("assign", "ORG WORKER", "let a worker serve an organization", noFlags(assign)),
			leaf("unassign", "ORG WORKER", "stop a worker serving an organization", unassign),
			leaf("grant", "WORKER ORG", "the worker's owner lets ORG assign it", noFlags(grant)),
			leaf("ungrant", "WORKER ORG", "withdraw a grant, and ORG's assignment of the worker", ungrant),
			group("tokens", "API tokens",
				leaf("list", "", "list API tokens", noFlags(tokensList)),
				leaf("create", "", "create an API token; prints it once", tokensCreate),
				leaf("revoke", "ID", "revoke an API token", noFlags(tokensRevoke)),
			),
			group("tasks", "tasks, their results, artifacts and logs",
				leaf("list", "", "list tasks", tasksList),
				leaf("get", "ID", "show a task with its attempts", noFlags(tasksGet)),
				leaf("create", "", "create a task", tasksCreate),
				leaf("cancel", "ID", "cancel a task", noFlags(tasksCancel)),
				leaf("retry", "ID", "retry a finished task", noFlags(tasksRetry)),
				leaf("results", "ID", "a task's result batches", tasksResults),
				leaf("artifacts", "ID", "a task's artifacts", noFlags(tasksArtifacts)),
				leaf("logs", "ID", "an attempt's log; --follow waits for more until the attempt ends", tasksLogs),
			),
			group("scans", "scans",
				leaf("list", "", "list scans", scansList),
				leaf("get", "ID", "show a scan with its jobs", noFlags(scansGet)),
				leaf("create", "", "create a scan", scansCreate),
				leaf("cancel", "ID", "cancel a scan", noFlags(scansCancel)),
				leaf("changes", "ID", "what a scan found changed since the previous scan of its scope", scansChanges),
			),
			group("schedules", "scans and tasks on a timetable",
				leaf("list", "", "list schedules", schedulesList),
				leaf("get", "ID", "show a schedule at its current version", noFlags(schedulesGet)),
				leaf("create", "", "create a schedule", schedulesCreate),
				leaf("pause", "ID", "stop a schedule firing", noFlags(schedulesPause)),
				leaf("resume", "ID", "let a paused schedule fire again", noFlags(schedulesResume)),
				leaf("run", "ID", "run a schedule now", schedulesRun),
				leaf("delete", "ID", "delete a schedule (it stops firing; its runs stay)", noFlags(schedulesDelete)),
				leaf("fires", "ID", "a schedule's history", schedulesFires),
				leaf("next", "ID", "a schedule's next fire times", schedulesNext),
			),
			group("webhooks", "signed notifications of an organization's events",
				leaf("list", "", "list webhook targets", webhooksList),
				leaf("get", "ID", "show a webhook target", noFlags(webhooksGet)),
				leaf("create", "", "create a webhook target (prints its secret, once)", webhooksCreate),
				leaf("update", "ID", "change a webhook target's URL, events or enabled flag", webhooksUpdate),
				leaf("delete", "ID", "delete a webhook target and its deliveries", noFlags(webhooksDelete)),
				leaf("rotate-secret", "ID", "give a webhook target a new secret (prints it, once)", webhooksRotate),
				leaf("deliveries", "ID", "a webhook target's delivery log", webhooksDeliveries),
			),
			group("secrets", "write-only secrets tasks receive in their leases (values from stdin or a file)",
				leaf("list", "", "list secrets (names and metadata, never values)", secretsList),
				leaf("create", "", "create a secret; the value is read from standard input or --from-file", secretsCreate),
				leaf("replace", "ID|NAME", "give a secret a new value (standard input or --from-file) and limits", secretsReplace),
				leaf("delete", "ID|NAME", "delete a secret", secretsDelete),
			),
			group("files", "stored files (artifacts)",
				leaf("get", "ID", "show a file's metadata", noFlags(filesGet)),
				leaf("download", "ID", "write a file's content to --output or stdout", filesDownload),
			),
			group("audit", "the audit log",
				leaf("list", "", "list audit events, newest first", auditList),
			),
			leaf("stats", "", "the overview: queue depth by organization and state, workers online, leases per second, recent failures", stats),
			leaf("ready", "", "whether the gateway is ready (/readyz: database, schema, LISTEN)", noFlags(ready)),
		},
	}
}

// Organizations.

func orgsList(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		l, cur := p.params()
		res, err := c.api.ListOrganizationsWithResponse(ctx, &apiclient.ListOrganizationsParams{Limit: l, Cursor: cur})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeOrgTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func orgsCreate(fs *flagSet) ctlRun {
	name := fs.String("name", "", "organization name (required)")
	policy := fs.String("scope-policy", "", "scan scope policy: allow_list (the default: only approved targets) or unrestricted")
	return func(ctx context.Context, c *ctl, _ []string) error {
		if *name == "" {
			return usageError{"orgs create needs --name"}
		}
		req := apiclient.CreateOrganizationRequest{Name: *name}
		if *policy != "" {
			req.ScopePolicy = (*apiclient.ScopePolicy)(policy)
		}
		res, err := c.api.CreateOrganizationWithResponse(ctx, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeOrgTable(w, []apiclient.Organization{*res.JSON201}) })
	}
}

func orgsGet(ctx context.Context, c *ctl, args []string) error {
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

func orgsWorkers(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("organization", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.ListOrganizationWorkersWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeOrgWorkerTable(w, res.JSON200.Items) })
}

func orgsAssets(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("organization", args[0])
		if err != nil {
			return err
		}
		l, cur := p.params()
		res, err := c.api.ListAssetsWithResponse(ctx, id, &apiclient.ListAssetsParams{Limit: l, Cursor: cur})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeAssetTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func orgsThreats(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	excluded := fs.Bool("include-excluded", false, "also the threats an active exclusion hides")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("organization", args[0])
		if err != nil {
			return err
		}
		l, cur := p.params()
		res, err := c.api.ListThreatsWithResponse(ctx, id, &apiclient.ListThreatsParams{Limit: l, Cursor: cur, IncludeExcluded: excluded})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeThreatTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

// Workers.

func workersList(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		l, cur := p.params()
		res, err := c.api.ListWorkersWithResponse(ctx, &apiclient.ListWorkersParams{Limit: l, Cursor: cur})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeWorkerTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func workersGet(ctx context.Context, c *ctl, args []string) error {
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

func workersCreate(fs *flagSet) ctlRun {
	name := fs.String("name", "", "worker name (required)")
	workerType := fs.String("type", "scanner", "worker type: scanner or ai")
	capacity := fs.Int("capacity", 0, "max concurrent tasks (0: the API's default)")
	owner := fs.String("org", "", "the organization that owns the worker (an organization's admin token owns it anyway)")
	return func(ctx context.Context, c *ctl, _ []string) error {
		if *name == "" {
			return usageError{"workers create needs --name"}
		}
		req := apiclient.CreateWorkerRequest{Name: *name, WorkerType: apiclient.WorkerType(*workerType)}
		if *capacity > 0 {
			req.MaxConcurrentTasks = capacity
		}
		var err error
		if req.OrganizationId, err = optionalID("organization", *owner); err != nil {
			return err
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
			c.writeWorkerCommands(w, cw.EnrollmentToken)
			if cw.OwnerOrganizationId == nil {
				// A platform worker leases nothing until assigned.
				fmt.Fprintf(w, "It gets tasks once assigned to an organization:\n  gateway ctl assign ORGANIZATION_ID %s\n", cw.Id)
			}
			fmt.Fprintln(c.errOut, "The enrollment token is shown only once: the worker enrolls with it (POST /v1/enroll).")
		})
	}
}

func workersUpdate(fs *flagSet) ctlRun {
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
		// Only the flags given (on the line or by environment) change.
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
}

// workersLabel changes a worker's labels the way kubectl label does:
// KEY=VALUE sets a label, KEY- removes it, other labels stay.
func workersLabel(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("worker", args[0])
	if err != nil {
		return err
	}
	changes, err := parseLabelChanges(args[1:])
	if err != nil {
		return err
	}
	res, err := c.api.UpdateWorkerWithResponse(ctx, id, &apiclient.UpdateWorkerParams{},
		apiclient.UpdateWorkerRequest{Labels: &changes})
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFields(w, workerFields(*res.JSON200)) })
}

func workersRevoke(fs *flagSet) ctlRun {
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
}

func workersCertificate(fs *flagSet) ctlRun {
	certFile := fs.String("cert", "", "the worker's client certificate, PEM file")
	fingerprint := fs.String("fingerprint", "", "or its SHA-256 fingerprint, hex")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("worker", args[0])
		if err != nil {
			return err
		}
		var req apiclient.RegisterCertificateRequest
		switch {
		case (*certFile == "") == (*fingerprint == ""):
			return usageError{"workers certificate needs --cert FILE or --fingerprint HEX"}
		case *certFile != "":
			pemBytes, err := os.ReadFile(*certFile)
			if err != nil {
				return err
			}
			pem := string(pemBytes)
			req.CertificatePem = &pem
		default:
			req.CertificateFingerprint = fingerprint
		}
		res, err := c.api.RegisterWorkerCertificateWithResponse(ctx, id, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFields(w, workerFields(*res.JSON200)) })
	}
}

func workersEnrollmentToken(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("worker", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.CreateEnrollmentTokenWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
		writeFields(w, [][2]string{{"Enrollment token", res.JSON201.EnrollmentToken}, {"Expires", fmtTime(res.JSON201.ExpiresAt)}})
		c.writeWorkerCommands(w, res.JSON201.EnrollmentToken)
		fmt.Fprintln(c.errOut, "The enrollment token is shown only once: the worker enrolls with it (POST /v1/enroll).")
	})
}

func workersGrants(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("worker", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.ListWorkerGrantsWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeGrantTable(w, res.JSON200.Items) })
}

// Assignments and grants.

func assign(ctx context.Context, c *ctl, args []string) error {
	org, worker, err := orgAndWorker(args[0], args[1])
	if err != nil {
		return err
	}
	res, err := c.api.AssignWorkerWithResponse(ctx, org, worker)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFields(w, assignmentFields(*res.JSON200)) })
}

func unassign(fs *flagSet) ctlRun {
	active := fs.String("active", "", "active attempts: cancel (default) or drain")
	reason := fs.String("reason", "", "why (recorded)")
	return func(ctx context.Context, c *ctl, args []string) error {
		org, worker, err := orgAndWorker(args[0], args[1])
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
}

func grant(ctx context.Context, c *ctl, args []string) error {
	org, worker, err := orgAndWorker(args[1], args[0])
	if err != nil {
		return err
	}
	res, err := c.api.GrantWorkerWithResponse(ctx, worker, org)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeGrantTable(w, []apiclient.WorkerGrant{*res.JSON200}) })
}

func ungrant(fs *flagSet) ctlRun {
	active := fs.String("active", "", "the organization's active attempts on the worker: cancel (default) or drain")
	return func(ctx context.Context, c *ctl, args []string) error {
		org, worker, err := orgAndWorker(args[1], args[0])
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
}

// API tokens.

func tokensList(ctx context.Context, c *ctl, _ []string) error {
	res, err := c.api.ListApiTokensWithResponse(ctx)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeTokenTable(w, res.JSON200.Items) })
}

func tokensCreate(fs *flagSet) ctlRun {
	name := fs.String("name", "", "token name (required)")
	scopes := fs.String("scopes", "", "comma-separated scopes: admin, producer, reader (required)")
	org := fs.String("org", "", "limit the token to one organization")
	expires := fs.Duration("expires", 0, "lifetime, e.g. 720h (0: never)")
	return func(ctx context.Context, c *ctl, _ []string) error {
		if *name == "" || *scopes == "" {
			return usageError{"tokens create needs --name and --scopes"}
		}
		list, err := parseScopes(*scopes)
		if err != nil {
			return err
		}
		req := apiclient.CreateApiTokenRequest{Name: *name}
		for _, s := range list {
			req.Scopes = append(req.Scopes, apiclient.TokenScope(s))
		}
		if req.OrganizationId, err = optionalID("organization", *org); err != nil {
			return err
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
}

func tokensRevoke(ctx context.Context, c *ctl, args []string) error {
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

// triggerFilter is the --trigger and --schedule filters of task and scan
// lists.
type triggerFilter struct{ trigger, schedule *string }

func triggerFlags(fs *flagSet) triggerFilter {
	return triggerFilter{
		trigger:  fs.String("trigger", "", "only those created this way: schedule, manual or api"),
		schedule: fs.String("schedule", "", "only those this schedule created (schedule id)"),
	}
}

func (f triggerFilter) params() (*apiclient.TriggerKind, *uuid.UUID, error) {
	schedule, err := optionalID("schedule", *f.schedule)
	if err != nil || *f.trigger == "" {
		return nil, schedule, err
	}
	kind := apiclient.TriggerKind(*f.trigger)
	return &kind, schedule, nil
}

// Tasks.

func tasksList(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id")
	state := fs.String("state", "", "pending, leased, running, retry_wait, cancelling, completed, failed_terminal or cancelled")
	taskType := fs.String("type", "", "task type")
	scan := fs.String("scan", "", "scan id: only this scan's tasks")
	tf := triggerFlags(fs)
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		params := &apiclient.ListTasksParams{}
		params.Limit, params.Cursor = p.params()
		var err error
		if params.OrganizationId, err = optionalID("organization", *org); err != nil {
			return err
		}
		if params.ScanId, err = optionalID("scan", *scan); err != nil {
			return err
		}
		if params.Trigger, params.ScheduleId, err = tf.params(); err != nil {
			return err
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
}

func tasksGet(ctx context.Context, c *ctl, args []string) error {
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

func tasksCreate(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id (required)")
	taskType := fs.String("type", "scanner_plugin", "task type")
	payload := fs.String("payload", "", "payload JSON object, or @FILE")
	requires := fs.String("requires", "", "required capabilities JSON object, or @FILE")
	priority := fs.Int("priority", 0, "priority (higher first)")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the task fails for good (0: the API's default)")
	key := fs.String("idempotency-key", "", "repeating a creation with the same key returns the same task")
	selector := fs.String("selector", "", `label selector the worker's labels must match: kubectl style ("zone=eu,tier in (gpu,tpu),!legacy") or a JSON object as the API takes it, or @FILE`)
	pin := fs.String("pin", "", "the id of the one worker that may run the task")
	secrets := fs.String("secrets", "", "names of the organization's secrets the task receives in its lease, comma-separated")
	return func(ctx context.Context, c *ctl, _ []string) error {
		orgID, err := optionalID("organization", *org)
		if err != nil {
			return err
		}
		if orgID == nil {
			return usageError{"tasks create needs --org"}
		}
		req := apiclient.CreateTaskRequest{OrganizationId: *orgID, TaskType: apiclient.TaskType(*taskType)}
		if req.Payload, err = jsonArg("payload", *payload); err != nil {
			return err
		}
		if req.RequiredCapabilities, err = jsonArg("requires", *requires); err != nil {
			return err
		}
		if isSet(fs, "priority") {
			req.Priority = priority
		}
		if *maxAttempts > 0 {
			req.MaxAttempts = maxAttempts
		}
		if req.LabelSelector, err = parseSelector(*selector); err != nil {
			return err
		}
		if req.PinnedWorkerId, err = optionalID("worker", *pin); err != nil {
			return err
		}
		if *secrets != "" {
			refs := strings.Split(*secrets, ",")
			for i := range refs {
				refs[i] = strings.TrimSpace(refs[i])
			}
			req.SecretRefs = &refs
		}
		params := &apiclient.CreateTaskParams{}
		if *key != "" {
			params.IdempotencyKey = key
		}
		res, err := c.api.CreateTaskWithResponse(ctx, params, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			t := res.JSON201
			if t == nil {
				t = res.JSON200 // a replay of the same idempotency key
			}
			writeTaskTable(w, []apiclient.Task{*t})
		})
	}
}

func tasksCancel(ctx context.Context, c *ctl, args []string) error {
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

func tasksRetry(ctx context.Context, c *ctl, args []string) error {
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

func tasksResults(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("task", args[0])
		if err != nil {
			return err
		}
		l, cur := p.params()
		res, err := c.api.ListTaskResultsWithResponse(ctx, id, &apiclient.ListTaskResultsParams{Limit: l, Cursor: cur})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeResultTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func tasksArtifacts(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("task", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.ListTaskArtifactsWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFileTable(w, res.JSON200.Items) })
}

func tasksLogs(fs *flagSet) ctlRun {
	attempt := fs.Int("attempt", 0, "attempt number (0: the latest)")
	offset := fs.Int("offset", 0, "start at this byte")
	follow := fs.Bool("follow", false, "wait for more until the attempt ends")
	wait := fs.Int("wait", 0, "with --follow, the longest one request waits for data, seconds (0: the API's default)")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("task", args[0])
		if err != nil {
			return err
		}
		params := &apiclient.GetTaskLogsParams{Offset: offset, Follow: follow}
		if *attempt > 0 {
			params.Attempt = attempt
		}
		if *wait > 0 {
			params.WaitSeconds = wait
		}
		for first := true; ; first = false {
			res, err := c.api.GetTaskLogsWithResponse(ctx, id, params)
			if err != nil {
				return err
			}
			if res.StatusCode() != 200 {
				return problemError(res.StatusCode(), res.HTTPResponse.Header.Get("X-Request-Id"), res.Body)
			}
			lt := res.JSON200
			switch {
			case !c.json:
				if _, err := io.WriteString(c.out, lt.Data); err != nil {
					return err
				}
			case first || lt.Data != "":
				// One JSON document per answer: a following reader gets lines.
				fmt.Fprintf(c.out, "%s\n", compactJSON(res.Body))
			}
			// Without --follow, everything written so far; with it, until
			// the attempt has ended and its log was read to the end.
			if lt.Data == "" && (!*follow || lt.Complete) {
				if lt.Truncated != nil && *lt.Truncated && !c.json {
					fmt.Fprintln(c.errOut, "(the log was truncated at the gateway's per-attempt cap)")
				}
				return nil
			}
			next := int(lt.NextOffset)
			params.Offset = &next
			// Follow the attempt the first answer named, not a later retry.
			params.Attempt = &lt.AttemptNumber
		}
	}
}

// Scans.

func scansList(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id")
	tf := triggerFlags(fs)
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		params := &apiclient.ListScansParams{}
		params.Limit, params.Cursor = p.params()
		var err error
		if params.OrganizationId, err = optionalID("organization", *org); err != nil {
			return err
		}
		if params.Trigger, params.ScheduleId, err = tf.params(); err != nil {
			return err
		}
		res, err := c.api.ListScansWithResponse(ctx, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeScanTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func scansGet(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("scan", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.GetScanWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScanDetail(w, *res.JSON200) })
}

func scansCreate(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id (required)")
	targets := fs.String("targets", "", "comma-separated hosts, addresses or URLs (this or --asset-targets required)")
	assetTargets := fs.String("asset-targets", "", "comma-separated ids of the organization's assets to scan as well")
	plugins := fs.String("plugins", "", "comma-separated plugin names, each run with its default input")
	pluginsJSON := fs.String("plugins-json", "", "the plugins as the API takes them: a JSON array, or @FILE")
	priority := fs.Int("priority", 0, "priority of the scan's tasks")
	key := fs.String("idempotency-key", "", "repeating a creation with the same key returns the same scan")
	return func(ctx context.Context, c *ctl, _ []string) error {
		orgID, err := optionalID("organization", *org)
		if err != nil {
			return err
		}
		if orgID == nil || *targets == "" && *assetTargets == "" || (*plugins == "") == (*pluginsJSON == "") {
			return usageError{"scans create needs --org, --targets or --asset-targets, and --plugins or --plugins-json"}
		}
		req := apiclient.CreateScanRequest{OrganizationId: *orgID, Targets: splitList(*targets)}
		if req.Targets == nil {
			req.Targets = []string{}
		}
		if *assetTargets != "" {
			var ids []uuid.UUID
			for _, a := range splitList(*assetTargets) {
				id, err := parseID("asset", a)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			req.AssetTargets = &ids
		}
		for _, name := range splitList(*plugins) {
			req.Plugins = append(req.Plugins, apiclient.ScanPlugin{Name: name})
		}
		if *pluginsJSON != "" {
			data := []byte(*pluginsJSON)
			if name, ok := strings.CutPrefix(*pluginsJSON, "@"); ok {
				if data, err = os.ReadFile(name); err != nil {
					return err
				}
			}
			if err := json.Unmarshal(data, &req.Plugins); err != nil {
				return usageError{fmt.Sprintf("--plugins-json: %v", err)}
			}
		}
		if isSet(fs, "priority") {
			req.Priority = priority
		}
		params := &apiclient.CreateScanParams{}
		if *key != "" {
			params.IdempotencyKey = key
		}
		res, err := c.api.CreateScanWithResponse(ctx, params, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			s := res.JSON201
			if s == nil {
				s = res.JSON200
			}
			writeScanDetail(w, *s)
		})
	}
}

func scansCancel(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("scan", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.CancelScanWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScanTable(w, []apiclient.Scan{*res.JSON200}) })
}

// Files.

func filesGet(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("file", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.GetFileWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeFileTable(w, []apiclient.File{*res.JSON200}) })
}

func filesDownload(fs *flagSet) ctlRun {
	output := fs.String("output", "", "file to write (default: stdout)")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("file", args[0])
		if err != nil {
			return err
		}
		res, err := c.api.GetFileContentWithResponse(ctx, id)
		if err != nil {
			return err
		}
		if res.StatusCode() != 200 {
			return problemError(res.StatusCode(), res.HTTPResponse.Header.Get("X-Request-Id"), res.Body)
		}
		if *output == "" {
			_, err = c.out.Write(res.Body)
			return err
		}
		return os.WriteFile(*output, res.Body, 0o644)
	}
}

// Audit.

func auditList(fs *flagSet) ctlRun {
	action := fs.String("action", "", "only this action, e.g. worker.revoked")
	targetType := fs.String("target-type", "", "only targets of this type, e.g. worker")
	targetID := fs.String("target-id", "", "only this target")
	since := fs.String("since", "", "only events at or after this RFC 3339 time")
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		params := &apiclient.ListAuditEventsParams{}
		params.Limit, params.Cursor = p.params()
		for _, f := range []struct {
			v   string
			dst **string
		}{{*action, &params.Action}, {*targetType, &params.TargetType}, {*targetID, &params.TargetId}} {
			if f.v != "" {
				v := f.v
				*f.dst = &v
			}
		}
		if *since != "" {
			t, err := time.Parse(time.RFC3339, *since)
			if err != nil {
				return usageError{fmt.Sprintf("--since: %v", err)}
			}
			params.Since = &t
		}
		res, err := c.api.ListAuditEventsWithResponse(ctx, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeAuditTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

// Operations.

// ready reads /readyz; not ready is a failure (status 1) that still
// shows which check failed.
func ready(ctx context.Context, c *ctl, _ []string) error {
	res, err := c.api.GetReadinessWithResponse(ctx)
	if err != nil {
		return err
	}
	h := res.JSON200
	if h == nil {
		h = res.JSON503
	}
	if h == nil {
		return problemError(res.StatusCode(), res.HTTPResponse.Header.Get("X-Request-Id"), res.Body)
	}
	if c.json {
		fmt.Fprintf(c.out, "%s\n", compactJSON(res.Body))
	} else {
		fields := [][2]string{{"Status", string(h.Status)}}
		if h.Checks != nil {
			names := slices.Sorted(maps.Keys(*h.Checks))
			for _, name := range names {
				fields = append(fields, [2]string{name, (*h.Checks)[name]})
			}
		}
		writeFields(c.out, fields)
	}
	if res.JSON503 != nil {
		return errors.New("the gateway is not ready")
	}
	return nil
}
