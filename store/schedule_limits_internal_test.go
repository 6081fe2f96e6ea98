package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCronMinGap: the shortest gap between two consecutive slots of a cron
// expression, computed from its fields, including gaps across midnight and
// days that fire rarely.
func TestCronMinGap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cron string
		want time.Duration
	}{
		{"* * * * *", time.Minute},
		{"*/5 * * * *", 5 * time.Minute},
		{"0,1 * * * *", time.Minute},
		{"0 * * * *", time.Hour},
		{"@hourly", time.Hour},
		{"@daily", 24 * time.Hour},
		{"59 23 * * *", 24 * time.Hour},
		// 23:00 then 00:00 the next day.
		{"0 0,23 * * *", time.Hour},
		// Mondays only: the next day never fires.
		{"0 0,23 * * 1", 23 * time.Hour},
		{"0 0 * * 1-5", 24 * time.Hour},
		{"0 0 * * 1", 7 * 24 * time.Hour},
		// Day of month or weekday: a Monday the 30th, then the 31st.
		{"0 0 31 * 1", 24 * time.Hour},
		// Leap days: four years apart (eight around 2100).
		{"0 0 29 2 *", (4*365 + 1) * 24 * time.Hour},
		{"30 23 31 12 *", 365 * 24 * time.Hour},
	} {
		spec, err := parseCron(tc.cron)
		require.NoError(t, err, tc.cron)
		require.Equal(t, tc.want, cronMinGap(spec), tc.cron)
	}
}

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
			require.ErrorIs(t, err, ErrScheduleTooFrequent, "%+v at %s", tc.timing, tc.min)
		}
	}
}
