package console

import (
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

type organizationsData struct {
	Organizations []api.Organization
	NextPage      string
}

func (c *Console) organizations(w http.ResponseWriter, r *http.Request, s *session) {
	var params api.ListOrganizationsParams
	if err := c.cfg.BindQuery("/v1/organizations", pageQuery(r), &params); err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListOrganizations200JSONResponse](c.cfg.API.ListOrganizations(r.Context(), api.ListOrganizationsRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := organizationsData{Organizations: list.Items}
	if list.NextCursor != nil && *list.NextCursor != "" {
		d.NextPage = Prefix + "/organizations?cursor=" + *list.NextCursor
	}
	c.render(w, r, http.StatusOK, "organizations", s, "Organizations", d)
}

type organizationData struct {
	Organization api.Organization
	Workers      []api.OrganizationWorker
	Assets       []api.Asset
	Threats      []api.Threat
	// Assignable are the workers the assign form offers: not revoked and
	// not assigned here yet (the first assignableMax of them, by name).
	Assignable     []api.Worker
	MoreAssignable bool
}

// assignableMax bounds the assign form's list of workers (the API's
// largest page).
const assignableMax = 500

// organization shows an organization's workers (its assignments, each
// with whether it can take the organization's tasks and why), and the
// latest assets and threats its scans found.
func (c *Console) organization(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	ctx := r.Context()
	org, err := answer[api.GetOrganization200JSONResponse](c.cfg.API.GetOrganization(ctx, api.GetOrganizationRequestObject{OrganizationId: id}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := organizationData{Organization: api.Organization(org)}
	if list, err := answer[api.ListOrganizationWorkers200JSONResponse](c.cfg.API.ListOrganizationWorkers(ctx,
		api.ListOrganizationWorkersRequestObject{OrganizationId: id})); err == nil {
		d.Workers = list.Items
	}
	if s.MayManageWorkers() {
		d.Assignable, d.MoreAssignable = c.assignableWorkers(r, d.Workers)
	}
	limit := 20
	if list, err := answer[api.ListAssets200JSONResponse](c.cfg.API.ListAssets(ctx,
		api.ListAssetsRequestObject{OrganizationId: id, Params: api.ListAssetsParams{Limit: &limit}})); err == nil {
		d.Assets = list.Items
	}
	if list, err := answer[api.ListThreats200JSONResponse](c.cfg.API.ListThreats(ctx,
		api.ListThreatsRequestObject{OrganizationId: id, Params: api.ListThreatsParams{Limit: &limit}})); err == nil {
		d.Threats = list.Items
	}
	c.render(w, r, http.StatusOK, "organization", s, "Organization "+org.Name, d)
}

// assignableWorkers lists the workers an operator may assign to the
// organization: every worker it sees but the revoked and those assigned
// already.
func (c *Console) assignableWorkers(r *http.Request, assigned []api.OrganizationWorker) ([]api.Worker, bool) {
	limit := assignableMax
	list, err := answer[api.ListWorkers200JSONResponse](c.cfg.API.ListWorkers(r.Context(), api.ListWorkersRequestObject{Params: api.ListWorkersParams{Limit: &limit}}))
	if err != nil {
		return nil, false
	}
	here := map[uuid.UUID]bool{}
	for _, ow := range assigned {
		here[ow.Worker.Id] = true
	}
	var out []api.Worker
	for _, wk := range list.Items {
		if !wk.Revoked && !here[wk.Id] {
			out = append(out, wk)
		}
	}
	slices.SortFunc(out, func(a, b api.Worker) int { return strings.Compare(a.Name, b.Name) })
	return out, list.NextCursor != nil && *list.NextCursor != ""
}

// assignWorker assigns the worker the form names to the organization.
func (c *Console) assignWorker(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	worker, err := uuid.Parse(r.PostFormValue("worker_id"))
	if err != nil {
		c.refuse(w, r, store.ErrInvalid, "The worker id is not valid.")
		return
	}
	if _, err := answer[api.AssignWorker200JSONResponse](c.cfg.API.AssignWorker(r.Context(),
		api.AssignWorkerRequestObject{OrganizationId: id, WorkerId: worker})); err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/organizations/"+id.String(), "assigned")
}

// unassignWorker ends an assignment; the worker's active attempts for the
// organization drain.
func (c *Console) unassignWorker(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	worker, ok := c.pathID(w, r, "worker")
	if !ok {
		return
	}
	drain := api.UnassignWorkerParamsActiveDrain
	if _, err := answer[api.UnassignWorker200JSONResponse](c.cfg.API.UnassignWorker(r.Context(),
		api.UnassignWorkerRequestObject{OrganizationId: id, WorkerId: worker, Params: api.UnassignWorkerParams{Active: &drain}})); err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/organizations/"+id.String(), "unassigned")
}
