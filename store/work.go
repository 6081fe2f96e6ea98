package store

import (
	"github.com/worker-gateway/gateway/store/internal/work"
)

// Creating tasks and scans is store/internal/work's, shared by CreateTask,
// CreateScan (tasks.go, scans.go) and a schedule's fire; its types are
// named here, so callers do not change. What a task or scan does after it
// is created (reads, cancel, redrive) is this package's.
type (
	Task             = work.Task
	CreateTaskParams = work.CreateTaskParams
	Scan             = work.Scan
	ScanJob          = work.ScanJob
	ScanPlugin       = work.ScanPlugin
	CreateScanParams = work.CreateScanParams
	Trigger          = work.Trigger
	TriggerKind      = work.TriggerKind
)

// Trigger kinds.
const (
	TriggerSchedule = work.TriggerSchedule
	TriggerManual   = work.TriggerManual
	TriggerAPI      = work.TriggerAPI
)
