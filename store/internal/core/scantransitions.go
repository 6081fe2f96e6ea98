package core

// ScanState is scans.state.
type ScanState string

const (
	ScanPending   ScanState = "pending"
	ScanRunning   ScanState = "running"
	ScanCompleted ScanState = "completed"
	ScanFailed    ScanState = "failed"
	ScanCancelled ScanState = "cancelled"
)

// ScanJobState is scan_jobs.state.
type ScanJobState string

const (
	ScanJobPending   ScanJobState = "pending"
	ScanJobRunning   ScanJobState = "running"
	ScanJobCompleted ScanJobState = "completed"
	ScanJobFailed    ScanJobState = "failed"
	ScanJobCancelled ScanJobState = "cancelled"
)

// The scan state machine, next to the task's (transitions.go). A scan's
// jobs run one at a time, each as a task; the database moves the scan along
// as its tasks move (migrations/functions: mirror_task_state_to_scan_job,
// advance_scan), with the states and rules below, which it reads from
// functions generated from this file (sqlfromgo.go):
//
//   - a job's state mirrors its task's (ScanJobStateOf);
//   - the scan starts (pending → running) when a job's task is taken by a
//     worker (ScanStartedBy);
//   - when a job's task ends (TaskState.IsFinal), the next pending job gets
//     its task, or, when none is left, the scan ends: completed when some
//     job did not fail (ScanCompleted), failed when all did (ScanFailed);
//   - a cancelled scan (CancelScan) stops where it is (ScanCancelled).
//
// ScanJobStateOf maps every task state to the state of its scan job.
var ScanJobStateOf = map[TaskState]ScanJobState{
	TaskPending:        ScanJobPending,
	TaskRetryWait:      ScanJobPending,
	TaskLeased:         ScanJobRunning,
	TaskRunning:        ScanJobRunning,
	TaskCancelling:     ScanJobRunning,
	TaskCompleted:      ScanJobCompleted,
	TaskFailedTerminal: ScanJobFailed,
	TaskCancelled:      ScanJobCancelled,
}

// ScanStartedBy are the task states that start a job (its started_at) and
// its pending scan: a worker holds the task and no cancel was asked.
var ScanStartedBy = []TaskState{TaskLeased, TaskRunning}

// ActiveScanStates are the states of a scan that has not ended.
var ActiveScanStates = []ScanState{ScanPending, ScanRunning}

// FinalScanStates are the states a scan ends in; advance_scan leaves them.
var FinalScanStates = []ScanState{ScanCompleted, ScanFailed, ScanCancelled}
