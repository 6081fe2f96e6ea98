package slots

import (
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/worker-gateway/gateway/problem"
)

// cronParser takes the standard five fields and the @hourly-style
// descriptors. robfig/cron is used for parsing and for stepping through wall
// times only: it steps by absolute hours across DST changes, so slots here
// are computed on civil (zone-less) time and mapped to instants by
// civilInstant.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// errCron is ParseCron's refusal, a reason a client may read.
var errCron = problem.Public("cron: not a valid cron expression (five fields, or @hourly, @daily, @weekly, @monthly, @yearly)")

// Cron is a parsed cron expression, its fields read on civil time.
type Cron struct{ spec *cron.SpecSchedule }

// ParseCron accepts a five-field expression or a descriptor; a time zone
// prefix or @every is refused, since zone and interval are fields of their
// own. A refusal is a problem.Public error.
func ParseCron(expr string) (*Cron, error) {
	e := strings.TrimSpace(expr)
	if e == "" || strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") || strings.HasPrefix(e, "@every") {
		return nil, errCron
	}
	sched, err := cronParser.Parse(e)
	if err != nil {
		return nil, errCron
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, errCron
	}
	// Civil time is represented as UTC; see civilInstant.
	spec.Location = time.UTC
	return &Cron{spec: spec}, nil
}

// starBit marks a cron field given as "*" (robfig/cron's own flag).
const starBit = 1 << 63

// MinGap is the shortest gap between two consecutive slots of the
// expression, on wall-clock time, computed from its fields rather than by
// stepping: a slot's time of day is one of the combinations of its second,
// minute and hour fields, so two slots of one day are at least the least
// difference between those; two slots of different days are at least the
// least distance between two days it fires on, less the day's last slot,
// plus its first. The days it fires on repeat every 400 years (the
// Gregorian cycle, a whole number of weeks), so that distance is found
// within one.
//
// A DST change can bring one pair of slots closer once (a wall time the
// change skips fires at the gap's end); slots are whole minutes, so never
// closer than a minute.
func (c *Cron) MinGap() time.Duration {
	spec := c.spec
	var times []int // seconds since midnight
	for h := range 24 {
		if spec.Hour&(1<<h) == 0 {
			continue
		}
		for m := range 60 {
			if spec.Minute&(1<<m) == 0 {
				continue
			}
			for sec := range 60 {
				if spec.Second&(1<<sec) != 0 {
					times = append(times, h*3600+m*60+sec)
				}
			}
		}
	}
	if len(times) == 0 {
		return time.Duration(1<<63 - 1)
	}
	slices.Sort(times)
	gap := time.Duration(1<<63 - 1)
	for i := 1; i < len(times); i++ {
		gap = min(gap, time.Duration(times[i]-times[i-1])*time.Second)
	}
	if days, ok := c.minDayGap(); ok {
		gap = min(gap, time.Duration(days*86400-times[len(times)-1]+times[0])*time.Second)
	}
	return gap
}

// daysIn is the number of days of a month in the Gregorian calendar.
func daysIn(year int, month time.Month) int {
	switch month {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// minDayGap is the least number of days between two consecutive days the
// expression fires on (robfig/cron's rule: day of month and weekday must
// both match when either is "*", else either may), false if it fires on
// fewer than two days of the cycle.
func (c *Cron) minDayGap() (int, bool) {
	spec := c.spec
	if spec.Month&^starBit == 0 {
		return 0, false
	}
	either := spec.Dom&starBit == 0 && spec.Dow&starBit == 0
	const cycle = 146097 // days in 400 Gregorian years
	// The calendar is stepped by hand (time.AddDate normalises a whole date
	// on every call, and the walk takes up to 146,463 steps per schedule
	// created or edited). 2000-01-01 was a Saturday.
	year, month, dayOfMonth, weekday := 2000, time.January, 1, time.Saturday
	best, last := 0, -1
	// One day past the cycle, so that the last fire of the cycle meets the
	// first of the next.
	for i := 0; i <= cycle+366; i++ {
		if i > 0 {
			weekday = (weekday + 1) % 7
			if dayOfMonth++; dayOfMonth > daysIn(year, month) {
				dayOfMonth = 1
				if month++; month > time.December {
					month, year = time.January, year+1
				}
			}
		}
		dom := spec.Dom&(1<<uint(dayOfMonth)) != 0
		dow := spec.Dow&(1<<uint(weekday)) != 0
		fires := spec.Month&(1<<uint(month)) != 0 && (dom && dow || either && (dom || dow))
		if !fires {
			continue
		}
		if last >= 0 && (best == 0 || i-last < best) {
			best = i - last
			if best == 1 {
				return 1, true
			}
		}
		last = i
	}
	return best, best > 0
}
