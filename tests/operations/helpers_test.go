package operations

import "github.com/worker-gateway/gateway/tests/harness"

// The helpers this package shares with the other black-box test packages
// live in tests/harness; these are the short names its tests call them by.
var (
	lease            = harness.Lease
	completeAs       = harness.CompleteAs
	readLog          = harness.ReadLog
	countRows        = harness.CountRows
	storeTokenParams = harness.ProducerTokenParams
	scrape           = harness.Scrape
	parseSamples     = harness.ParseSamples
	truncate         = harness.Truncate
)
