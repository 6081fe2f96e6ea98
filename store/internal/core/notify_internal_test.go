package core

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestWakeupPayloadsMergeOrganizations: new tasks of one organization make
// one notification with their count (PostgreSQL would drop the repeats);
// other wake-ups pass as they are.
func TestWakeupPayloadsMergeOrganizations(t *testing.T) {
	a, b, w := uuid.New(), uuid.New(), uuid.New()
	got := wakeupPayloads([]Wakeup{
		{Kind: WakeOrganization, Organization: a, Count: 1},
		{Kind: WakeWorker, Worker: w},
		{Kind: WakeOrganization, Organization: b, Count: 2},
		{Kind: WakeOrganization, Organization: a, Count: 1},
		{Kind: WakeSchedules, Organization: a},
	})
	require.Equal(t, []string{"w:" + w.String(), "s:" + a.String(), "o:" + a.String() + ":2", "o:" + b.String() + ":2"}, got)
}
