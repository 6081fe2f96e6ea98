package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// createSecondlyScans creates n schedules of a loopback scan every second
// from start (to end, if given), overlap allow, catch-up once.
func createSecondlyScans(t *testing.T, g *harness.Gateway, org uuid.UUID, n int, start time.Time, end *time.Time) []uuid.UUID {
	t.Helper()
	allow, once, oneSecond := apiclient.ScheduleOverlapAllow, apiclient.ScheduleCatchUpOnce, 1
	ids := make([]uuid.UUID, n)
	for i := range ids {
		res, err := g.Control.CreateScheduleWithResponse(context.Background(), apiclient.CreateScheduleRequest{
			OrganizationId: org, Name: fmt.Sprintf("every second %d", i),
			Timing: apiclient.ScheduleTiming{IntervalSeconds: &oneSecond, StartAt: &start, EndAt: end, Overlap: &allow, CatchUp: &once},
			Definition: apiclient.ScheduleDefinition{Kind: apiclient.ScheduleDefinitionKindScan, Scan: &apiclient.ScheduledScan{
				Targets: []string{"127.0.0.1"}, Plugins: []apiclient.ScanPlugin{{Name: "echo"}}}}})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		ids[i] = res.JSON201.Id
	}
	return ids
}

// requireEverySlotOnce checks in SQL, per schedule, that every slot from
// start (or its first slot, if it was created later) to its latest handled
// one is accounted for once (a created fire
// with its one scan, or counted missed on a later fire) and that no slot
// has two scans or a scan without its fire. It returns the slots and the
// fires that created a scan.
func requireEverySlotOnce(t *testing.T, g *harness.Gateway, ids []uuid.UUID, start time.Time) (slots, fired int) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		// One statement, one snapshot: the slots up to the schedule's
		// latest handled slot, and the fires that account for them.
		var due, accounted, created, twoScans, firesWithoutScan, scansWithoutFire int
		require.NoError(t, g.Pool.QueryRow(ctx, `
			WITH sc AS (
				-- A schedule created after start (a slow machine) begins at
				-- the first slot after its creation.
				SELECT last_slot_at, greatest($2::timestamptz, date_trunc('second', created_at) + interval '1 second') AS first_slot
				FROM schedules WHERE id = $1),
			f AS (SELECT * FROM schedule_fires WHERE schedule_id = $1 AND trigger_kind = 'schedule'
				AND slot_at <= (SELECT last_slot_at FROM sc)),
			runs AS (SELECT * FROM scans WHERE trigger_schedule_id = $1 AND trigger_kind = 'schedule'
				AND trigger_slot_at <= (SELECT last_slot_at FROM sc))
			SELECT (extract(epoch FROM (SELECT last_slot_at - first_slot FROM sc)))::int + 1,
				(SELECT coalesce(sum(1 + missed_slots), 0) FROM f)::int,
				(SELECT count(*) FROM f WHERE outcome = 'created')::int,
				(SELECT count(*) FROM (SELECT 1 FROM runs GROUP BY trigger_slot_at HAVING count(*) > 1) d)::int,
				(SELECT count(*) FROM f WHERE outcome = 'created'
					AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = f.scan_id AND runs.trigger_slot_at = f.slot_at))::int,
				(SELECT count(*) FROM runs WHERE NOT EXISTS (SELECT 1 FROM f
					WHERE f.outcome = 'created' AND f.scan_id = runs.id AND f.slot_at = runs.trigger_slot_at))::int`,
			id, start).Scan(&due, &accounted, &created, &twoScans, &firesWithoutScan, &scansWithoutFire))
		require.Zero(t, twoScans, "schedule %s: a slot created two scans", id)
		require.Zero(t, firesWithoutScan, "schedule %s: a created fire has no scan", id)
		require.Zero(t, scansWithoutFire, "schedule %s: a scan has no fire", id)
		if due != accounted {
			t.Logf("schedule %s: its fires (slot - start, outcome, missed):\n%s", id, fireList(t, g, id, start))
		}
		require.Equal(t, due, accounted, "schedule %s: every slot fired or counted missed, once", id)
		slots += due
		fired += created
	}
	return slots, fired
}

// fireArmed is the environment of a replica that crashes, each with
// probability p, at the places a replica firing schedules may crash: just
// before and just after the COMMIT of the transaction that claims due
// schedules, creates their scans and advances them.
func fireArmed(p string) []string {
	return []string{"GATEWAY_FAILPOINTS=before-commit:fire-schedules@" + p + ",after-commit:fire-schedules@" + p}
}

