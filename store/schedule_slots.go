package store

import (
	"encoding/binary"
	"hash/fnv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

	"github.com/worker-gateway/gateway/problem"
)

// cronParser takes the standard five fields and the @hourly-style
// descriptors. robfig/cron is used for parsing and for stepping through wall
// times only: it steps by absolute hours across DST changes, so slots here
// are computed on civil (zone-less) time and mapped to instants by
// civilInstant.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

const (
	// maxDueSlots bounds how many missed slots one claim enumerates; the
	// rest of a very long downtime is jumped over.
	maxDueSlots = 100_000
	// maxMisfireGrace is how late a slot may fire under catch-up "skip"
	// (at most half the gap to the next slot).
	maxMisfireGrace = time.Minute
)

// slotter computes a schedule's slots: nominal fire times, before jitter.
type slotter struct {
	id       uuid.UUID
	spec     *cron.SpecSchedule // nil for an interval schedule
	interval time.Duration
	anchor   time.Time // interval slots are anchor + k·interval
	loc      *time.Location
	jitter   time.Duration
	start    *time.Time
	end      *time.Time
}

// parseCron accepts a five-field expression or a descriptor; a time zone
// prefix or @every is refused, since zone and interval are fields of their
// own.
func parseCron(expr string) (*cron.SpecSchedule, error) {
	bad := problem.Wrap(ErrInvalid, "cron: not a valid cron expression (five fields, or @hourly, @daily, @weekly, @monthly, @yearly)")
	e := strings.TrimSpace(expr)
	if e == "" || strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") || strings.HasPrefix(e, "@every") {
		return nil, bad
	}
	sched, err := cronParser.Parse(e)
	if err != nil {
		return nil, bad
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, bad
	}
	// Civil time is represented as UTC; see civilInstant.
	spec.Location = time.UTC
	return spec, nil
}

// next is the first slot strictly after `after`, not before start and not
// after end; false when the schedule has no more slots.
func (sl slotter) next(after time.Time) (time.Time, bool) {
	if sl.start != nil && after.Before(*sl.start) {
		after = sl.start.Add(-time.Nanosecond)
	}
	var slot time.Time
	if sl.spec == nil {
		if after.Before(sl.anchor) {
			slot = sl.anchor
		} else {
			k := after.Sub(sl.anchor)/sl.interval + 1
			slot = sl.anchor.Add(k * sl.interval)
		}
	} else {
		var ok bool
		if slot, ok = sl.nextCron(after); !ok {
			return time.Time{}, false
		}
	}
	if sl.end != nil && slot.After(*sl.end) {
		return time.Time{}, false
	}
	return slot, true
}

// nextCron steps through civil times after after's wall time until one maps
// to an instant after it. A wall time that occurs twice maps to its first
// instant, so its second occurrence is stepped over (fires once); one that
// does not exist maps to the end of the gap (fires once, at the next valid
// instant), and later wall times of the gap map to the same instant, which
// is not after the previous slot, so they fire nothing more.
func (sl slotter) nextCron(after time.Time) (time.Time, bool) {
	c := civil(after, sl.loc)
	// A repeated hour holds at most a few thousand minute slots.
	for range 10_000 {
		c = sl.spec.Next(c)
		if c.IsZero() {
			return time.Time{}, false
		}
		if i := civilInstant(c, sl.loc); i.After(after) {
			return i, true
		}
	}
	return time.Time{}, false
}

// civil is t's wall time in loc, written as a UTC time.
func civil(t time.Time, loc *time.Location) time.Time {
	w := t.In(loc)
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC)
}

// civilInstant is the first instant whose wall time in loc is c, or, when
// no instant has that wall time (a DST gap), the first instant after the gap.
func civilInstant(c time.Time, loc *time.Location) time.Time {
	t := time.Date(c.Year(), c.Month(), c.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), loc)
	// Candidates: c read with the offsets of the zone t falls in and of its
	// neighbours; the earliest that reads back as c is the first occurrence.
	offsets := []int{}
	_, off := t.Zone()
	offsets = append(offsets, off)
	zs, ze := t.ZoneBounds()
	if !zs.IsZero() {
		_, o := zs.Add(-time.Nanosecond).Zone()
		offsets = append(offsets, o)
	}
	if !ze.IsZero() {
		_, o := ze.Zone()
		offsets = append(offsets, o)
	}
	var best time.Time
	for _, o := range offsets {
		i := c.Add(-time.Duration(o) * time.Second).In(loc)
		if civil(i, loc).Equal(c) && (best.IsZero() || i.Before(best)) {
			best = i
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: t lies either side of it; the gap ends where the later zone
	// starts.
	if civil(t, loc).After(c) {
		return zs
	}
	return ze
}

// fireAt is when a slot fires: the slot plus its jitter, which is the same
// for the same (schedule, slot) on every replica.
func (sl slotter) fireAt(slot time.Time) time.Time {
	if sl.jitter <= 0 {
		return slot
	}
	h := fnv.New64a()
	_, _ = h.Write(sl.id[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(slot.UnixMicro()))
	_, _ = h.Write(b[:])
	ms := int64(sl.jitter / time.Millisecond)
	return slot.Add(time.Duration(int64(h.Sum64()%uint64(ms))) * time.Millisecond)
}

// grace is how late a slot may still fire under catch-up "skip".
func (sl slotter) grace(slot time.Time) time.Duration {
	next, ok := sl.next(slot)
	if !ok {
		return maxMisfireGrace
	}
	return min(maxMisfireGrace, next.Sub(slot)/2)
}
