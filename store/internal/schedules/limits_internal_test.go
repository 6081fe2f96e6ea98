package schedules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// TestCheckMinInterval: an interval or a cron whose slots come closer than
// the minimum is ErrScheduleTooFrequent; at the minimum it is accepted.
func TestCheckMinInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		timing ScheduleTiming
		min    time.Duration
		ok     bool
	}{
		{ScheduleTiming{IntervalSeconds: 59}, time.Minute, false},
		{ScheduleTiming{IntervalSeconds: 60}, time.Minute, true},
		{ScheduleTiming{IntervalSeconds: 1}, time.Second, true},
		{ScheduleTiming{Cron: "* * * * *"}, time.Minute, true},
		{ScheduleTiming{Cron: "* * * * *"}, 2 * time.Minute, false},
		{ScheduleTiming{Cron: "*/2 * * * *"}, 2 * time.Minute, true},
		{ScheduleTiming{Cron: "0 0,23 * * *"}, 2 * time.Hour, false},
		{ScheduleTiming{Cron: "0 0,23 * * 1"}, 2 * time.Hour, true},
	} {
		c, err := compileSchedule(ScheduleParams{Timing: tc.timing, Definition: ScheduleDefinition{Kind: ScheduleTask,
			Task: &ScheduledTask{TaskType: "ai"}}})
		require.NoError(t, err)
		err = checkMinInterval(c, tc.min)
		if tc.ok {
			require.NoError(t, err, "%+v at %s", tc.timing, tc.min)
		} else {
			require.ErrorIs(t, err, core.ErrScheduleTooFrequent, "%+v at %s", tc.timing, tc.min)
		}
	}
}
