package console

import (
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server/api"
)

type scansData struct {
	Scans    []api.Scan
	NextPage string
	Names    map[uuid.UUID]string
}

func (c *Console) scans(w http.ResponseWriter, r *http.Request, s *session) {
	var params api.ListScansParams
	if err := c.cfg.BindQuery("/v1/scans", pageQuery(r), &params); err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListScans200JSONResponse](c.cfg.API.ListScans(r.Context(), api.ListScansRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := scansData{Scans: list.Items, Names: c.organizationNames(r)}
	if list.NextCursor != nil && *list.NextCursor != "" {
		d.NextPage = Prefix + "/scans?cursor=" + *list.NextCursor
	}
	c.render(w, r, http.StatusOK, "scans", s, "Scans", d)
}

// jobsDone counts a scan's jobs that have ended (its progress).
func jobsDone(jobs []api.ScanJob) int {
	n := 0
	for _, j := range jobs {
		if j.State == api.ScanStateCompleted || j.State == api.ScanStateFailed || j.State == api.ScanStateCancelled {
			n++
		}
	}
	return n
}

type scanData struct {
	Scan    api.Scan
	Done    int
	Threats []api.Threat
	Assets  []api.Asset
	// Changes is a page of what this scan found changed against the
	// previous completed scan of the same scope; ChangesNext the next page.
	Changes     []api.AssetChange
	ChangesNext string
}

// scan shows a scan's jobs (its progress) and the latest assets and threats
// of its organization.
func (c *Console) scan(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	ctx := r.Context()
	sc, err := answer[api.GetScan200JSONResponse](c.cfg.API.GetScan(ctx, api.GetScanRequestObject{ScanId: id}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var changeParams api.ListScanChangesParams
	changesPath := "/v1/scans/" + id.String() + "/changes"
	if err := c.cfg.BindQuery(changesPath, pageQuery(r), &changeParams); err != nil {
		c.fail(w, r, err)
		return
	}
	d := scanData{Scan: api.Scan(sc)}
	changes, err := answer[api.ListScanChanges200JSONResponse](c.cfg.API.ListScanChanges(ctx, api.ListScanChangesRequestObject{ScanId: id, Params: changeParams}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d.Changes = changes.Items
	if changes.NextCursor != nil && *changes.NextCursor != "" {
		d.ChangesNext = Prefix + "/scans/" + id.String() + "?" + url.Values{"cursor": {*changes.NextCursor}}.Encode() + "#changes-h"
	}
	d.Done = jobsDone(sc.Jobs)
	limit := 20
	if list, err := answer[api.ListThreats200JSONResponse](c.cfg.API.ListThreats(ctx,
		api.ListThreatsRequestObject{OrganizationId: sc.OrganizationId, Params: api.ListThreatsParams{Limit: &limit}})); err == nil {
		d.Threats = list.Items
	}
	if list, err := answer[api.ListAssets200JSONResponse](c.cfg.API.ListAssets(ctx,
		api.ListAssetsRequestObject{OrganizationId: sc.OrganizationId, Params: api.ListAssetsParams{Limit: &limit}})); err == nil {
		d.Assets = list.Items
	}
	c.render(w, r, http.StatusOK, "scan", s, "Scan "+id.String()[:8], d)
}

// scanProgress is the scan page's progress section alone: htmx polls it
// while the scan runs (the section stops polling once the scan ended).
func (c *Console) scanProgress(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	sc, err := answer[api.GetScan200JSONResponse](c.cfg.API.GetScan(r.Context(), api.GetScanRequestObject{ScanId: id}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.fragment(w, r, "scan", "progress", s, scanData{Scan: api.Scan(sc), Done: jobsDone(sc.Jobs)})
}

type changesData struct {
	Organization api.Organization
	Kinds        []api.ChangeKind
	// Chosen are the kinds the filter keeps (none: every kind).
	Chosen   map[api.ChangeKind]bool
	Changes  []api.AssetChange
	NextPage string
}

// exposureChanges is an organization's exposure-change timeline, newest
// first, filtered by kind, a page at a time.
func (c *Console) exposureChanges(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	ctx := r.Context()
	var params api.ListExposureChangesParams
	if err := c.cfg.BindQuery("/v1/organizations/"+id.String()+"/exposure-changes", pageQuery(r, "kind"), &params); err != nil {
		c.fail(w, r, err)
		return
	}
	org, err := answer[api.GetOrganization200JSONResponse](c.cfg.API.GetOrganization(ctx, api.GetOrganizationRequestObject{OrganizationId: id}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListExposureChanges200JSONResponse](c.cfg.API.ListExposureChanges(ctx,
		api.ListExposureChangesRequestObject{OrganizationId: id, Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := changesData{Organization: api.Organization(org), Kinds: changeKinds, Chosen: map[api.ChangeKind]bool{}, Changes: list.Items}
	next := url.Values{}
	if params.Kind != nil {
		for _, k := range *params.Kind {
			d.Chosen[k] = true
			next.Add("kind", string(k))
		}
	}
	if list.NextCursor != nil && *list.NextCursor != "" {
		next.Set("cursor", *list.NextCursor)
		d.NextPage = Prefix + "/organizations/" + id.String() + "/changes?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "changes", s, "Exposure changes of "+org.Name, d)
}
