package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// The choices the filter form offers (the contract's enums). They only
// fill the form: what a query may hold is checked by the contract
// (Config.BindQuery), as the API checks it.
var (
	taskStates   = []api.TaskState{api.TaskStatePending, api.TaskStateRetryWait, api.TaskStateLeased, api.TaskStateRunning, api.TaskStateCancelling, api.TaskStateCompleted, api.TaskStateFailedTerminal, api.TaskStateCancelled}
	taskTypes    = []api.TaskType{api.TaskTypeScannerPlugin, api.TaskTypeAi}
	triggerKinds = []api.TriggerKind{api.TriggerKindApi, api.TriggerKindSchedule, api.TriggerKindManual}
)

// htmxStopPolling is the status that makes htmx stop polling an element.
const htmxStopPolling = 286

// pageSize is the console's page of a list; bulkMax the most tasks one
// bulk action (redrive, cancel) takes.
const (
	pageSize = 50
	bulkMax  = 200
)

// taskFilter is the task list's query, as the form sends it.
type taskFilter struct {
	Organization string
	State        string
	Type         string
	Scan         string
	Schedule     string
	Trigger      string
}

// listTasks is one page (limit tasks from cursor) of the tasks filter f
// keeps, as the API lists them.
func (c *Console) listTasks(r *http.Request, f taskFilter, limit int, cursor string) (api.ListTasks200JSONResponse, error) {
	params, err := c.taskParams(f, limit, cursor)
	if err != nil {
		return api.ListTasks200JSONResponse{}, err
	}
	return answer[api.ListTasks200JSONResponse](c.cfg.API.ListTasks(r.Context(), api.ListTasksRequestObject{Params: params}))
}

// taskParams reads the filter, a page of limit tasks from cursor, as the API
// reads GET /v1/tasks (the same validation, the same 400 problem).
func (c *Console) taskParams(f taskFilter, limit int, cursor string) (api.ListTasksParams, error) {
	var p api.ListTasksParams
	q := f.query()
	q.Set("limit", strconv.Itoa(limit))
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	err := c.cfg.BindQuery("/v1/tasks", q, &p)
	return p, err
}

// query is the filter as URL parameters (for paging and redrive links).
func (f taskFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"organization_id": f.Organization, "state": f.State, "task_type": f.Type,
		"scan_id": f.Scan, "schedule_id": f.Schedule, "trigger": f.Trigger} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func filterFrom(r *http.Request) taskFilter {
	q := r.URL.Query()
	return taskFilter{Organization: q.Get("organization_id"), State: q.Get("state"), Type: q.Get("task_type"),
		Scan: q.Get("scan_id"), Schedule: q.Get("schedule_id"), Trigger: q.Get("trigger")}
}

type tasksData struct {
	Filter        taskFilter
	Tasks         []api.Task
	NextPage      string
	RedriveLink   string
	CancelLink    string
	Organizations []api.Organization
	// Names are the organizations' names by id, for the list.
	Names    map[uuid.UUID]string
	States   []api.TaskState
	Types    []api.TaskType
	Triggers []api.TriggerKind
}

