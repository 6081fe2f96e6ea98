package console

import (
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

type workersData struct {
	Workers  []api.Worker
	NextPage string
	Names    map[uuid.UUID]string
}

func (c *Console) workers(w http.ResponseWriter, r *http.Request, s *session) {
	var params api.ListWorkersParams
	if err := c.cfg.BindQuery("/v1/workers", pageQuery(r), &params); err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListWorkers200JSONResponse](c.cfg.API.ListWorkers(r.Context(), api.ListWorkersRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := workersData{Workers: list.Items, Names: c.organizationNames(r)}
	if list.NextCursor != nil && *list.NextCursor != "" {
		d.NextPage = Prefix + "/workers?cursor=" + *list.NextCursor
	}
	c.render(w, r, http.StatusOK, "workers", s, "Workers", d)
}

type workerData struct {
	Worker      api.Worker
	Eligibility []eligibility
	Grants      []api.WorkerGrant
	Names       map[uuid.UUID]string
	// EnrollmentToken is shown once, right after it was issued.
	EnrollmentToken *api.EnrollmentToken
	// RevokeForm asks for a reason before revoking.
	RevokeForm bool
}

// eligibility is whether the worker can take one organization's tasks.
type eligibility struct {
	OrganizationID uuid.UUID
	Name           string
	Eligible       bool
	Reason         string
}

func (c *Console) loadWorker(w http.ResponseWriter, r *http.Request) (workerData, bool) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return workerData{}, false
	}
	ctx := r.Context()
	wk, err := answer[api.GetWorker200JSONResponse](c.cfg.API.GetWorker(ctx, api.GetWorkerRequestObject{WorkerId: id}))
	if err != nil {
		c.fail(w, r, err)
		return workerData{}, false
	}
	d := workerData{Worker: api.Worker(wk), Names: c.organizationNames(r)}
	for _, org := range wk.OrganizationIds {
		list, err := answer[api.ListOrganizationWorkers200JSONResponse](c.cfg.API.ListOrganizationWorkers(ctx,
			api.ListOrganizationWorkersRequestObject{OrganizationId: org}))
		if err != nil {
			continue
		}
		for _, ow := range list.Items {
			if ow.Worker.Id == id {
				d.Eligibility = append(d.Eligibility, eligibility{OrganizationID: org, Name: d.Names[org],
					Eligible: ow.Eligible, Reason: eligibilityText(ow.Reason)})
			}
		}
	}
	if grants, err := answer[api.ListWorkerGrants200JSONResponse](c.cfg.API.ListWorkerGrants(ctx, api.ListWorkerGrantsRequestObject{WorkerId: id})); err == nil {
		d.Grants = grants.Items
	}
	return d, true
}

func (c *Console) worker(w http.ResponseWriter, r *http.Request, s *session) {
	d, ok := c.loadWorker(w, r)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "worker", s, "Worker "+d.Worker.Name, d)
}

func (c *Console) enableWorker(w http.ResponseWriter, r *http.Request, s *session) {
	c.setWorkerEnabled(w, r, true)
}

func (c *Console) disableWorker(w http.ResponseWriter, r *http.Request, s *session) {
	c.setWorkerEnabled(w, r, false)
}

// setWorkerEnabled enables or disables a worker; a disabled worker's
// active attempts drain (finish) rather than being cancelled.
func (c *Console) setWorkerEnabled(w http.ResponseWriter, r *http.Request, enabled bool) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	drain := api.UpdateWorkerParamsActiveDrain
	_, err := answer[api.UpdateWorker200JSONResponse](c.cfg.API.UpdateWorker(r.Context(), api.UpdateWorkerRequestObject{
		WorkerId: id, Params: api.UpdateWorkerParams{Active: &drain}, Body: &api.UpdateWorkerRequest{Enabled: &enabled}}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	notice := "disabled"
	if enabled {
		notice = "enabled"
	}
	seeOther(w, r, Prefix+"/workers/"+id.String(), notice)
}

func (c *Console) revokeWorkerForm(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.MayManageWorkers() {
		c.refuse(w, r, store.ErrForbidden, "Your API token may not revoke workers (it needs the admin permission).")
		return
	}
	d, ok := c.loadWorker(w, r)
	if !ok {
		return
	}
	d.RevokeForm = true
	c.render(w, r, http.StatusOK, "worker", s, "Revoke worker "+d.Worker.Name, d)
}

// revokeWorker revokes a worker for good, with the reason the form gave.
func (c *Console) revokeWorker(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	body := api.RevokeRequest{Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	if err := c.cfg.CheckBody(http.MethodPost, "/v1/workers/"+id.String()+"/revoke", body); err != nil {
		c.fail(w, r, err)
		return
	}
	_, err := answer[api.RevokeWorker200JSONResponse](c.cfg.API.RevokeWorker(r.Context(), api.RevokeWorkerRequestObject{
		WorkerId: id, Body: &body}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/workers/"+id.String(), "revoked")
}

// enrollmentToken issues a one-time enrollment token and shows it on this
// answer only (it is never stored in the clear, and the page is no-store).
func (c *Console) enrollmentToken(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	tok, err := answer[api.CreateEnrollmentToken201JSONResponse](c.cfg.API.CreateEnrollmentToken(r.Context(),
		api.CreateEnrollmentTokenRequestObject{WorkerId: id}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d, ok := c.loadWorker(w, r)
	if !ok {
		return
	}
	et := api.EnrollmentToken(tok)
	d.EnrollmentToken = &et
	c.render(w, r, http.StatusOK, "worker", s, "Worker "+d.Worker.Name, d)
}
