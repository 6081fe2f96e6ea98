package slots

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
			spec, err := ParseCron(tc.cron)
			require.NoError(t, err)
			sl := Slotter{ID: uuid.New(), Cron: spec, Location: loc}
			at := utc(tc.after)
			var got []string
			for range tc.want {
				next, ok := sl.Next(at)
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
	sl := Slotter{ID: uuid.New(), Interval: time.Hour, Anchor: anchor, Location: loc, Start: &anchor, End: &end}
	var got []string
	at := utc("2026-03-28T00:00:00Z")
	for {
		next, ok := sl.Next(at)
		if !ok {
			break
		}
		got = append(got, next.UTC().Format(time.RFC3339))
		at = next
	}
	require.Equal(t, []string{"2026-03-29T00:15:00Z", "2026-03-29T01:15:00Z", "2026-03-29T02:15:00Z", "2026-03-29T03:15:00Z"}, got)

	next, ok := sl.Next(utc("2026-03-29T01:20:00Z"))
	require.True(t, ok)
	require.Equal(t, utc("2026-03-29T02:15:00Z"), next.UTC())
}

// TestScheduleJitter: a slot's jitter is the same every time it is
// computed (any replica agrees) and within [0, jitter).
func TestScheduleJitter(t *testing.T) {
	t.Parallel()
	sl := Slotter{ID: uuid.New(), Jitter: 30 * time.Second}
	other := Slotter{ID: uuid.New(), Jitter: 30 * time.Second}
	slot := utc("2026-01-01T00:00:00Z")
	differs := false
	for i := range 50 {
		s := slot.Add(time.Duration(i) * time.Minute)
		f := sl.FireAt(s)
		require.Equal(t, f, sl.FireAt(s))
		require.False(t, f.Before(s))
		require.Less(t, f.Sub(s), 30*time.Second)
		differs = differs || f != other.FireAt(s)
	}
	require.True(t, differs, "jitter depends on the schedule")
}

func TestScheduleCronParse(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"*/5 * * * *", "0 9 * * 1-5", "@hourly", "@daily", "@weekly", "@monthly", "@yearly"} {
		_, err := ParseCron(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "* * * *", "* * * * * *", "61 * * * *", "@every 5m", "TZ=UTC * * * * *",
		"CRON_TZ=Europe/Berlin 0 9 * * *", "@often"} {
		_, err := ParseCron(bad)
		require.ErrorIs(t, err, errCron, bad)
	}
}

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
		spec, err := ParseCron(tc.cron)
		require.NoError(t, err, tc.cron)
		require.Equal(t, tc.want, spec.MinGap(), tc.cron)
	}
}

// TestDueSlotsAfterADowntime: the slots due by now, oldest first, and the
// first one not yet due; a downtime longer than maxDue slots is jumped
// over to the first slot after now, and a schedule that ends has no next.
func TestDueSlotsAfterADowntime(t *testing.T) {
	t.Parallel()
	anchor := utc("2026-01-01T00:00:00Z")
	sl := Slotter{ID: uuid.New(), Interval: time.Hour, Anchor: anchor, Location: time.UTC}
	due, next, ok := sl.Due(anchor, anchor.Add(3*time.Hour+30*time.Minute))
	require.Equal(t, []time.Time{anchor, anchor.Add(time.Hour), anchor.Add(2 * time.Hour), anchor.Add(3 * time.Hour)}, due)
	require.True(t, ok)
	require.Equal(t, anchor.Add(4*time.Hour), next)

	end := anchor.Add(2 * time.Hour)
	ending := sl
	ending.End = &end
	due, _, ok = ending.Due(anchor, anchor.Add(5*time.Hour))
	require.Len(t, due, 3)
	require.False(t, ok, "no slot after the end")

	secondly := Slotter{ID: uuid.New(), Interval: time.Second, Anchor: anchor, Location: time.UTC}
	now := anchor.Add(2*maxDue*time.Second + 500*time.Millisecond)
	due, next, ok = secondly.Due(anchor, now)
	require.Len(t, due, maxDue)
	require.True(t, ok)
	require.Equal(t, anchor.Add((2*maxDue+1)*time.Second), next, "the rest are jumped over")
}

// TestLateSlots: under catch-up skip a slot may fire up to its grace late:
// a minute, at most half the gap to the next slot.
func TestLateSlots(t *testing.T) {
	t.Parallel()
	slot := utc("2026-01-01T00:00:00Z")
	hourly := Slotter{ID: uuid.New(), Interval: time.Hour, Anchor: slot, Location: time.UTC}
	require.False(t, hourly.Late(slot, slot.Add(time.Minute)))
	require.True(t, hourly.Late(slot, slot.Add(time.Minute+time.Millisecond)))
	everyMinute := Slotter{ID: uuid.New(), Interval: time.Minute, Anchor: slot, Location: time.UTC}
	require.False(t, everyMinute.Late(slot, slot.Add(30*time.Second)))
	require.True(t, everyMinute.Late(slot, slot.Add(31*time.Second)))
}

// TestMinDayGapMatchesTheCalendar: minDayGap steps the calendar by hand;
// over the whole 400-year cycle it agrees with time's own calendar for
// expressions that fire on rare days (leap days, the 31st, weekdays of a
// month, day of month or weekday).
func TestMinDayGapMatchesTheCalendar(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"0 0 29 2 *", "0 0 31 * *", "0 0 * 2 0", "0 0 13 * 5", "0 0 1,15 1,7 *",
		"0 0 30 * 1", "0 0 28 2 6", "0 0 * * 1-5", "0 0 31 12 *"} {
		c, err := ParseCron(expr)
		require.NoError(t, err, expr)
		got, gotOK := c.minDayGap()

		// The reference: time.AddDate, one day at a time.
		spec := c.spec
		either := spec.Dom&starBit == 0 && spec.Dow&starBit == 0
		start := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
		want, last := 0, -1
		for i := 0; i <= 146097+366; i++ {
			d := start.AddDate(0, 0, i)
			dom := spec.Dom&(1<<uint(d.Day())) != 0
			dow := spec.Dow&(1<<uint(d.Weekday())) != 0
			if spec.Month&(1<<uint(d.Month())) == 0 || !(dom && dow || either && (dom || dow)) {
				continue
			}
			if last >= 0 && (want == 0 || i-last < want) {
				want = i - last
			}
			last = i
		}
		require.Equal(t, want, got, expr)
		require.Equal(t, want > 0, gotOK, expr)
	}
}

// BenchmarkCronMinGap is the cost a schedule's creation pays for its
// minimum-interval check, for an expression that walks the whole cycle.
func BenchmarkCronMinGap(b *testing.B) {
	c, err := ParseCron("0 0 1 * *")
	require.NoError(b, err)
	for b.Loop() {
		c.MinGap()
	}
}
