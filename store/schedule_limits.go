package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/worker-gateway/gateway/problem"
)

// ScheduleLimits bound what an organization's schedules may ask of the
// gateway: how often a schedule may fire, and how many it may have.
type ScheduleLimits struct {
	// MinInterval is the shortest gap allowed between two consecutive
	// slots of a schedule, on create and on every edit.
	MinInterval time.Duration
	// Quota is how many schedules (not deleted) an organization may have
	// when its organizations.max_schedules is NULL.
	Quota int
}

// DefaultScheduleLimits are the limits of a Store until SetScheduleLimits.
var DefaultScheduleLimits = ScheduleLimits{MinInterval: time.Minute, Quota: 1000}

// SetScheduleLimits replaces the store's schedule limits; call it before
// the store serves requests.
func (s *Store) SetScheduleLimits(l ScheduleLimits) { s.scheduleLimits = l }

// checkMinInterval refuses a schedule whose slots may come closer together
// than least: an interval shorter than it, or a cron expression two of
// whose consecutive slots are (cronMinGap).
func checkMinInterval(c compiled, least time.Duration) error {
	gap := c.slots.interval
	if c.slots.spec != nil {
		gap = cronMinGap(c.slots.spec)
	}
	if gap >= least {
		return nil
	}
	field := "interval_seconds"
	if c.slots.spec != nil {
		field = "cron"
	}
	return problem.Wrap(ErrScheduleTooFrequent, problem.Text(fmt.Sprintf(
		"%s: two slots would be %s apart; this gateway's minimum between slots is %s", field, gap, least)))
}

// starBit marks a cron field given as "*" (robfig/cron's own flag).
const starBit = 1 << 63

// cronMinGap is the shortest gap between two consecutive slots of spec, on
// wall-clock time, computed from its fields rather than by stepping: a
// slot's time of day is one of the combinations of its second, minute and
// hour fields, so two slots of one day are at least the least difference
// between those; two slots of different days are at least the least
// distance between two days it fires on, less the day's last slot, plus
// its first. The days it fires on repeat every 400 years (the Gregorian
// cycle, a whole number of weeks), so that distance is found within one.
//
// A DST change can bring one pair of slots closer once (a wall time the
// change skips fires at the gap's end); slots are whole minutes, so never
// closer than a minute.
func cronMinGap(spec *cron.SpecSchedule) time.Duration {
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
	if days, ok := cronMinDayGap(spec); ok {
		gap = min(gap, time.Duration(days*86400-times[len(times)-1]+times[0])*time.Second)
	}
	return gap
}

// cronMinDayGap is the least number of days between two consecutive days
// spec fires on (robfig/cron's rule: day of month and weekday must both
// match when either is "*", else either may), false if it fires on fewer
// than two days of the cycle.
func cronMinDayGap(spec *cron.SpecSchedule) (int, bool) {
	if spec.Month&^starBit == 0 {
		return 0, false
	}
	either := spec.Dom&starBit == 0 && spec.Dow&starBit == 0
	const cycle = 146097 // days in 400 Gregorian years
	day := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
	best, last := 0, -1
	// One day past the cycle, so that the last fire of the cycle meets the
	// first of the next.
	for i := 0; i <= cycle+366; i++ {
		d := day.AddDate(0, 0, i)
		dom := spec.Dom&(1<<uint(d.Day())) != 0
		dow := spec.Dow&(1<<uint(d.Weekday())) != 0
		fires := spec.Month&(1<<uint(d.Month())) != 0 && (dom && dow || either && (dom || dow))
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

// lockScheduleQuota takes the organization's row and refuses a new
// schedule when it already has its quota (organizations.max_schedules, or
// the store's default). The row lock (FOR NO KEY UPDATE, which a task's
// foreign key check does not wait for) serialises the creates of one
// organization, and the count is a statement of its own, after the lock:
// in READ COMMITTED a later statement sees what the previous holder of the
// lock committed, where a count in the locking statement would read the
// snapshot taken before it waited.
func lockScheduleQuota(ctx context.Context, tx pgx.Tx, scope Scope, org uuid.UUID, defaultQuota int) error {
	var quota int
	err := tx.QueryRow(ctx, `SELECT coalesce(max_schedules, $2) FROM organizations WHERE id = $1 FOR NO KEY UPDATE`,
		org, defaultQuota).Scan(&quota)
	if errors.Is(err, pgx.ErrNoRows) {
		return missingOrganization(scope, org)
	}
	if err != nil {
		return fmt.Errorf("lock organization for schedule quota: %w", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE organization_id = $1 AND deleted_at IS NULL`,
		org).Scan(&n); err != nil {
		return fmt.Errorf("count schedules: %w", err)
	}
	if n >= quota {
		return problem.Wrap(ErrQuotaExceeded, problem.Text(fmt.Sprintf(
			"the organization has %d schedules, its quota is %d; delete one first", n, quota)))
	}
	return nil
}
