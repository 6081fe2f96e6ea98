package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestWriteStats(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	writeStats(&b, apiclient.Stats{
		Queue: []apiclient.QueueDepth{
			{OrganizationId: id1, State: "pending", Count: 12},
			{OrganizationId: id1, State: "running", Count: 3},
		},
		Workers: apiclient.WorkerCapacity{Online: 2, Total: 3, Capacity: 8, ActiveAttempts: 3},
		Leases:  apiclient.LeaseRate{WindowSeconds: 60, Count: 90, PerSecond: 1.5},
		Failures: apiclient.FailureSummary{WindowSeconds: 900, Count: 1, Recent: []apiclient.RecentFailure{
			{TaskId: id2, AttemptNumber: 2, Status: "failed", ErrorCode: ptr("boom"), ErrorMessage: ptr("it broke\nbadly"), FinishedAt: &created},
		}},
	})
	require.Equal(t, ""+
		"Workers online:  2 of 3\n"+
		"Capacity:        8 (3 leases held)\n"+
		"Leases:          1.50/s (90 in the last 60 s)\n"+
		"Failures:        1 in the last 900 s\n"+
		"\n"+
		"ORGANIZATION                          STATE    TASKS\n"+
		"11111111-1111-1111-1111-111111111111  pending  12\n"+
		"11111111-1111-1111-1111-111111111111  running  3\n"+
		"\n"+
		"FAILED                TASK                                  ATTEMPT  STATUS  CODE  ERROR\n"+
		"2026-03-04T05:06:07Z  22222222-2222-2222-2222-222222222222  2        failed  boom  it broke\n",
		b.String())
}
