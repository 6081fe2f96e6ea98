package console

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

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

// pageSize is the console's page of a list; redriveMax the most tasks one
// redrive takes.
const (
	pageSize   = 50
	redriveMax = 200
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
	Organizations []api.Organization
	States        []api.TaskState
	Types         []api.TaskType
	Triggers      []api.TriggerKind
}

func (c *Console) tasks(w http.ResponseWriter, r *http.Request, s *session) {
	f := filterFrom(r)
	params, err := c.taskParams(f, pageSize, r.URL.Query().Get("cursor"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListTasks200JSONResponse](c.cfg.API.ListTasks(r.Context(), api.ListTasksRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := tasksData{Filter: f, Tasks: list.Items, Organizations: c.organizationList(r), States: taskStates, Types: taskTypes, Triggers: triggerKinds}
	if list.NextCursor != nil && *list.NextCursor != "" {
		q := f.query()
		q.Set("cursor", *list.NextCursor)
		d.NextPage = Prefix + "/tasks?" + q.Encode()
	}
	if f.State == string(api.TaskStateFailedTerminal) || f.State == string(api.TaskStateCancelled) {
		d.RedriveLink = Prefix + "/tasks/redrive?" + f.query().Encode()
	}
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

type redriveData struct {
	Filter taskFilter
	Tasks  []api.Task
	More   bool
	Back   string
	// Outcomes, after a redrive: each task and what became of it.
	Outcomes []redriveOutcome
}

type redriveOutcome struct {
	TaskID uuid.UUID
	Error  string
}

// redriveConfirm lists the failed (or cancelled) tasks a filter selects and
// asks before queueing them all again.
func (c *Console) redriveConfirm(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.MayManageTasks() {
		c.refuse(w, r, store.ErrForbidden, "Your API token may not retry tasks (it needs the producer or admin permission).")
		return
	}
	f := filterFrom(r)
	if f.State != string(api.TaskStateFailedTerminal) && f.State != string(api.TaskStateCancelled) {
		c.refuse(w, r, store.ErrInvalid, "Redrive takes failed or cancelled tasks: filter the task list by one of those states first.")
		return
	}
	params, err := c.taskParams(f, redriveMax, "")
	if err != nil {
		c.fail(w, r, err)
		return
	}
	list, err := answer[api.ListTasks200JSONResponse](c.cfg.API.ListTasks(r.Context(), api.ListTasksRequestObject{Params: params}))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "redrive", s, "Redrive tasks", redriveData{Filter: f, Tasks: list.Items,
		More: list.NextCursor != nil && *list.NextCursor != "", Back: Prefix + "/tasks?" + f.query().Encode()})
}

// redrive retries every task the confirmation page listed, each as the
// API's retry (same permission, scope and audit event).
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, s *session) {
	if err := r.ParseForm(); err != nil {
		c.refuse(w, r, store.ErrInvalid, "The form could not be read.")
		return
	}
	ids := r.PostForm["task"]
	if len(ids) == 0 || len(ids) > redriveMax {
		c.refuse(w, r, store.ErrInvalid, "Choose between 1 and 200 tasks to redrive.")
		return
	}
	var outcomes []redriveOutcome
	failed := false
	for _, raw := range ids {
		id, err := uuid.Parse(raw)
		if err != nil {
			c.refuse(w, r, store.ErrInvalid, "A task id is not valid.")
			return
		}
		o := redriveOutcome{TaskID: id}
		if _, err := answer[api.RetryTask200JSONResponse](c.cfg.API.RetryTask(r.Context(), api.RetryTaskRequestObject{TaskId: id})); err != nil {
			_, o.Error = c.cfg.Problem(err)
			failed = true
		}
		outcomes = append(outcomes, o)
	}
	if !failed {
		seeOther(w, r, Prefix+"/tasks", "redriven")
		return
	}
	c.render(w, r, http.StatusOK, "redrive", s, "Redrive tasks", redriveData{Outcomes: outcomes, Back: Prefix + "/tasks"})
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
