package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Scan scope, asset history and threat exclusions.

// parseOrgAndID reads a command's arguments: the organization's id, then,
// unless what is empty, the id of its object named what.
func parseOrgAndID(args []string, what string) (org, id uuid.UUID, err error) {
	if org, err = parseID("organization", args[0]); err != nil || what == "" {
		return org, uuid.UUID{}, err
	}
	id, err = parseID(what, args[1])
	return org, id, err
}

func scopeList(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		org, _, err := parseOrgAndID(args, "")
		if err != nil {
			return err
		}
		l, cur := p.params()
		res, err := c.api.ListScopeTargetsWithResponse(ctx, org, &apiclient.ListScopeTargetsParams{Limit: l, Cursor: cur})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			if !res.JSON200.Enforced {
				fmt.Fprintln(w, "scope policy unrestricted: this organization's scans may name any target")
			}
			writeScopeTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func scopeAdd(fs *flagSet) ctlRun {
	kind := fs.String("kind", "", "domain, ip, cidr or url_prefix (required)")
	value := fs.String("value", "", "the domain (*.example.com for its subdomains too), address, prefix or URL prefix (required)")
	sub := fs.Bool("include-subdomains", false, "domain: every name under it too")
	note := fs.String("note", "", "why it is approved")
	return func(ctx context.Context, c *ctl, args []string) error {
		org, _, err := parseOrgAndID(args, "")
		if err != nil {
			return err
		}
		if *kind == "" || *value == "" {
			return usageError{"scope add needs --kind and --value"}
		}
		req := apiclient.CreateScopeTargetRequest{Kind: apiclient.ScopeTargetKind(*kind), Value: *value, IncludeSubdomains: sub}
		if *note != "" {
			req.Note = note
		}
		res, err := c.api.AddScopeTargetWithResponse(ctx, org, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			t := res.JSON201
			if t == nil {
				t = res.JSON200
			}
			writeScopeTable(w, []apiclient.ScopeTarget{*t})
		})
	}
}

func scopeRemove(ctx context.Context, c *ctl, args []string) error {
	org, id, err := parseOrgAndID(args, "scope entry")
	if err != nil {
		return err
	}
	res, err := c.api.RemoveScopeTargetWithResponse(ctx, org, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScopeTable(w, []apiclient.ScopeTarget{*res.JSON200}) })
}

func scopePolicy(ctx context.Context, c *ctl, args []string) error {
	org, _, err := parseOrgAndID(args, "")
	if err != nil {
		return err
	}
	res, err := c.api.UpdateOrganizationWithResponse(ctx, org, apiclient.UpdateOrganizationRequest{ScopePolicy: apiclient.ScopePolicy(args[1])})
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeOrgTable(w, []apiclient.Organization{*res.JSON200}) })
}

func writeScopeTable(w io.Writer, targets []apiclient.ScopeTarget) {
	tw := newTable(w)
	row(tw, "ID", "KIND", "VALUE", "SUBDOMAINS", "NOTE", "CREATED")
	for _, t := range targets {
		note := ""
		if t.Note != nil {
			note = *t.Note
		}
		row(tw, t.Id.String(), string(t.Kind), t.Value, fmt.Sprint(t.IncludeSubdomains), orDash(note), fmtTime(t.CreatedAt))
	}
	tw.Flush()
}

// changeFlags are the filters of the change lists.
type changeFlags struct {
	kinds, since, until *string
	p                   page
}

func newChangeFlags(fs *flagSet) changeFlags {
	return changeFlags{
		kinds: fs.String("kind", "", "comma-separated change kinds: asset_appeared, asset_disappeared, port_opened, port_closed, certificate_changed, http_status_changed"),
		since: fs.String("since", "", "only changes detected at or after this time (RFC 3339)"),
		until: fs.String("until", "", "only changes detected before this time (RFC 3339)"),
		p:     pageFlags(fs),
	}
}

// params are the filters as the API takes them; the scan and exposure
// change lists take the same ones.
func (f changeFlags) params() (*apiclient.ListExposureChangesParams, error) {
	var p apiclient.ListExposureChangesParams
	if *f.kinds != "" {
		var ks apiclient.ChangeKinds
		for _, k := range splitList(*f.kinds) {
			ks = append(ks, apiclient.ChangeKind(k))
		}
		p.Kind = &ks
	}
	parse := func(name, v string) (*time.Time, error) {
		if v == "" {
			return nil, nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--%s: %v", name, err)}
		}
		return &t, nil
	}
	var err error
	if p.Since, err = parse("since", *f.since); err != nil {
		return nil, err
	}
	if p.Until, err = parse("until", *f.until); err != nil {
		return nil, err
	}
	p.Limit, p.Cursor = f.p.params()
	return &p, nil
}

func scansChanges(fs *flagSet) ctlRun {
	f := newChangeFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("scan", args[0])
		if err != nil {
			return err
		}
		p, err := f.params()
		if err != nil {
			return err
		}
		res, err := c.api.ListScanChangesWithResponse(ctx, id, (*apiclient.ListScanChangesParams)(p))
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { c.writeChanges(w, res.JSON200) })
	}
}

func orgsExposureChanges(fs *flagSet) ctlRun {
	f := newChangeFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		org, _, err := parseOrgAndID(args, "")
		if err != nil {
			return err
		}
		p, err := f.params()
		if err != nil {
			return err
		}
		res, err := c.api.ListExposureChangesWithResponse(ctx, org, p)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { c.writeChanges(w, res.JSON200) })
	}
}

