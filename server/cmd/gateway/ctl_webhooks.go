package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Webhooks.

// webhookEvents parses --events: comma-separated event types.
func webhookEvents(s string) []apiclient.WebhookEventType {
	var out []apiclient.WebhookEventType
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, apiclient.WebhookEventType(e))
		}
	}
	return out
}

const webhookEventsHelp = "comma-separated event types: task.failed_terminal, task.completed, scan.completed, scan.failed, " +
	"worker.offline, worker.revoked, organization.no_eligible_worker, schedule.fire_skipped"

func webhooksList(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id")
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		params := &apiclient.ListWebhooksParams{}
		params.Limit, params.Cursor = p.params()
		var err error
		if params.OrganizationId, err = optionalID("organization", *org); err != nil {
			return err
		}
		res, err := c.api.ListWebhooksWithResponse(ctx, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeWebhookTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func webhooksGet(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("webhook", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.GetWebhookWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeWebhookDetail(w, *res.JSON200, "") })
}

func webhooksCreate(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id (required)")
	url := fs.String("endpoint", "", "the URL events are posted to, http or https (required)")
	events := fs.String("events", "", webhookEventsHelp+" (required)")
	description := fs.String("description", "", "a note for operators")
	disabled := fs.Bool("disabled", false, "create it disabled")
	return func(ctx context.Context, c *ctl, _ []string) error {
		orgID, err := optionalID("organization", *org)
		if err != nil {
			return err
		}
		if orgID == nil || *url == "" || *events == "" {
			return usageError{"webhooks create needs --org, --endpoint and --events"}
		}
		enabled := !*disabled
		req := apiclient.CreateWebhookRequest{OrganizationId: *orgID, Url: *url, EventTypes: webhookEvents(*events), Enabled: &enabled}
		if *description != "" {
			req.Description = description
		}
		res, err := c.api.CreateWebhookWithResponse(ctx, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeWebhookDetail(w, webhookOf(*res.JSON201), res.JSON201.Secret)
		})
	}
}

func webhooksUpdate(fs *flagSet) ctlRun {
	url := fs.String("endpoint", "", "the URL events are posted to (default: unchanged)")
	events := fs.String("events", "", webhookEventsHelp+" (default: unchanged)")
	description := fs.String("description", "", "a note for operators (default: unchanged)")
	enabled := fs.String("enabled", "", "true or false (default: unchanged)")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("webhook", args[0])
		if err != nil {
			return err
		}
		if *enabled != "" && *enabled != "true" && *enabled != "false" {
			return usageError{"--enabled is true or false"}
		}
		cur, err := c.api.GetWebhookWithResponse(ctx, id)
		if err != nil {
			return err
		}
		if cur.JSON200 == nil {
			return c.finish(cur.HTTPResponse, cur.Body, nil)
		}
		w := cur.JSON200
		req := apiclient.UpdateWebhookRequest{Url: w.Url, EventTypes: w.EventTypes, Enabled: w.Enabled, Description: &w.Description}
		if *url != "" {
			req.Url = *url
		}
		if *events != "" {
			req.EventTypes = webhookEvents(*events)
		}
		if *description != "" {
			req.Description = description
		}
		if *enabled != "" {
			req.Enabled = *enabled == "true"
		}
		res, err := c.api.UpdateWebhookWithResponse(ctx, id, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeWebhookDetail(w, *res.JSON200, "") })
	}
}

func webhooksDelete(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("webhook", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.DeleteWebhookWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { fmt.Fprintln(w, "deleted", id) })
}

func webhooksRotate(fs *flagSet) ctlRun {
	overlap := fs.Int("overlap", 86400, "seconds the old secret keeps signing beside the new one (0: stops at once)")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("webhook", args[0])
		if err != nil {
			return err
		}
		res, err := c.api.RotateWebhookSecretWithResponse(ctx, id, apiclient.RotateWebhookSecretRequest{OverlapSeconds: overlap})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeWebhookDetail(w, webhookOf(*res.JSON200), res.JSON200.Secret)
		})
	}
}

func webhooksDeliveries(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("webhook", args[0])
		if err != nil {
			return err
		}
		params := &apiclient.ListWebhookDeliveriesParams{}
		params.Limit, params.Cursor = p.params()
		res, err := c.api.ListWebhookDeliveriesWithResponse(ctx, id, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			tw := newTable(w)
			row(tw, "EVENT", "TYPE", "STATE", "TRIES", "STATUS", "LATENCY", "ERROR", "CREATED")
			for _, d := range res.JSON200.Items {
				status, latency := "-", "-"
				if d.LastStatusCode != nil {
					status = fmt.Sprint(*d.LastStatusCode)
				}
				if d.LastLatencyMs != nil {
					latency = fmt.Sprintf("%dms", *d.LastLatencyMs)
				}
				row(tw, d.EventId.String(), string(d.EventType), string(d.State), fmt.Sprint(d.Attempts), status, latency,
					str(d.LastError), fmtTime(d.CreatedAt))
			}
			tw.Flush()
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func webhookOf(w apiclient.WebhookWithSecret) apiclient.Webhook {
	return apiclient.Webhook{Id: w.Id, OrganizationId: w.OrganizationId, Url: w.Url, Description: w.Description,
		EventTypes: w.EventTypes, Enabled: w.Enabled, ConsecutiveFailures: w.ConsecutiveFailures,
		CircuitOpenUntil: w.CircuitOpenUntil, PreviousSecretExpiresAt: w.PreviousSecretExpiresAt,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
}

func webhookEventList(types []apiclient.WebhookEventType) string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = string(t)
	}
	return strings.Join(out, ",")
}

func writeWebhookTable(w io.Writer, list []apiclient.Webhook) {
	tw := newTable(w)
	row(tw, "ID", "URL", "EVENTS", "ENABLED", "FAILURES", "CIRCUIT OPEN UNTIL")
	for _, h := range list {
		row(tw, h.Id.String(), h.Url, webhookEventList(h.EventTypes), fmt.Sprint(h.Enabled), fmt.Sprint(h.ConsecutiveFailures),
			fmtTimePtr(h.CircuitOpenUntil))
	}
	tw.Flush()
}

// writeWebhookDetail prints a target, and its secret when the answer has
// one (creation, rotation): the only time it is shown.
func writeWebhookDetail(w io.Writer, h apiclient.Webhook, secret string) {
	fields := [][2]string{
		{"ID", h.Id.String()},
		{"Organization", h.OrganizationId.String()},
		{"URL", h.Url},
		{"Description", orDash(h.Description)},
		{"Events", webhookEventList(h.EventTypes)},
		{"Enabled", fmt.Sprint(h.Enabled)},
		{"Failures in a row", fmt.Sprint(h.ConsecutiveFailures)},
		{"Circuit open until", fmtTimePtr(h.CircuitOpenUntil)},
		{"Old secret signs until", fmtTimePtr(h.PreviousSecretExpiresAt)},
		{"Created", fmtTime(h.CreatedAt)},
		{"Updated", fmtTime(h.UpdatedAt)},
	}
	if secret != "" {
		fields = append(fields, [2]string{"Secret", secret + "   (shown once: store it now)"})
	}
	writeFields(w, fields)
}
