package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store"
)

// schedulesConfig is the schedules scenario: many interval schedules,
// their slots spread evenly over the period, fired by the gateway's timer.
type schedulesConfig struct {
	schedules int
	period    time.Duration // every schedule's interval
	window    time.Duration // measured while firing
	idle      time.Duration // measured before the first slot is due
}

// schedulesTimeLimit replaces the default -time-limit: the idle phase, a
// minute of firing before the window and the window itself take longer
// than the default five minutes.
const schedulesTimeLimit = 15 * time.Minute

// scheduleCloneBatch is how many schedules one INSERT clones.
const scheduleCloneBatch = 10000

// scheduleWarmUp is how long the timer fires before the window opens: the
// first slots of a fresh table (cold caches, first plans) are not the
// steady state.
const scheduleWarmUp = 15 * time.Second

// runSchedules creates the schedules (one through the store, the rest
// cloned from it in SQL with their anchors spread over the period), then
// measures the database while nothing is due (idle: must be 0 xact/s),
// then the firing: fires per second, the lag from each slot's fire time to
// the commit that created its scan (the gateway's
// gateway_schedule_fire_lag_seconds histogram), and CPU. It verifies in SQL
// that every slot due in the window fired exactly once and created one
// scan.
func runSchedules(ctx context.Context, s *Stack, c schedulesConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "schedules", Schedules: c.schedules, PeriodSeconds: c.period.Seconds()}
	target := float64(c.schedules) / c.period.Seconds()
	r.TargetFiresPerSec = ptr(round(target, 1))
	org, err := s.NewOrganization(ctx, "schedules")
	if err != nil {
		return r, err
	}
	prod, err := s.Producer(ctx)
	if err != nil {
		return r, err
	}
	defer prod.close()

	// The first slot comes after the idle phase: its two statistics settles
	// and its window (a third settle with -pg-statements), and room to insert.
	lead := c.idle + 3*statSettle + 20*time.Second
	var base time.Time
	if err := s.Pool.QueryRow(ctx, `SELECT now() + make_interval(secs => $1)`, lead.Seconds()).Scan(&base); err != nil {
		return r, err
	}
	logf("schedules: creating %d schedules every %s, slots spread from %s", c.schedules, c.period, base.Format(time.TimeOnly))
	insertStart := time.Now()
	if err := insertSchedules(ctx, s, org, c, base); err != nil {
		return r, err
	}
	r.InsertSeconds = ptr(round(time.Since(insertStart).Seconds(), 2))
	// Creating schedules in SQL sends no wake-up: send the one the API
	// would have sent.
	if _, err := s.Pool.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel,
		store.Wakeup{Kind: store.WakeSchedules, Organization: org}.Payload()); err != nil {
		return r, err
	}

	// Idle: nothing is due yet.
	if time.Until(base) < c.idle+2*statSettle+time.Second {
		return r, fmt.Errorf("inserting the schedules took %s: no time left for the idle window before the first slot", time.Since(insertStart).Round(time.Second))
	}
	logf("schedules: measuring %s with nothing due", c.idle)
	before := s.beginWindow(ctx)
	sleepCtx(ctx, c.idle)
	after := s.endWindow(ctx, nil)
	idle := &Result{}
	s.applyUsage(idle, before, after, after.at.Sub(before.at), 0)
	r.IdleDBXactPerSec, r.IdlePostgresCPUCores, r.IdleGatewayCPUCores = idle.DBXactPerSec, idle.PostgresCPUCores, idle.GatewayCPUCores
	var firedEarly int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires WHERE organization_id = $1`, org).Scan(&firedEarly); err != nil {
		return r, err
	}
	if firedEarly > 0 {
		return r, fmt.Errorf("%d fires during the idle window: the first slot came too early", firedEarly)
	}

	// Firing: a warm-up, then the window.
	logf("schedules: waiting for the first slot, then %s of warm-up", scheduleWarmUp)
	sleepCtx(ctx, time.Until(base)+scheduleWarmUp)
	lagBefore, err := prod.histogram(ctx, "gateway_schedule_fire_lag_seconds")
	if err != nil {
		return r, err
	}
	claimsBefore, err := prod.counter(ctx, "gateway_schedule_claims_total")
	if err != nil {
		return r, err
	}
	logf("schedules: measuring %s of firing", c.window)
	if pgStatements > 0 {
		_, _ = s.Pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	}
	fireBefore := s.readCPU()
	s.readXacts(ctx, &fireBefore)
	windowStart := fireBefore.at
	var ws *waitSampler
	if pgWaits {
		ws = startWaitSampler(ctx, s.Pool, 20*time.Millisecond)
	}
	sleepCtx(ctx, c.window)
	fireAfter := s.readCPU()
	if ws != nil {
		r.PGWaits = ws.finish()
	}
	windowEnd := fireAfter.at
	lagAfter, err := prod.histogram(ctx, "gateway_schedule_fire_lag_seconds")
	if err != nil {
		return r, err
	}
	claimsAfter, err := prod.counter(ctx, "gateway_schedule_claims_total")
	if err != nil {
		return r, err
	}
	r.Claims = int(claimsAfter - claimsBefore)
	s.readXacts(ctx, &fireAfter)
	if pgStatements > 0 {
		s.printTopStatements(ctx, pgStatements)
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s before the window ended", stopReason(ctx))
	}
	// Stop the firing before verifying.
	if _, err := s.Pool.Exec(ctx, `UPDATE schedules SET enabled = false WHERE organization_id = $1`, org); err != nil {
		return r, err
	}
	if _, err := s.Pool.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel,
		store.Wakeup{Kind: store.WakeSchedules, Organization: org}.Payload()); err != nil {
		return r, err
	}

	var fires int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires
		WHERE organization_id = $1 AND trigger_kind = 'schedule' AND fired_at >= $2 AND fired_at < $3`,
		org, windowStart, windowEnd).Scan(&fires); err != nil {
		return r, err
	}
	wall := windowEnd.Sub(windowStart)
	r.WallSeconds = round(wall.Seconds(), 3)
	r.Fires = fires
	r.FiresPerSec = ptr(round(float64(fires)/wall.Seconds(), 1))
	s.applyUsage(r, fireBefore, fireAfter, wall, fires)
	lag := lagAfter.minus(lagBefore)
	r.LagSamples = int(lag.count)
	r.LagP50, r.LagP99 = lag.quantileMs(0.50), lag.quantileMs(0.99)
	r.LagMax = lag.maxBoundMs()

	v, err := verifySchedules(context.WithoutCancel(ctx), s, org, windowEnd.Add(-5*time.Second))
	if err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	r.Verification, r.Verified = v, v.ok
	return r, nil
}

