package faults

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireFenced requires the calls of a stale client — those of client
// among calls — to have been refused for their lost lease: a write with
// lease-lost (409), a renewal answered lost. The result batches under the
// keys replayed, accepted before the lease was lost, must be answered as
// idempotent replays instead, and must have been sent. A call of unknown
// outcome proves nothing here (its retry's answer does, and the checker's
// model judges every call). It returns the number of refusals.
func RequireFenced(t *testing.T, calls []Call, client int, replayed ...string) int {
	t.Helper()
	refused, sent := 0, map[string]bool{}
	for _, call := range CallsOf(calls, client) {
		for _, it := range call.Items {
			switch {
			case it.Result == ResUnknown:
			case call.Op == OpResult && slices.Contains(replayed, it.Key):
				require.Equal(t, ResReplayed, it.Result, "batch %s accepted in time is only replayed (HTTP %d)", it.Key, call.Status)
				sent[it.Key] = true
			default:
				require.Equal(t, ResLeaseLost, it.Result, "%s of a stale attempt (HTTP %d %s)", call.Op, call.Status, it.Code)
				if call.Op != OpHeartbeat && call.Op != OpHeartbeatAll {
					require.Equal(t, "lease-lost", it.Code, "%s of a stale attempt is refused with 409 lease-lost", call.Op)
				}
				refused++
			}
		}
	}
	for _, key := range replayed {
		require.True(t, sent[key], "batch %s sent again", key)
	}
	return refused
}
