package console

import (
	"net/http"

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

type scanData struct {
	Scan    api.Scan
	Done    int
	Threats []api.Threat
	Assets  []api.Asset
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
	d := scanData{Scan: api.Scan(sc)}
	for _, j := range sc.Jobs {
		if j.State == api.ScanStateCompleted || j.State == api.ScanStateFailed || j.State == api.ScanStateCancelled {
			d.Done++
		}
	}
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
