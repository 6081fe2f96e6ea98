package console

import (
	"net/http"
	"net/url"

	"github.com/worker-gateway/gateway/server/api"
)

type auditData struct {
	Action   string
	Target   string
	Events   []api.AuditEvent
	NextPage string
}

// audit pages the audit log, newest first, by action and target.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	d := auditData{Action: q.Get("action"), Target: q.Get("target_id")}
	var params api.ListAuditEventsParams
	if err := c.cfg.BindQuery("/v1/audit-events", pageQuery(r, "action", "target_id"), &params); err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListAuditEvents200JSONResponse](c.cfg.API.ListAuditEvents(r.Context(), api.ListAuditEventsRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d.Events = list.Items
	if list.NextCursor != nil && *list.NextCursor != "" {
		next := url.Values{"cursor": {*list.NextCursor}}
		if d.Action != "" {
			next.Set("action", d.Action)
		}
		if d.Target != "" {
			next.Set("target_id", d.Target)
		}
		d.NextPage = Prefix + "/audit?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "audit", s, "Audit log", d)
}