func (c *Console) tasks(w http.ResponseWriter, r *http.Request, s *session) {
	f := filterFrom(r)
	list, err := c.listTasks(r, f, pageSize, r.URL.Query().Get("cursor"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := tasksData{Filter: f, Tasks: list.Items, Organizations: c.organizationList(r), States: taskStates, Types: taskTypes, Triggers: triggerKinds,
		Names: map[uuid.UUID]string{}}
	for _, o := range d.Organizations {
		d.Names[o.Id] = o.Name
	}
	if list.NextCursor != nil && *list.NextCursor != "" {
		q := f.query()
		q.Set("cursor", *list.NextCursor)
		d.NextPage = Prefix + "/tasks?" + q.Encode()
	}
	d.RedriveLink = redriveAction.link(f)
	d.CancelLink = bulkCancelAction.link(f)
	c.render(w, r, http.StatusOK, "tasks", s, "Tasks", d)
}

type taskData struct {
	Task          api.TaskDetail
	PendingReason string
	Artifacts     []api.File
	Results       []api.StoredResultBatch
	MoreResults   bool
	Log           logView
	Cancellable   bool
	Retryable     bool
}

// logView is one read of an attempt's log, and where the next starts.
type logView struct {
	TaskID  uuid.UUID
	Attempt int
	Offset  int64
	Text    string
	Done    bool
	Missing bool
}

func (c *Console) task(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	ctx := r.Context()
	t, err := answer[api.GetTask200JSONResponse](c.cfg.API.GetTask(ctx, api.GetTaskRequestObject{TaskId: id}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := taskData{Task: api.TaskDetail(t), PendingReason: pendingReasonText(t.PendingReason)}
	switch t.State {
	case api.TaskStatePending, api.TaskStateRetryWait, api.TaskStateLeased, api.TaskStateRunning:
		d.Cancellable = true
	case api.TaskStateFailedTerminal, api.TaskStateCancelled:
		d.Retryable = true
	}
	if files, err := answer[api.ListTaskArtifacts200JSONResponse](c.cfg.API.ListTaskArtifacts(ctx, api.ListTaskArtifactsRequestObject{TaskId: id})); err == nil {
		d.Artifacts = files.Items
	}
	limit := 20
	if res, err := answer[api.ListTaskResults200JSONResponse](c.cfg.API.ListTaskResults(ctx,
		api.ListTaskResultsRequestObject{TaskId: id, Params: api.ListTaskResultsParams{Limit: &limit}})); err == nil {
		d.Results = res.Items
		d.MoreResults = res.NextCursor != nil && *res.NextCursor != ""
	}
	if len(t.Attempts) > 0 {
		// The latest attempt's log, or the one the attempts table links to.
		attempt := t.Attempts[len(t.Attempts)-1].AttemptNumber
		if n, err := strconv.Atoi(r.URL.Query().Get("attempt")); err == nil && n >= 1 && n <= attempt {
			attempt = n
		}
		d.Log = c.readLog(r, id, attempt, 0)
	}
	c.render(w, r, http.StatusOK, "task", s, "Task "+id.String()[:8], d)
}

// readLog reads an attempt's log from offset (never waiting: the page
// polls).
func (c *Console) readLog(r *http.Request, task uuid.UUID, attempt int, offset int64) logView {
	v := logView{TaskID: task, Attempt: attempt, Offset: offset}
	off := int(offset)
	lt, err := answer[api.GetTaskLogs200JSONResponse](c.cfg.API.GetTaskLogs(r.Context(), api.GetTaskLogsRequestObject{
		TaskId: task, Params: api.GetTaskLogsParams{Attempt: &attempt, Offset: &off}}))
	if err != nil {
		v.Missing, v.Done = true, true
		return v
	}
	v.Text, v.Offset, v.Done = lt.Data, lt.NextOffset, lt.Complete
	return v
}

// taskLog is the live log's next piece: htmx appends it and polls again
// until the attempt ends.
func (c *Console) taskLog(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	// Only the attempt and the offset: the piece never waits (the page polls).
	q := r.URL.Query()
	var params api.GetTaskLogsParams
	if err := c.cfg.BindQuery("/v1/tasks/"+id.String()+"/logs", url.Values{"attempt": q["attempt"], "offset": q["offset"]}, &params); err != nil {
		c.fail(w, r, err)
		return
	}
	if params.Attempt == nil || params.Offset == nil {
		c.refuse(w, r, store.ErrInvalid, "The log piece needs its attempt and offset.")
		return
	}
	attempt, offset := *params.Attempt, *params.Offset
	v := c.readLog(r, id, attempt, int64(offset))
	if v.Missing {
		// Gone (pruned, or another organization's): 286 tells htmx to
		// stop polling.
		w.WriteHeader(htmxStopPolling)
		return
	}
	c.fragment(w, r, "task", "log", s, taskData{Log: v})
}

func (c *Console) cancelTask(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	if _, err := answer[api.CancelTask200JSONResponse](c.cfg.API.CancelTask(r.Context(), api.CancelTaskRequestObject{TaskId: id})); err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/tasks/"+id.String(), "cancelled")
}

func (c *Console) retryTask(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	if _, err := answer[api.RetryTask200JSONResponse](c.cfg.API.RetryTask(r.Context(), api.RetryTaskRequestObject{TaskId: id})); err != nil {
		c.fail(w, r, err)
		return
	}
	seeOther(w, r, Prefix+"/tasks/"+id.String(), "retried")
}

// bulkAction is an action on many tasks at once, taken after a
// confirmation page lists the tasks a filter selects: redrive (each a retry)
// or cancel (each a cancellation). Each task goes through the API's own
// handler: the same permission, scope and audit event as one at a time.
type bulkAction struct {
	// Path is the action's confirmation page and form, under /ui/tasks/.
	Path string
	// Title heads the pages; Verb says what happens to each task; Button
	// labels the confirmation.
	Title, Verb, Button string
	// States are the task states a filter must name: the action applies
	// to tasks in them.
	States []api.TaskState
	// Notice is the key of the notice shown when every task was done.
	Notice string
	apply  func(c *Console, ctx context.Context, id uuid.UUID) error
}

var (
	redriveAction = bulkAction{Path: "redrive", Title: "Redrive tasks", Button: "Redrive",
		Verb:   "will be queued again, each as a retry (a fresh attempt budget)",
		States: []api.TaskState{api.TaskStateFailedTerminal, api.TaskStateCancelled}, Notice: "redriven",
		apply: func(c *Console, ctx context.Context, id uuid.UUID) error {
			_, err := answer[api.RetryTask200JSONResponse](c.cfg.API.RetryTask(ctx, api.RetryTaskRequestObject{TaskId: id}))
			return err
		}}
	bulkCancelAction = bulkAction{Path: "cancel", Title: "Cancel tasks", Button: "Cancel",
		Verb:   "will be cancelled (a running attempt is asked to stop and is cancelled once it does)",
		States: []api.TaskState{api.TaskStatePending, api.TaskStateRetryWait, api.TaskStateLeased, api.TaskStateRunning}, Notice: "bulk_cancelled",
		apply: func(c *Console, ctx context.Context, id uuid.UUID) error {
			_, err := answer[api.CancelTask200JSONResponse](c.cfg.API.CancelTask(ctx, api.CancelTaskRequestObject{TaskId: id}))
			return err
		}}
)

// link is the action's confirmation page for the filter, or "" when the
// filter's state is not one the action takes.
func (a bulkAction) link(f taskFilter) string {
	if !slices.Contains(a.States, api.TaskState(f.State)) {
		return ""
	}
	return Prefix + "/tasks/" + a.Path + "?" + f.query().Encode()
}

type bulkData struct {
	Action bulkAction
	Filter taskFilter
	Tasks  []api.Task
	More   bool
	Back   string
	// Outcomes, after the action: each task and what became of it.
	Outcomes []bulkOutcome
}

type bulkOutcome struct {
	TaskID uuid.UUID
	Error  string
}

// bulkConfirm lists the tasks a filter selects for the action and asks
// before applying it to them all.
func (c *Console) bulkConfirm(a bulkAction) sessionHandler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		if !s.MayManageTasks() {
			c.refuse(w, r, store.ErrForbidden, "Your API token may not change tasks (it needs the producer or admin permission).")
			return
		}
		f := filterFrom(r)
		if a.link(f) == "" {
			c.refuse(w, r, store.ErrInvalid, problem.Text(a.Title+" takes tasks in one of these states: "+joinStates(a.States)+". Filter the task list by one of them first."))
			return
		}
		list, err := c.listTasks(r, f, bulkMax, "")
		if err != nil {
			c.fail(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, "bulk", s, a.Title, bulkData{Action: a, Filter: f, Tasks: list.Items,
			More: list.NextCursor != nil && *list.NextCursor != "", Back: Prefix + "/tasks?" + f.query().Encode()})
	}
}

// bulkApply applies the action to every task the confirmation page listed.
func (c *Console) bulkApply(a bulkAction) sessionHandler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, store.ErrInvalid, "The form could not be read.")
			return
		}
		ids := r.PostForm["task"]
		if len(ids) == 0 || len(ids) > bulkMax {
			c.refuse(w, r, store.ErrInvalid, problem.Text(fmt.Sprintf("Choose between 1 and %d tasks.", bulkMax)))
			return
		}
		var outcomes []bulkOutcome
		failed := false
		for _, raw := range ids {
			id, err := uuid.Parse(raw)
			if err != nil {
				c.refuse(w, r, store.ErrInvalid, "A task id is not valid.")
				return
			}
			o := bulkOutcome{TaskID: id}
			if err := a.apply(c, r.Context(), id); err != nil {
				_, o.Error = c.cfg.Problem(err)
				failed = true
			}
			outcomes = append(outcomes, o)
		}
		if !failed {
			seeOther(w, r, Prefix+"/tasks", a.Notice)
			return
		}
		c.render(w, r, http.StatusOK, "bulk", s, a.Title, bulkData{Action: a, Outcomes: outcomes, Back: Prefix + "/tasks"})
	}
}

func joinStates(states []api.TaskState) string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return strings.Join(out, ", ")
}

// downloadFile streams an artifact as the API's download does.
func (c *Console) downloadFile(w http.ResponseWriter, r *http.Request, _ *session) {
	id, ok := c.pathID(w, r, "id")
	if !ok {
		return
	}
	resp, err := c.cfg.API.GetFileContent(r.Context(), api.GetFileContentRequestObject{FileId: id})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// The file is an attachment: never rendered as a page of this origin.
	w.Header().Set("Content-Disposition", "attachment")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox")
	if err := resp.VisitGetFileContentResponse(w); err != nil {
		c.cfg.Logger.Error("console: download", "file_id", id.String(), "error", err.Error())
	}
}
