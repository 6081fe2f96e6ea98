package workerprotocol

import "github.com/worker-gateway/gateway/tests/harness"

// The helpers this package shares with the other black-box test packages
// live in tests/harness; these are the short names its tests call them by.
var (
	lease            = harness.Lease
	problemCode      = harness.ProblemCode
	completeAs       = harness.CompleteAs
	appendLog        = harness.AppendLog
	readLog          = harness.ReadLog
	sha256Hex        = harness.SHA256Hex
	openUpload       = harness.OpenUpload
	put              = harness.PutUpload
	commit           = harness.CommitUpload
	scannerBatch     = harness.ScannerBatch
	countRows        = harness.CountRows
	createScan       = harness.CreateScan
	storeTokenParams = harness.ProducerTokenParams
	waitingPolls     = harness.WaitingPolls
)

func ptr[T any](v T) *T { return harness.Ptr(v) }