// TestKillWhileFiringSchedules: two replicas fire twenty one-second
// schedules of scans while each crashes itself (exit 137, as kill -9) at
// random just before or after the COMMIT of its fire transaction, and is
// also killed with SIGKILL once it has made progress: each round waits for
// 10 to 50 more fires (restarting replicas that crashed meanwhile), then
// kills one of them — 6 rounds, 60 with FAULTS_LONG=1. Progress, not a
// timer, paces the kills, so a loaded machine that is slow to restart
// replicas gets as many kills, only later. The control replica does not
// fire (-schedule-timer=false), so every slot is fired by a replica that
// may die. Then plain replicas take over. Every slot must be accounted for
// exactly once — one fire and one scan, or counted as missed on a later
// fire (catch-up once) — and no slot may have two scans.
func TestKillWhileFiringSchedules(t *testing.T) {
	rounds := 6
	if scaleOf().Long {
		rounds = 60
	}
	cl := startClusterWith(t, harness.Database{}, []string{"-schedule-timer=false"}, fireArmed("0.15"), fireArmed("0.15"))
	g := cl.g
	org := g.NewOrganization(t, "schedules")
	start := time.Now().Add(2 * time.Second).Truncate(time.Second)
	ids := createSecondlyScans(t, g, org, 20, start, nil)

	fires := func() int {
		var n int
		require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM schedule_fires
			WHERE schedule_id = ANY($1) AND trigger_kind = 'schedule'`, ids).Scan(&n))
		return n
	}
	for round := range rounds {
		target := fires() + 10 + rand.IntN(41)
		harness.WaitFor(t, 2*time.Minute, fmt.Sprintf("round %d: %d fires", round+1, target), func() bool {
			cl.reviveCrashed()
			return fires() >= target
		})
		cl.kill(1 + rand.IntN(2))
	}
	cl.calmDown()
	calm := time.Now()
	harness.WaitFor(t, 2*time.Minute, "every schedule firing again after the faults", func() bool {
		var behind int
		require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM schedules
			WHERE id = ANY($1) AND (last_slot_at IS NULL OR last_slot_at < $2)`, ids, calm).Scan(&behind))
		return behind == 0
	})

	slots, fired := requireEverySlotOnce(t, g, ids, start)
	t.Logf("schedules: %d slots, %d fired, %d counted missed; %d SIGKILLs, %d crashes at a fire COMMIT failpoint",
		slots, fired, slots-fired, cl.Kills, cl.Crashes)
	require.Equal(t, rounds, cl.Kills, "a SIGKILL per round, each after the fires it waited for")
}

// TestScheduleReplicasFireEachSlotOnce: two and three gateway processes on
// one database all run the timer over the slots of one-second interval
// schedules (FAULTS_LONG: 1,000 slots, 50 schedules of 20 slots; otherwise
// 100); every slot is accounted for exactly once — fired with one scan, or
// counted as missed on a later fire when a busy machine was late — and
// none created two.
func TestScheduleReplicasFireEachSlotOnce(t *testing.T) {
	schedules, slotsEach := 10, 10
	if scaleOf().Long {
		schedules, slotsEach = 50, 20
	}
	for _, replicas := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			g, _ := harness.StartProcesses(t, replicas)
			org := g.NewOrganization(t, "acme")
			// Every schedule starts on the same whole second, a few seconds
			// ahead, so that the replicas contend for the same slots.
			start := time.Now().Add(3 * time.Second).Truncate(time.Second)
			end := start.Add(time.Duration(slotsEach)*time.Second - time.Millisecond)
			ids := createSecondlyScans(t, g, org, schedules, start, &end)
			harness.WaitFor(t, 3*time.Minute, "every schedule past its last slot", func() bool {
				var ended int
				require.NoError(t, g.Pool.QueryRow(context.Background(), `SELECT count(*) FROM schedules
					WHERE id = ANY($1) AND next_slot_at IS NULL`, ids).Scan(&ended))
				return ended == schedules
			})
			slots, fired := requireEverySlotOnce(t, g, ids, start)
			// All of them unless creating the schedules outlasted the lead
			// (their first slots then came after their creation).
			require.LessOrEqual(t, slots, schedules*slotsEach)
			require.Positive(t, slots)
			t.Logf("%d replicas: %d slots, %d fired, %d counted missed on a later fire", replicas, slots, fired, slots-fired)
		})
	}
}

// fireList renders a schedule's fires for a failure message.
func fireList(t *testing.T, g *harness.Gateway, id uuid.UUID, start time.Time) string {
	rows, err := g.Pool.Query(context.Background(), `SELECT extract(epoch FROM slot_at - $2::timestamptz)::text,
			outcome, skip_reason, missed_slots, fired_at::text, (scan_id IS NOT NULL)
		FROM schedule_fires WHERE schedule_id = $1 ORDER BY slot_at`, id, start)
	require.NoError(t, err)
	var b strings.Builder
	var at, outcome, reason, firedAt string
	var missed int
	var scan bool
	_, err = pgx.ForEachRow(rows, []any{&at, &outcome, &reason, &missed, &firedAt, &scan}, func() error {
		fmt.Fprintf(&b, "  %s s: %s %s missed=%d fired_at=%s scan=%t\n", at, outcome, reason, missed, firedAt, scan)
		return nil
	})
	require.NoError(t, err)
	return b.String()
}
