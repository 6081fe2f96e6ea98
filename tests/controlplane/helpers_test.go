package controlplane

import "github.com/worker-gateway/gateway/tests/harness"

// The helpers this package shares with the other black-box test packages
// live in tests/harness; these are the short names its tests call them by.
var (
	lease            = harness.Lease
	completeAs       = harness.CompleteAs
	readLog          = harness.ReadLog
	scannerBatch     = harness.ScannerBatch
	createScan       = harness.CreateScan
	waitScan         = harness.WaitScan
	everySecondTask  = harness.EverySecondTask
	createSchedule   = harness.CreateSchedule
	storeTokenParams = harness.ProducerTokenParams
	scrape           = harness.Scrape
	scopedClient     = harness.ScopedClient
)

func ptr[T any](v T) *T { return harness.Ptr(v) }
