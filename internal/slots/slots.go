package slots

import (
	"encoding/binary"
	"hash/fnv"
	"time"

	"github.com/google/uuid"
)

const (
	// maxDue bounds how many missed slots Due enumerates; the rest of a
	// very long downtime is jumped over.
	maxDue = 100_000
	// maxMisfireGrace is how late a slot may fire under catch-up "skip"
	// (at most half the gap to the next slot).
	maxMisfireGrace = time.Minute
)

// Slotter computes a schedule's slots: nominal fire times, before jitter.
// It is a cron schedule when Cron is set, else an interval schedule.
type Slotter struct {
	ID       uuid.UUID // the schedule: jitter is a hash of (ID, slot)
	Cron     *Cron
	Interval time.Duration
	Anchor   time.Time // interval slots are Anchor + k·Interval
	Location *time.Location
	Jitter   time.Duration
	Start    *time.Time
	End      *time.Time
}

// MinGap is the shortest gap between two consecutive slots: the interval,
// or the cron expression's (Cron.MinGap).
func (sl Slotter) MinGap() time.Duration {
	if sl.Cron != nil {
		return sl.Cron.MinGap()
	}
	return sl.Interval
}

// Next is the first slot strictly after `after`, not before Start and not
// after End; false when the schedule has no more slots.
func (sl Slotter) Next(after time.Time) (time.Time, bool) {
	if sl.Start != nil && after.Before(*sl.Start) {
		after = sl.Start.Add(-time.Nanosecond)
	}
	var slot time.Time
	if sl.Cron == nil {
		if after.Before(sl.Anchor) {
			slot = sl.Anchor
		} else {
			k := after.Sub(sl.Anchor)/sl.Interval + 1
			slot = sl.Anchor.Add(k * sl.Interval)
		}
	} else {
		var ok bool
		if slot, ok = sl.nextCron(after); !ok {
			return time.Time{}, false
		}
	}
	if sl.End != nil && slot.After(*sl.End) {
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
func (sl Slotter) nextCron(after time.Time) (time.Time, bool) {
	c := civil(after, sl.Location)
	// A repeated hour holds at most a few thousand minute slots.
	for range 10_000 {
		c = sl.Cron.spec.Next(c)
		if c.IsZero() {
			return time.Time{}, false
		}
		if i := civilInstant(c, sl.Location); i.After(after) {
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

// FireAt is when a slot fires: the slot plus its jitter, which is the same
// for the same (schedule, slot) on every replica.
func (sl Slotter) FireAt(slot time.Time) time.Time {
	if sl.Jitter <= 0 {
		return slot
	}
	h := fnv.New64a()
	_, _ = h.Write(sl.ID[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(slot.UnixMicro()))
	_, _ = h.Write(b[:])
	ms := int64(sl.Jitter / time.Millisecond)
	return slot.Add(time.Duration(int64(h.Sum64()%uint64(ms))) * time.Millisecond)
}

// Due lists the slots from first (the schedule's pending slot) that fire
// by now, oldest first, and the first slot after them that does not (ok
// false when the schedule ends first). After a downtime of more than
// maxDue slots the rest are jumped over: next is then the first slot after
// now.
func (sl Slotter) Due(first, now time.Time) (due []time.Time, next time.Time, ok bool) {
	slot, ok := first, true
	for ok && !sl.FireAt(slot).After(now) && len(due) < maxDue {
		due = append(due, slot)
		slot, ok = sl.Next(slot)
	}
	if ok && !sl.FireAt(slot).After(now) {
		slot, ok = sl.Next(now)
	}
	return due, slot, ok
}

// Late says whether a slot firing at now is later than catch-up "skip"
// allows: more than its grace after its fire time, the grace being a
// minute at most and half the gap to the next slot.
func (sl Slotter) Late(slot, now time.Time) bool {
	return now.Sub(sl.FireAt(slot)) > sl.grace(slot)
}

// grace is how late a slot may still fire under catch-up "skip".
func (sl Slotter) grace(slot time.Time) time.Duration {
	next, ok := sl.Next(slot)
	if !ok {
		return maxMisfireGrace
	}
	return min(maxMisfireGrace, next.Sub(slot)/2)
}