// insertSchedules creates one schedule through the store (so its
// definition is a valid one) and clones it c.schedules-1 times in SQL,
// schedule i anchored at base + i·period/schedules, so that the slots are
// spread evenly over the period.
func insertSchedules(ctx context.Context, s *Stack, org uuid.UUID, c schedulesConfig, base time.Time) error {
	far := base.Add(24 * time.Hour)
	// The bench's period may be shorter than a gateway allows by default.
	s.Store.SetScheduleLimits(store.ScheduleLimits{MinInterval: c.period, Quota: store.DefaultScheduleLimits.Quota})
	tpl, err := s.Store.CreateSchedule(ctx, store.EveryOrganization(), org, store.ScheduleParams{
		Name: "bench template",
		Timing: store.ScheduleTiming{IntervalSeconds: int(c.period.Seconds()), StartAt: &far,
			Overlap: store.OverlapAllow, CatchUp: store.CatchUpOnce},
		Definition: store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
			Targets: []string{"127.0.0.1"}, Plugins: []store.ScheduledPlugin{{Name: "tcp-connect", Input: json.RawMessage(`{"ports": [22]}`)}}}},
	})
	if err != nil {
		return fmt.Errorf("create the template schedule: %w", err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE schedules SET enabled = false WHERE id = $1`, tpl.ID); err != nil {
		return err
	}
	step := c.period.Seconds() / float64(c.schedules)
	for from := 0; from < c.schedules; from += scheduleCloneBatch {
		to := min(from+scheduleCloneBatch, c.schedules)
		_, err := s.Pool.Exec(ctx, `
			WITH tpl AS (
				SELECT s.organization_id, s.interval_seconds, s.time_zone, s.overlap_policy, s.catch_up_policy,
					v.kind, v.definition, v.timing
				FROM schedules s JOIN schedule_versions v ON v.schedule_id = s.id AND v.version = s.current_version
				WHERE s.id = $1
			), made AS (
				INSERT INTO schedules (organization_id, name, interval_seconds, interval_anchor, time_zone,
					overlap_policy, catch_up_policy, next_slot_at, next_fire_at)
				SELECT tpl.organization_id, 'bench ' || i, tpl.interval_seconds, a.at, tpl.time_zone,
					tpl.overlap_policy, tpl.catch_up_policy, a.at, a.at
				FROM tpl, generate_series($3::int, $4::int - 1) AS i,
					LATERAL (SELECT $2::timestamptz + make_interval(secs => i * $5::float8) AS at) a
				RETURNING id
			)
			INSERT INTO schedule_versions (schedule_id, version, kind, definition, timing)
			SELECT made.id, 1, tpl.kind, tpl.definition, tpl.timing FROM made, tpl`,
			tpl.ID, base, from, to, step)
		if err != nil {
			return fmt.Errorf("clone schedules: %w", err)
		}
	}
	// VACUUM as well as ANALYZE: otherwise autovacuum visits the freshly
	// inserted tables during the idle window, and its transactions count.
	for _, table := range []string{"schedules", "schedule_versions"} {
		if _, err := s.Pool.Exec(ctx, `VACUUM (ANALYZE) `+table); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	return nil
}

// schedulesVerification is the database's view of the slots due up to the
// cutoff: each accounted for once (fired, or counted as missed on a later
// fire), no slot twice, and one scan per created fire.
type schedulesVerification struct {
	Cutoff        time.Time `json:"cutoff"`
	SlotsDue      int64     `json:"slots_due"`
	SlotsFired    int64     `json:"slots_fired"`
	SlotsMissed   int64     `json:"slots_missed"`
	Skipped       int64     `json:"skipped"`
	DuplicateRuns int64     `json:"duplicate_runs"`
	FiresNoScan   int64     `json:"created_fires_without_their_scan"`
	ok            bool
}

func (v schedulesVerification) String() string {
	return fmt.Sprintf("%s: %d slots due by %s: %d fired, %d counted missed, %d skipped; %d slots with two scans, %d created fires without their scan",
		verdictOf(v.ok), v.SlotsDue, v.Cutoff.Format(time.TimeOnly), v.SlotsFired, v.SlotsMissed, v.Skipped, v.DuplicateRuns, v.FiresNoScan)
}

func verifySchedules(ctx context.Context, s *Stack, org uuid.UUID, cutoff time.Time) (schedulesVerification, error) {
	v := schedulesVerification{Cutoff: cutoff}
	err := s.Pool.QueryRow(ctx, `
		SELECT
			(SELECT coalesce(sum(floor(extract(epoch FROM $2::timestamptz - interval_anchor) / interval_seconds) + 1), 0)::bigint
			 FROM schedules WHERE organization_id = $1 AND name <> 'bench template' AND interval_anchor <= $2),
			(SELECT count(*) FROM schedule_fires WHERE organization_id = $1 AND trigger_kind = 'schedule' AND slot_at <= $2),
			(SELECT coalesce(sum(missed_slots), 0)::bigint FROM schedule_fires
			 WHERE organization_id = $1 AND trigger_kind = 'schedule' AND slot_at <= $2),
			(SELECT count(*) FROM schedule_fires WHERE organization_id = $1 AND outcome = 'skipped' AND slot_at <= $2),
			(SELECT count(*) FROM (SELECT 1 FROM scans WHERE organization_id = $1 AND trigger_kind = 'schedule'
				GROUP BY trigger_schedule_id, trigger_slot_at HAVING count(*) > 1) d),
			(SELECT count(*) FROM schedule_fires f WHERE f.organization_id = $1 AND f.outcome = 'created'
				AND NOT EXISTS (SELECT 1 FROM scans sc WHERE sc.id = f.scan_id
					AND sc.trigger_schedule_id = f.schedule_id AND sc.trigger_slot_at = f.slot_at))`,
		org, cutoff).Scan(&v.SlotsDue, &v.SlotsFired, &v.SlotsMissed, &v.Skipped, &v.DuplicateRuns, &v.FiresNoScan)
	v.ok = err == nil && v.SlotsDue > 0 && v.SlotsFired+v.SlotsMissed == v.SlotsDue && v.DuplicateRuns == 0 && v.FiresNoScan == 0
	return v, err
}

// histogram is a Prometheus histogram's cumulative buckets as scraped.
type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative
	count  float64
}

// histogram scrapes a histogram without labels from the gateway's /metrics.
func (p *producer) histogram(ctx context.Context, name string) (histogram, error) {
	text, err := p.metricsText(ctx)
	if err != nil {
		return histogram{}, err
	}
	type bucket struct{ le, n float64 }
	var buckets []bucket
	var h histogram
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+`_bucket{le="`); ok {
			le, n, ok := strings.Cut(rest, `"} `)
			if !ok {
				continue
			}
			bound, err1 := strconv.ParseFloat(le, 64)
			count, err2 := strconv.ParseFloat(strings.TrimSpace(n), 64)
			if err1 != nil || err2 != nil {
				return histogram{}, fmt.Errorf("%s: bad bucket line %q", name, line)
			}
			buckets = append(buckets, bucket{bound, count})
		}
		if rest, ok := strings.CutPrefix(line, name+"_count "); ok {
			h.count, _ = strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if len(buckets) == 0 {
		return histogram{}, fmt.Errorf("/metrics has no %s", name)
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	for _, b := range buckets {
		h.bounds, h.counts = append(h.bounds, b.le), append(h.counts, b.n)
	}
	return h, nil
}

// counter scrapes a counter without labels from the gateway's /metrics.
func (p *producer) counter(ctx context.Context, name string) (float64, error) {
	text, err := p.metricsText(ctx)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// minus is the observations made between two scrapes.
func (h histogram) minus(earlier histogram) histogram {
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts)), count: h.count - earlier.count}
	for i := range h.counts {
		out.counts[i] = h.counts[i]
		if i < len(earlier.counts) {
			out.counts[i] -= earlier.counts[i]
		}
	}
	return out
}

// quantileMs estimates quantile q in milliseconds by linear interpolation
// within its bucket, as PromQL's histogram_quantile does; nil without
// observations, and the last finite bound when q falls in +Inf.
func (h histogram) quantileMs(q float64) *float64 {
	if h.count <= 0 {
		return nil
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, bound := range h.bounds {
		if h.counts[i] >= rank {
			if math.IsInf(bound, 1) {
				return ptr(round(lower*1000, 1))
			}
			inBucket := h.counts[i] - below
			frac := 0.0
			if inBucket > 0 {
				frac = (rank - below) / inBucket
			}
			return ptr(round((lower+(bound-lower)*frac)*1000, 1))
		}
		lower, below = bound, h.counts[i]
	}
	return nil
}

// maxBoundMs is the upper bound of the highest bucket with an observation
// (the largest lag is at most this), in milliseconds; nil when that is
// +Inf or there were none.
func (h histogram) maxBoundMs() *float64 {
	below := 0.0
	top := -1
	for i := range h.bounds {
		if h.counts[i] > below {
			top = i
		}
		below = h.counts[i]
	}
	if top < 0 || math.IsInf(h.bounds[top], 1) {
		return nil
	}
	return ptr(round(h.bounds[top]*1000, 1))
}
