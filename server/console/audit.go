package console

import (
	"net/http"
	"net/url"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
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
	if len(d.Action) > 100 || len(d.Target) > 100 {
		c.refuse(w, r, store.ErrInvalid, "A filter is longer than 100 characters.")
		return
	}
	limit := pageSize
	params := api.ListAuditEventsParams{Limit: &limit}
	if d.Action != "" {
		params.Action = &d.Action
	}
	if d.Target != "" {
		params.TargetId = &d.Target
	}
	if cur := q.Get("cursor"); cur != "" {
		params.Cursor = &cur
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
