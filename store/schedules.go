package store

import (
	"github.com/worker-gateway/gateway/store/internal/schedules"
)

// Schedules are the schedules domain's (store/internal/schedules): the
// Store embeds its Calendar, so its verbs (CreateSchedule, UpdateSchedule,
// PauseSchedule, ResumeSchedule, DeleteSchedule, GetSchedule,
// ListSchedules, ScheduleFires, NextFireTimes, RunScheduleNow,
// FireDueSchedules, NextScheduleFireAt, SetScheduleLimits) are the
// Store's, and its types are named here.
type (
	OverlapPolicy      = schedules.OverlapPolicy
	CatchUpPolicy      = schedules.CatchUpPolicy
	ScheduleKind       = schedules.ScheduleKind
	ScheduleTiming     = schedules.ScheduleTiming
	ScheduleDefinition = schedules.ScheduleDefinition
	ScheduledScan      = schedules.ScheduledScan
	ScheduledPlugin    = schedules.ScheduledPlugin
	ScheduledTask      = schedules.ScheduledTask
	ScheduleParams     = schedules.ScheduleParams
	Schedule           = schedules.Schedule
	ScheduleFire       = schedules.ScheduleFire
	ScheduleSlot       = schedules.ScheduleSlot
	RunScheduleParams  = schedules.RunScheduleParams
	NextScheduleFire   = schedules.NextScheduleFire
	ScheduleLimits     = schedules.ScheduleLimits
)

// Overlap policies.
const (
	OverlapSkip     = schedules.OverlapSkip
	OverlapAllow    = schedules.OverlapAllow
	OverlapQueueOne = schedules.OverlapQueueOne
)

// Catch-up policies.
const (
	CatchUpOnce = schedules.CatchUpOnce
	CatchUpSkip = schedules.CatchUpSkip
)

// Schedule kinds.
const (
	ScheduleScan = schedules.ScheduleScan
	ScheduleTask = schedules.ScheduleTask
)

// Fire outcomes and skip reasons.
const (
	FireCreated   = schedules.FireCreated
	FireSkipped   = schedules.FireSkipped
	FireQueued    = schedules.FireQueued
	SkipMissed    = schedules.SkipMissed
	SkipOverlap   = schedules.SkipOverlap
	SkipQueueFull = schedules.SkipQueueFull
	SkipError     = schedules.SkipError
)

// DefaultScheduleLimits are the limits of a Store until SetScheduleLimits.
var DefaultScheduleLimits = schedules.DefaultScheduleLimits
