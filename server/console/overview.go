package console

import (
	"net/http"
	"sort"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server/api"
)

// overviewData is the overview's content: the stats, the queue as one row
// per organization, and the organizations' names.
type overviewData struct {
	Stats  api.Stats
	States []api.TaskState
	Rows   []queueRow
}

type queueRow struct {
	OrganizationID uuid.UUID
	Name           string
	Counts         []int64
	Total          int64
}

// queueStates are the unfinished states, in the order a task goes through
// them.
var queueStates = []api.TaskState{api.TaskStatePending, api.TaskStateRetryWait, api.TaskStateLeased, api.TaskStateRunning, api.TaskStateCancelling}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.overviewData(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", s, "Overview", d)
}

// overviewStats is the part of the overview htmx refreshes.
func (c *Console) overviewStats(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.overviewData(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.fragment(w, r, "overview", "stats", s, d)
}

func (c *Console) overviewData(r *http.Request) (overviewData, error) {
	st, err := answer[api.GetStats200JSONResponse](c.cfg.API.GetStats(r.Context(), api.GetStatsRequestObject{}))
	if err != nil {
		return overviewData{}, err
	}
	names := c.organizationNames(r)
	rows := map[uuid.UUID]*queueRow{}
	for _, q := range st.Queue {
		row := rows[q.OrganizationId]
		if row == nil {
			row = &queueRow{OrganizationID: q.OrganizationId, Name: names[q.OrganizationId], Counts: make([]int64, len(queueStates))}
			rows[q.OrganizationId] = row
		}
		for i, state := range queueStates {
			if state == q.State {
				row.Counts[i] += q.Count
			}
		}
		row.Total += q.Count
	}
	d := overviewData{Stats: api.Stats(st), States: queueStates}
	for _, row := range rows {
		d.Rows = append(d.Rows, *row)
	}
	sort.Slice(d.Rows, func(i, j int) bool {
		if d.Rows[i].Total != d.Rows[j].Total {
			return d.Rows[i].Total > d.Rows[j].Total
		}
		return d.Rows[i].OrganizationID.String() < d.Rows[j].OrganizationID.String()
	})
	return d, nil
}

// organizationNames maps the organizations the caller sees (the first
// pages) to their names; a name it cannot read is shown as an id.
func (c *Console) organizationNames(r *http.Request) map[uuid.UUID]string {
	names := map[uuid.UUID]string{}
	for _, o := range c.organizationList(r) {
		names[o.Id] = o.Name
	}
	return names
}

// organizationList is up to 500 organizations the caller may see, for
// names and filters.
func (c *Console) organizationList(r *http.Request) []api.Organization {
	var out []api.Organization
	var cursor *string
	limit := 100
	for range 5 {
		page, err := answer[api.ListOrganizations200JSONResponse](c.cfg.API.ListOrganizations(r.Context(),
			api.ListOrganizationsRequestObject{Params: api.ListOrganizationsParams{Cursor: cursor, Limit: &limit}}))
		if err != nil {
			return out
		}
		out = append(out, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	return out
}
