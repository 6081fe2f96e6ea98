package dispatch

import "github.com/worker-gateway/gateway/tests/harness"

// The helpers this package shares with the other black-box test packages
// live in tests/harness; these are the short names its tests call them by.
var (
	lease           = harness.Lease
	completeAs      = harness.CompleteAs
	everySecondTask = harness.EverySecondTask
	createSchedule  = harness.CreateSchedule
	unassign        = harness.Unassign
	scrape          = harness.Scrape
	waitingPolls    = harness.WaitingPolls
)

func ptr[T any](v T) *T { return harness.Ptr(v) }
