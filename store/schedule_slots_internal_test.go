package store

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestScheduleSlotsDST walks cron schedules across the spring and autumn
// changes of Europe/Berlin and America/New_York: a skipped local time fires
// once, at the end of the gap; a repeated one fires once, at its first
// occurrence.
func TestScheduleSlotsDST(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, zone, cron, after string
		want                    []string
	}{
		{"berlin spring daily 02:30", "Europe/Berlin", "30 2 * * *", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin spring two slots in the gap fire once", "Europe/Berlin", "0,30 2 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin spring hourly", "Europe/Berlin", "@hourly", "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		{"berlin autumn daily 02:30", "Europe/Berlin", "30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"berlin autumn hourly skips the repeated 02:00", "Europe/Berlin", "0 * * * *", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"new york spring daily 02:30", "America/New_York", "30 2 * * *", "2026-03-06T12:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"new york autumn daily 01:30", "America/New_York", "30 1 * * *", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"new york autumn half-hourly in the repeated hour", "America/New_York", "*/30 1 * * *", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z"}},
		{"new york autumn from inside the second 01:00 hour", "America/New_York", "30 1 * * *", "2026-11-01T06:10:00Z",
			[]string{"2026-11-02T06:30:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(tc.zone)
			require.NoError(t, err)
			spec, err := parseCron(tc.cron)
			require.NoError(t, err)
			sl := slotter{id: uuid.New(), spec: spec, loc: loc}
			at := utc(tc.after)
			var got []string
			for range tc.want {
				next, ok := sl.next(at)
				require.True(t, ok)
				got = append(got, next.UTC().Format(time.RFC3339))
				at = next
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestScheduleSlotsInterval: interval slots are absolute time, whatever
// the zone does, and respect start and end.
func TestScheduleSlotsInterval(t *testing.T) {
	t.Parallel()
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	anchor := utc("2026-03-29T00:15:00Z")
	end := utc("2026-03-29T03:15:00Z")
	sl := slotter{id: uuid.New(), interval: time.Hour, anchor: anchor, loc: loc, start: &anchor, end: &end}
	var got []string
	at := utc("2026-03-28T00:00:00Z")
	for {
		next, ok := sl.next(at)
		if !ok {
			break
		}
		got = append(got, next.UTC().Format(time.RFC3339))
		at = next
	}
	require.Equal(t, []string{"2026-03-29T00:15:00Z", "2026-03-29T01:15:00Z", "2026-03-29T02:15:00Z", "2026-03-29T03:15:00Z"}, got)

	next, ok := sl.next(utc("2026-03-29T01:20:00Z"))
	require.True(t, ok)
	require.Equal(t, utc("2026-03-29T02:15:00Z"), next.UTC())
}

// TestScheduleJitter: a slot's jitter is the same every time it is
// computed (any replica agrees) and within [0, jitter).
func TestScheduleJitter(t *testing.T) {
	t.Parallel()
	sl := slotter{id: uuid.New(), jitter: 30 * time.Second}
	other := slotter{id: uuid.New(), jitter: 30 * time.Second}
	slot := utc("2026-01-01T00:00:00Z")
	differs := false
	for i := range 50 {
		s := slot.Add(time.Duration(i) * time.Minute)
		f := sl.fireAt(s)
		require.Equal(t, f, sl.fireAt(s))
		require.False(t, f.Before(s))
		require.Less(t, f.Sub(s), 30*time.Second)
		differs = differs || f != other.fireAt(s)
	}
	require.True(t, differs, "jitter depends on the schedule")
}

func TestScheduleCronParse(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"*/5 * * * *", "0 9 * * 1-5", "@hourly", "@daily", "@weekly", "@monthly", "@yearly"} {
		_, err := parseCron(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "* * * *", "* * * * * *", "61 * * * *", "@every 5m", "TZ=UTC * * * * *",
		"CRON_TZ=Europe/Berlin 0 9 * * *", "@often"} {
		_, err := parseCron(bad)
		require.ErrorIs(t, err, ErrInvalid, bad)
	}
}
