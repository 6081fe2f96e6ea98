package console

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server/api"
)

type schedulesData struct {
	Schedules []api.Schedule
	NextPage  string
	Names     map[uuid.UUID]string
}

func (c *Console) schedules(w http.ResponseWriter, r *http.Request, s *session) {
	var params api.ListSchedulesParams
	if err := c.cfg.BindQuery("/v1/schedules", pageQuery(r), &params); err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListSchedules200JSONResponse](c.cfg.API.ListSchedules(r.Context(), api.ListSchedulesRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := schedulesData{Schedules: list.Items, Names: c.organizationNames(r)}
	if list.NextCursor != nil && *list.NextCursor != "" {
		d.NextPage = Prefix + "/schedules?cursor=" + *list.NextCursor
	}
	c.render(w, r, http.StatusOK, "schedules", s, "Schedules", d)
}

type scheduleData struct {
	Schedule api.Schedule
	Next     []api.ScheduleSlot
	Fires    []api.ScheduleFire
	// DeleteForm asks to confirm the deletion.
	DeleteForm bool
}

// schedule shows a schedule, its next fires and its latest history.
func (c *Console) schedule(w http.ResponseWriter, r *http.Request, s *session) {
	d, ok := c.loadSchedule(w, r)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "schedule", s, "Schedule "+d.Schedule.Name, d)
}

// deleteScheduleForm shows the schedule with the deletion to confirm.
func (c *Console) deleteScheduleForm(w http.ResponseWriter, r *http.Request, s *session) {
	d, ok := c.loadSchedule(w, r)
	if !ok {
		return
	}
	d.DeleteForm = true
	c.render(w, r, http.StatusOK, "schedule", s, "Delete schedule "+d.Schedule.Name, d)
}

// deleteSchedule deletes a schedule once the form confirmed it.
func (c *Console) deleteSchedule(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	resp, err := c.cfg.API.DeleteSchedule(r.Context(), api.DeleteScheduleRequestObject{ScheduleId: id})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if _, ok := resp.(api.DeleteSchedule204Response); !ok {
		c.fail(w, r, errUnexpected)
		return
	}
	seeOther(w, r, Prefix+"/schedules", "deleted")
}

// loadSchedule reads a schedule, its next fires and its latest history.
func (c *Console) loadSchedule(w http.ResponseWriter, r *http.Request) (scheduleData, bool) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return scheduleData{}, false
	}
	ctx := r.Context()
	sc, err := answer[api.GetSchedule200JSONResponse](c.cfg.API.GetSchedule(ctx, api.GetScheduleRequestObject{ScheduleId: id}))
	if err != nil {
		c.fail(w, r, err)
		return scheduleData{}, false
	}
	d := scheduleData{Schedule: api.Schedule(sc)}
	count := 5
	if next, err := answer[api.ListScheduleNext200JSONResponse](c.cfg.API.ListScheduleNext(ctx,
		api.ListScheduleNextRequestObject{ScheduleId: id, Params: api.ListScheduleNextParams{Count: &count}})); err == nil {
		d.Next = next.Items
	}
	limit := 20
	if fires, err := answer[api.ListScheduleFires200JSONResponse](c.cfg.API.ListScheduleFires(ctx,
		api.ListScheduleFiresRequestObject{ScheduleId: id, Params: api.ListScheduleFiresParams{Limit: &limit}})); err == nil {
		d.Fires = fires.Items
	}
	return d, true
}

func (c *Console) pauseSchedule(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	if _, err := answer[api.PauseSchedule200JSONResponse](c.cfg.API.PauseSchedule(r.Context(), api.PauseScheduleRequestObject{ScheduleId: id})); err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/schedules/"+id.String(), "paused")
}

func (c *Console) resumeSchedule(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	if _, err := answer[api.ResumeSchedule200JSONResponse](c.cfg.API.ResumeSchedule(r.Context(), api.ResumeScheduleRequestObject{ScheduleId: id})); err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/schedules/"+id.String(), "resumed")
}

// runSchedule runs a schedule now (a manual fire, as the API's run). A
// repeated post runs again, as a second click would.
func (c *Console) runSchedule(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	resp, err := c.cfg.API.RunSchedule(r.Context(), api.RunScheduleRequestObject{ScheduleId: id})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	switch resp.(type) {
	case api.RunSchedule200JSONResponse, api.RunSchedule201JSONResponse:
	default:
		c.fail(w, r, errUnexpected)
		return
	}
	seeOther(w, r, Prefix+"/schedules/"+id.String(), "run")
}
