package store

import (
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// SQLFromGoFile is where SQLFromGo's text lives, among the database's
// functions (migrations/functions, applied after the numbered migrations).
const SQLFromGoFile = "00_from_go.gen.sql"

// SQLFromGo is the text of migrations/functions/00_from_go.gen.sql: the SQL
// functions that spell, for the database's own functions, what Go defines —
// the wake-up channel and payloads (internal/core/notify.go), the task and
// scan states and the scan rules (internal/core: transitions.go,
// scantransitions.go), the queue row of a task (internal/core/queue.go),
// the change kinds of scan history (scanhistory.go).
// Webhook event types stay literal in the calls of webhook_emit, where
// TestEveryEventHasOneEmitter (tests/security) reads them and checks each
// against the catalogue (webhooks.go). A function in migrations/functions calls these and
// writes no such literal of its own, so Go and SQL never both spell one.
// TestSQLFromGo keeps the file equal to this text (UPDATE_SQL_FROM_GO=1
// rewrites it).
func SQLFromGo() string {
	var b strings.Builder
	b.WriteString("-- Code generated from Go by store.SQLFromGo (store/sqlfromgo.go); DO NOT EDIT.\n")
	b.WriteString("-- Regenerate: UPDATE_SQL_FROM_GO=1 go test ./store -run TestSQLFromGo\n")
	fn := func(comment, signature, returns, attrs, body string) {
		fmt.Fprintf(&b, "\n-- %s\nCREATE OR REPLACE FUNCTION %s RETURNS %s\nLANGUAGE sql %s AS $$\n    %s\n$$;\n",
			comment, signature, returns, attrs, body)
	}
	const pure = "IMMUTABLE PARALLEL SAFE"

	wake := func(kind WakeupKind, name, comment string, withCount bool) {
		signature := name + "(p_org uuid)"
		if withCount {
			signature = name + "(p_org uuid, p_count integer)"
		}
		fn(comment+" (store.Wakeup)", signature, "void", "VOLATILE",
			"SELECT pg_notify("+sqlLiteral(NotifyChannel)+", "+wakeupPayloadSQL(kind)+")")
	}
	wake(WakeOrganization, "gateway_wake_organization", "p_count tasks of p_org became leasable now", true)
	wake(WakeSchedules, "gateway_wake_schedules", "a schedule of p_org may fire", false)
	wake(WakeWebhooks, "gateway_wake_webhooks", "a webhook delivery of p_org was queued", false)

	fn("the queue row of task p_task, when it is leasable (store.EnqueueSQL)", "gateway_enqueue_task(p_task uuid)", "void", "VOLATILE",
		EnqueueSQL("(SELECT * FROM worker_tasks WHERE id = p_task) t"))

	fn("a task state is final (store.TaskState.IsFinal)", "task_state_is_final(p_state text)", "boolean", pure,
		"SELECT p_state IN ("+core.SQLStates(core.FinalTaskStates()...)+")")
	var cases strings.Builder
	for _, s := range allTaskStates() {
		fmt.Fprintf(&cases, " WHEN %s THEN %s", sqlLiteral(string(s)), sqlLiteral(string(ScanJobStateOf[s])))
	}
	fn("the state of a scan job whose task is in p_task_state (store.ScanJobStateOf)", "scan_job_state_of(p_task_state text)", "text", pure,
		"SELECT CASE p_task_state"+cases.String()+" END")
	fn("a task in p_task_state starts its scan job and its scan (core.ScanStartedBy)", "scan_started_by(p_task_state text)", "boolean", pure,
		"SELECT p_task_state IN ("+core.SQLStates(core.ScanStartedBy...)+")")
	fn("a scan state is final (core.FinalScanStates)", "scan_state_is_final(p_state text)", "boolean", pure,
		"SELECT p_state IN ("+core.SQLStates(core.FinalScanStates...)+")")
	for _, s := range []ScanState{ScanPending, ScanRunning, ScanCompleted, ScanFailed, ScanCancelled} {
		fn("store.ScanState", "scan_state_"+string(s)+"()", "text", pure, "SELECT "+sqlLiteral(string(s)))
	}
	for _, s := range []ScanJobState{ScanJobPending, ScanJobRunning, ScanJobCompleted, ScanJobFailed, ScanJobCancelled} {
		fn("store.ScanJobState", "scan_job_state_"+string(s)+"()", "text", pure, "SELECT "+sqlLiteral(string(s)))
	}
	for _, kind := range ChangeKinds {
		fn("store.ChangeKinds", "scan_change_"+kind+"()", "text", pure, "SELECT "+sqlLiteral(kind))
	}
	return b.String()
}

// allTaskStates lists every task state, in a fixed order.
func allTaskStates() []TaskState {
	return []TaskState{TaskPending, TaskLeased, TaskRunning, TaskCancelling, TaskCancelled, TaskCompleted, TaskRetryWait, TaskFailedTerminal}
}

// wakeupPayloadSQL is the SQL expression of kind's payload over p_org (and
// p_count): Wakeup.Payload's own text, with the organization and the count
// spliced in, so the format is written once, in Go.
func wakeupPayloadSQL(kind WakeupKind) string {
	org := uuid.MustParse("00000000-0000-0000-0000-0000000c0de1")
	const count = 987654321
	payload := Wakeup{Kind: kind, Organization: org, Count: count}.Payload()
	expr := sqlLiteral(payload)
	expr = strings.ReplaceAll(expr, org.String(), "' || p_org::text || '")
	expr = strings.ReplaceAll(expr, fmt.Sprint(count), "' || p_count::text || '")
	return strings.TrimSuffix(strings.TrimPrefix(expr, "'' || "), " || ''")
}

// sqlLiteral quotes s as an SQL string literal.
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