// writeChanges prints a page of changes and how to get the next.
func (c *ctl) writeChanges(w io.Writer, list *apiclient.AssetChangeList) {
	writeChangeTable(w, list.Items)
	c.morePages(list.NextCursor)
}

func writeChangeTable(w io.Writer, changes []apiclient.AssetChange) {
	tw := newTable(w)
	row(tw, "DETECTED", "KIND", "ASSET", "BEFORE", "AFTER", "SCAN")
	for _, ch := range changes {
		obj := func(o *apiclient.JSONObject) string {
			if o == nil || string(*o) == "{}" {
				return "-"
			}
			return string(*o)
		}
		row(tw, fmtTime(ch.DetectedAt), string(ch.Kind), ch.Asset.Type+":"+ch.Asset.Value, obj(ch.Before), obj(ch.After), ch.ScanId.String())
	}
	tw.Flush()
}

func exclusionsList(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		org, _, err := parseOrgAndID(args, "")
		if err != nil {
			return err
		}
		l, cur := p.params()
		res, err := c.api.ListThreatExclusionsWithResponse(ctx, org, &apiclient.ListThreatExclusionsParams{Limit: l, Cursor: cur})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeExclusionTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func exclusionsCreate(fs *flagSet) ctlRun {
	asset := fs.String("asset", "", "only this asset (id)")
	assetPattern := fs.String("asset-pattern", "", "only assets whose normalized value matches this glob (* and ?)")
	externalID := fs.String("external-id", "", "only threats with this external id")
	titlePattern := fs.String("title-pattern", "", "only threats whose title matches this glob")
	severity := fs.String("severity", "", "only threats of this severity")
	reason := fs.String("reason", "", "why (required)")
	expires := fs.String("expires", "", "when it stops applying (RFC 3339); default never")
	return func(ctx context.Context, c *ctl, args []string) error {
		org, _, err := parseOrgAndID(args, "")
		if err != nil {
			return err
		}
		if *reason == "" {
			return usageError{"exclusions create needs --reason and at least one of --asset, --asset-pattern, --external-id, --title-pattern and --severity"}
		}
		req := apiclient.CreateThreatExclusionRequest{Reason: *reason}
		if req.AssetId, err = optionalID("asset", *asset); err != nil {
			return err
		}
		opt := func(s string) *string {
			if s == "" {
				return nil
			}
			return &s
		}
		req.AssetPattern, req.ExternalId, req.TitlePattern = opt(*assetPattern), opt(*externalID), opt(*titlePattern)
		if *severity != "" {
			req.Severity = (*apiclient.Severity)(severity)
		}
		if *expires != "" {
			t, err := time.Parse(time.RFC3339, *expires)
			if err != nil {
				return usageError{fmt.Sprintf("--expires: %v", err)}
			}
			req.ExpiresAt = &t
		}
		res, err := c.api.CreateThreatExclusionWithResponse(ctx, org, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeExclusionTable(w, []apiclient.ThreatExclusion{*res.JSON201}) })
	}
}

func exclusionsDelete(ctx context.Context, c *ctl, args []string) error {
	org, id, err := parseOrgAndID(args, "exclusion")
	if err != nil {
		return err
	}
	res, err := c.api.DeleteThreatExclusionWithResponse(ctx, org, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeExclusionTable(w, []apiclient.ThreatExclusion{*res.JSON200}) })
}

func writeExclusionTable(w io.Writer, list []apiclient.ThreatExclusion) {
	tw := newTable(w)
	row(tw, "ID", "MATCHES", "REASON", "EXPIRES", "CREATED")
	for _, e := range list {
		var m []string
		if e.AssetId != nil {
			m = append(m, "asset="+e.AssetId.String())
		}
		for _, kv := range [][2]*string{{ptrTo("asset~"), e.AssetPattern}, {ptrTo("external_id="), e.ExternalId}, {ptrTo("title~"), e.TitlePattern}} {
			if kv[1] != nil {
				m = append(m, *kv[0]+*kv[1])
			}
		}
		if e.Severity != nil {
			m = append(m, "severity="+string(*e.Severity))
		}
		expires := "never"
		if e.ExpiresAt != nil {
			expires = fmtTime(*e.ExpiresAt)
		}
		row(tw, e.Id.String(), strings.Join(m, " "), e.Reason, expires, fmtTime(e.CreatedAt))
	}
	tw.Flush()
}

func ptrTo[T any](v T) *T { return &v }

func orgsAssetEdges(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	asset := fs.String("asset", "", "only the edges from or to this asset (id)")
	return func(ctx context.Context, c *ctl, args []string) error {
		org, _, err := parseOrgAndID(args, "")
		if err != nil {
			return err
		}
		params := &apiclient.ListAssetEdgesParams{}
		params.Limit, params.Cursor = p.params()
		if params.AssetId, err = optionalID("asset", *asset); err != nil {
			return err
		}
		res, err := c.api.ListAssetEdgesWithResponse(ctx, org, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			tw := newTable(w)
			row(tw, "FROM", "RELATION", "TO", "FIRST SEEN", "LAST SEEN")
			for _, e := range res.JSON200.Items {
				row(tw, e.From.Type+":"+e.From.Value, string(e.Relation), e.To.Type+":"+e.To.Value, fmtTime(e.FirstSeenAt), fmtTime(e.LastSeenAt))
			}
			tw.Flush()
			c.morePages(res.JSON200.NextCursor)
		})
	}
}
