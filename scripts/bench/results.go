package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// resultsConfig is the results scenario.
type resultsConfig struct {
	workers       int
	batches       int     // first writes in all, spread over the workers
	records       int     // records per batch
	replaySample  float64 // share of each worker's batches sent again
	leaseDuration int     // seconds, set on the tasks in SQL
}

// recordMix splits a batch's records: 70 % asset records, the rest threats.
func recordMix(records int) (assets, threats int) {
	assets = (records*70 + 50) / 100
	if records > 0 && assets == 0 {
		assets = 1
	}
	return assets, records - assets
}

// resultBody appends batch seq of worker w to buf: nAssets asset records on
// distinct hostnames (distinct across the whole run, too), then nThreats
// threat records, threat j on the batch's hostname j mod nAssets with
// external id bench-j — so every threat's natural key (asset, external id)
// is distinct as well. The same (w, seq) always gives the same bytes.
func resultBody(buf []byte, w, seq, nAssets, nThreats int) []byte {
	severities := [...]string{"info", "low", "medium", "high", "critical"}
	buf = append(buf, `{"sequence_number":`...)
	buf = strconv.AppendInt(buf, int64(seq), 10)
	buf = append(buf, `,"records":[`...)
	for i := range nAssets {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"kind":"asset","asset":{"type":"hostname","value":"`...)
		buf = appendHostname(buf, w, seq, i)
		buf = append(buf, `"}}`...)
	}
	for j := range nThreats {
		if nAssets > 0 || j > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"kind":"threat","asset":{"type":"hostname","value":"`...)
		buf = appendThreatHost(buf, w, seq, j, nAssets)
		buf = append(buf, `"},"external_id":"bench-`...)
		buf = strconv.AppendInt(buf, int64(j), 10)
		buf = append(buf, `","title":"Bench finding `...)
		buf = strconv.AppendInt(buf, int64(j), 10)
		buf = append(buf, `","severity":"`...)
		buf = append(buf, severities[(seq+j)%len(severities)]...)
		buf = append(buf, `"}`...)
	}
	return append(buf, "]}"...)
}

// appendHostname appends asset hostname i of batch seq of worker w (already
// in normalised form: lower case, no trailing dot).
func appendHostname(buf []byte, w, seq, i int) []byte {
	buf = append(buf, 'w')
	buf = strconv.AppendInt(buf, int64(w), 10)
	buf = append(buf, "-b"...)
	buf = strconv.AppendInt(buf, int64(seq), 10)
	buf = append(buf, "-h"...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	return append(buf, ".bench.example"...)
}

// appendThreatHost is the hostname threat j is reported on: one of the
// batch's asset hostnames, or a hostname of its own when the batch has no
// asset records.
func appendThreatHost(buf []byte, w, seq, j, nAssets int) []byte {
	if nAssets > 0 {
		return appendHostname(buf, w, seq, j%nAssets)
	}
	buf = appendHostname(buf, w, seq, 0)
	return append(buf[:len(buf)-len(".bench.example")], []byte("-t"+strconv.Itoa(j)+".bench.example")...)
}

// resultsWorkerStats is one simulated worker's record.
type resultsWorkerStats struct {
	lease       lease
	leased      bool
	sent        int      // batches acknowledged (first writes, including retried ones)
	acks        [][]byte // acknowledgement of batch seq at acks[seq-1]
	firstLat    []time.Duration
	retried     int // first writes whose retry was answered as a replay
	replayLat   []time.Duration
	replays     int
	notReplayed int // replays answered without Idempotent-Replayed: true
	ackDiffers  int // replays whose body is not the original acknowledgement
}

// resultsShared is what the workers of one run share.
type resultsShared struct {
	done      atomic.Int64
	errors    errorTally
	maxErrors int
}

// runResults leases one long-lived task per worker, then has every worker
// post its share of result batches (the measured first writes), then send a
// sample of them again with the same keys and bodies (the measured
// replays), and verifies in SQL that each batch was ingested exactly once.
func runResults(ctx context.Context, s *Stack, c resultsConfig, logf func(string, ...any)) (*Result, error) {
	nWorkers := max(1, min(c.workers, c.batches))
	nAssets, nThreats := recordMix(c.records)
	r := &Result{Scenario: "results", Workers: nWorkers, Batches: c.batches, RecordsPerBatch: c.records,
		AssetRecords: nAssets, ThreatRecords: nThreats}
	org, err := s.NewOrganization(ctx, "results")
	if err != nil {
		return r, err
	}
	workers, err := s.NewWorkers(ctx, "res", nWorkers, 1, 1, org)
	if err != nil {
		return r, err
	}
	defer s.ReleaseWorkers(ctx, org, workers)

	// One task per worker, with a lease long enough for the whole run: no
	// heartbeats are needed, so every call measured is a results call.
	if err := s.InsertEchoTasks(ctx, org, nWorkers, c.leaseDuration); err != nil {
		return r, err
	}
	sh := &resultsShared{maxErrors: max(100, c.batches/10)}
	stats := make([]resultsWorkerStats, nWorkers)
	logf("results: %d workers leasing one task each (lease %d s)", nWorkers, c.leaseDuration)
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			if err := w.warm(ctx); err != nil {
				sh.errors.add("connect", err)
				return
			}
			l, err := w.leaseOne(ctx, &sh.errors)
			if err == nil {
				stats[i].lease, stats[i].leased = l, true
			}
		})
	}
	wg.Wait()
	// The attempts are completed once, before verification or on an early
	// return (then before the workers are released).
	completeAll := sync.OnceFunc(func() {
		completeLeases(ctx, workers, func(i int) (lease, bool) { return stats[i].lease, stats[i].leased }, &sh.errors)
	})
	defer completeAll()
	for i := range stats {
		if !stats[i].leased {
			r.HTTPErrors, _ = sh.errors.snapshot()
			r.errorText = sh.errors.String()
			return r, fmt.Errorf("worker %s got no lease (%s)", workers[i].Name, orReason(ctx, "see http errors"))
		}
	}
	// A fresh start for each phase (outside the windows): nothing left for
	// autovacuum from what came before, table statistics current, and no
	// dirty pages for the checkpointer. What autovacuum and checkpoints do
	// about the phase's own writes is part of the phase's cost.
	settleDatabase(ctx, s, "VACUUM ANALYZE", "CHECKPOINT")

	share := func(i int) int { return c.batches/nWorkers + btoi(i < c.batches%nWorkers) }

	// Phase 1: first writes.
	before := s.beginWindow(ctx)
	var ws *waitSampler
	if pgWaits {
		ws = startWaitSampler(ctx, s.Pool, 20*time.Millisecond)
	}
	logf("results: %d batches of %d records (%d assets, %d threats) over %d workers", c.batches, c.records, nAssets, nThreats, nWorkers)
	progressCtx, stopProgress := context.WithCancel(ctx)
	go every(progressCtx, 5*time.Second, func() {
		logf("results: %d/%d batches acknowledged", sh.done.Load(), c.batches)
	})
	start := time.Now()
	var lastAck atomic.Int64 // UnixNano of the last acknowledgement
	for i, w := range workers {
		wg.Go(func() { resultsFirstWrites(ctx, w, i, share(i), nAssets, nThreats, &stats[i], sh, &lastAck) })
	}
	wg.Wait()
	stopProgress()
	end := time.Now()
	if n := lastAck.Load(); n > 0 {
		end = time.Unix(0, n)
	}
	first := usageBetween(before, s.endWindow(context.WithoutCancel(ctx), nil), end.Sub(start))
	if ws != nil {
		r.PGWaits = ws.finish()
	}
	var firstLat []time.Duration
	sent := 0
	for i := range stats {
		firstLat = append(firstLat, stats[i].firstLat...)
		sent += stats[i].sent
		r.RetriedBatches += stats[i].retried
	}
	r.BatchesSent = sent
	r.WallSeconds = round(first.wall.Seconds(), 3)
	if first.wall > 0 {
		r.BatchesPerSec = ptr(round(float64(sent)/first.wall.Seconds(), 1))
		r.RecordsPerSec = ptr(round(float64(sent*c.records)/first.wall.Seconds(), 0))
	}
	p := percentiles(firstLat, 50, 99)
	r.BatchP50, r.BatchP99 = ptr(p[0]), ptr(p[1])
	r.GatewayCPUCores, r.PostgresCPUCores, r.LoadgenCPUCores = first.gatewayCores(), first.postgresCores(), first.loadgenCores()
	r.MachineCPUCores, r.StealCPUCores = first.machineCores(), first.stealCores()
	r.Checkpoints, r.AutovacuumRuns = first.maintenance()
	r.DBXactPerSec, r.DBXactPerBatch = first.xactsPerSec(), first.xactsPer(sent)
	r.GatewayCPUMsPerBatch = msPer(first.gatewayCPU, first.haveGW, sent)
	r.PostgresCPUMsPerBatch = msPer(first.pgCPU, first.havePG, sent)
	r.CPUMsPerBatch = first.serverMsPer(sent)

	// Phase 2: replays of a sample of every worker's acknowledged batches.
	if ctx.Err() == nil && c.replaySample > 0 {
		settleDatabase(ctx, s, "VACUUM ANALYZE", "CHECKPOINT")
		before := s.beginWindow(ctx)
		logf("results: replaying %.0f%% of each worker's batches", 100*c.replaySample)
		start := time.Now()
		lastAck.Store(0)
		for i, w := range workers {
			wg.Go(func() { resultsReplays(ctx, w, i, nAssets, nThreats, c.replaySample, &stats[i], sh, &lastAck) })
		}
		wg.Wait()
		end := time.Now()
		if n := lastAck.Load(); n > 0 {
			end = time.Unix(0, n)
		}
		rp := usageBetween(before, s.endWindow(context.WithoutCancel(ctx), nil), end.Sub(start))
		var replayLat []time.Duration
		for i := range stats {
			replayLat = append(replayLat, stats[i].replayLat...)
			r.Replays += stats[i].replays
		}
		r.ReplayWallSeconds = ptr(round(rp.wall.Seconds(), 3))
		if rp.wall > 0 {
			r.ReplaysPerSec = ptr(round(float64(r.Replays)/rp.wall.Seconds(), 1))
		}
		p := percentiles(replayLat, 50, 99)
		r.ReplayP50, r.ReplayP99 = ptr(p[0]), ptr(p[1])
		r.ReplayGatewayCPUCores, r.ReplayPostgresCPUCores, r.ReplayLoadgenCPUCores = rp.gatewayCores(), rp.postgresCores(), rp.loadgenCores()
		r.ReplayMachineCPUCores, r.ReplayStealCPUCores = rp.machineCores(), rp.stealCores()
		r.ReplayCheckpoints, r.ReplayAutovacuumRuns = rp.maintenance()
		r.ReplayDBXactPerSec, r.ReplayDBXactPerCall = rp.xactsPerSec(), rp.xactsPer(r.Replays)
		r.ReplayGatewayCPUMs = msPer(rp.gatewayCPU, rp.haveGW, r.Replays)
		r.ReplayPostgresCPUMs = msPer(rp.pgCPU, rp.havePG, r.Replays)
		r.CPUMsPerReplay = rp.serverMsPer(r.Replays)
		r.ReplayLatencyRatioP50 = ratio(r.ReplayP50, r.BatchP50)
		r.ReplayLatencyRatioP99 = ratio(r.ReplayP99, r.BatchP99)
		r.ReplayCPURatio = ratio(r.CPUMsPerReplay, r.CPUMsPerBatch)
	}
	if pid := s.GatewayPID(); pid > 0 {
		if mb, err := peakRSSMB(pid); err == nil {
			r.GatewayRSSMB = ptr(round(mb, 1))
		}
	}

	// Finish the attempts before verifying, so the task check holds.
	completeAll()
	r.HTTPErrors, _ = sh.errors.snapshot()
	r.errorText = sh.errors.String()

	v, err := verifyResults(context.WithoutCancel(ctx), s, org, stats, nAssets, nThreats, c.records, c.replaySample)
	if err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	if v.Tasks, err = verifyTasks(context.WithoutCancel(ctx), s, []uuid.UUID{org}, nWorkers); err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	v.ok = v.ok && v.Tasks.ok
	r.Verification = v
	r.Verified = v.ok && sent == c.batches
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s after %d of %d batches, %d replays", stopReason(ctx), sent, c.batches, r.Replays)
	}
	if sent != c.batches {
		return r, fmt.Errorf("only %d of %d batches were acknowledged (see http errors)", sent, c.batches)
	}
	return r, nil
}

// resultsFirstWrites posts batches 1..n of worker w, one after the other,
// with keys <attempt>:<seq>. A failed call is retried with the same key and
// body when that can succeed; a retry answered as a replay means the first
// try was persisted after all (its answer was lost), and counts as sent but
// not in the latencies.
func resultsFirstWrites(ctx context.Context, w *benchWorker, wi, n, nAssets, nThreats int, st *resultsWorkerStats, sh *resultsShared, lastAck *atomic.Int64) {
	st.acks = make([][]byte, 0, n)
	st.firstLat = make([]time.Duration, 0, n)
	var buf []byte
	for seq := 1; seq <= n; seq++ {
		buf = resultBody(buf[:0], wi, seq, nAssets, nThreats)
		key := st.lease.AttemptID + ":" + strconv.Itoa(seq)
		for {
			t0 := time.Now()
			ack, replayed, err := w.postResults(ctx, st.lease, key, buf)
			lat := time.Since(t0)
			if err == nil {
				if replayed {
					st.retried++
				} else {
					st.firstLat = append(st.firstLat, lat)
				}
				st.acks = append(st.acks, ack)
				st.sent++
				sh.done.Add(1)
				storeMax(lastAck, time.Now().UnixNano())
				break
			}
			if ctx.Err() != nil {
				return
			}
			if sh.errors.add("results", err) >= sh.maxErrors || !retryable(err) || !backoffAfter(ctx, err) {
				// A lost lease, a refused body, or too many errors: this
				// worker stops; verification counts what was sent.
				return
			}
		}
	}
}

// resultsReplays sends a sample of worker w's acknowledged batches again,
// with the same key and body, and checks that each is answered as a replay
// with the original acknowledgement.
func resultsReplays(ctx context.Context, w *benchWorker, wi, nAssets, nThreats int, sample float64, st *resultsWorkerStats, sh *resultsShared, lastAck *atomic.Int64) {
	var buf []byte
	for seq := 1; seq <= st.sent && ctx.Err() == nil; seq++ {
		if !inSample(seq, sample) {
			continue
		}
		buf = resultBody(buf[:0], wi, seq, nAssets, nThreats)
		key := st.lease.AttemptID + ":" + strconv.Itoa(seq)
		for {
			t0 := time.Now()
			ack, replayed, err := w.postResults(ctx, st.lease, key, buf)
			lat := time.Since(t0)
			if err == nil {
				st.replayLat = append(st.replayLat, lat)
				st.replays++
				if !replayed {
					st.notReplayed++
				}
				if !bytes.Equal(ack, st.acks[seq-1]) {
					st.ackDiffers++
				}
				storeMax(lastAck, time.Now().UnixNano())
				break
			}
			if ctx.Err() != nil {
				return
			}
			if sh.errors.add("replay", err) >= sh.maxErrors || !retryable(err) || !backoffAfter(ctx, err) {
				return
			}
		}
	}
}

// inSample says whether batch seq is replayed: the sample is spread evenly,
// seq is in it when ⌊seq·f⌋ steps up (f = 1: every batch).
func inSample(seq int, f float64) bool {
	return f > 0 && int(float64(seq)*f) != int(float64(seq-1)*f)
}

// completeLeases completes every worker's lease with outcome succeeded (not
// measured; an attempt already completed answers the same again).
func completeLeases(ctx context.Context, workers []*benchWorker, leaseOf func(i int) (lease, bool), errs *errorTally) {
	var wg sync.WaitGroup
	for i, w := range workers {
		l, ok := leaseOf(i)
		if !ok {
			continue
		}
		wg.Go(func() {
			if err := w.completeDetached(ctx, l); err != nil {
				errs.add("complete", err)
			}
		})
	}
	wg.Wait()
}

// resultsVerification is the database's view of a results run.
type resultsVerification struct {
	Batches          int `json:"batches"`
	BatchesWant      int `json:"batches_want"`
	NotPersisted     int `json:"batches_not_persisted"`
	KeysNotAttSeq    int `json:"keys_not_attempt_seq"`
	Records          int `json:"records"`
	RecordsWant      int `json:"records_want"`
	Assets           int `json:"assets"`
	AssetsWant       int `json:"assets_want"`
	AssetsSeenAgain  int `json:"assets_seen_again"`
	Threats          int `json:"threats"`
	ThreatsWant      int `json:"threats_want"`
	ThreatsUpdated   int `json:"threats_updated"`
	Replays          int `json:"replays"`
	ReplaysWant      int `json:"replays_want"`
	ReplaysNotMarked int `json:"replays_not_marked"`
	ReplayAckDiffers int `json:"replay_ack_differs"`

	Tasks verification `json:"tasks"`
	ok    bool
}

func (v resultsVerification) String() string {
	verdict := verdictOf(v.ok)
	return fmt.Sprintf("%s: %d/%d batches (%d not persisted, %d keys not <attempt>:<seq>), %d/%d records, "+
		"%d/%d assets (%d ingested twice), %d/%d threats (%d ingested twice), %d/%d replays (%d not marked replayed, %d with another ack); tasks %s",
		verdict, v.Batches, v.BatchesWant, v.NotPersisted, v.KeysNotAttSeq, v.Records, v.RecordsWant,
		v.Assets, v.AssetsWant, v.AssetsSeenAgain, v.Threats, v.ThreatsWant, v.ThreatsUpdated,
		v.Replays, v.ReplaysWant, v.ReplaysNotMarked, v.ReplayAckDiffers, v.Tasks)
}

// verifyResults checks in SQL what the run wrote: one persisted batch per
// acknowledged one, under its <attempt>:<seq> key, with its record count;
// as many assets as distinct hostnames sent and as many threats as distinct
// (hostname, external id) pairs sent. Every hostname and threat key occurs
// in exactly one batch, so a batch ingested a second time (by a replay)
// would show as an asset whose last_seen_at moved past its first_seen_at or
// a threat whose updated_at moved past its created_at: both must be zero.
func verifyResults(ctx context.Context, s *Stack, org uuid.UUID, stats []resultsWorkerStats, nAssets, nThreats, records int, sample float64) (resultsVerification, error) {
	var v resultsVerification
	// What was sent, counted from the same generator.
	hosts := map[string]struct{}{}
	threatKeys := map[string]struct{}{}
	var buf []byte
	for wi := range stats {
		v.BatchesWant += stats[wi].sent
		v.ReplaysNotMarked += stats[wi].notReplayed
		v.ReplayAckDiffers += stats[wi].ackDiffers
		v.Replays += stats[wi].replays
		for seq := 1; seq <= stats[wi].sent; seq++ {
			if inSample(seq, sample) {
				v.ReplaysWant++
			}
			for i := range nAssets {
				buf = appendHostname(buf[:0], wi, seq, i)
				hosts[string(buf)] = struct{}{}
			}
			for j := range nThreats {
				buf = appendThreatHost(buf[:0], wi, seq, j, nAssets)
				hosts[string(buf)] = struct{}{}
				buf = append(buf, "|bench-"...)
				buf = strconv.AppendInt(buf, int64(j), 10)
				threatKeys[string(buf)] = struct{}{}
			}
		}
	}
	v.RecordsWant = v.BatchesWant * records
	v.AssetsWant, v.ThreatsWant = len(hosts), len(threatKeys)

	err := s.Pool.QueryRow(ctx, `
		WITH b AS (
			SELECT b.* FROM worker_result_batches b JOIN worker_tasks t ON t.id = b.task_id
			WHERE t.organization_id = $1
		)
		SELECT
			(SELECT count(*) FROM b),
			(SELECT count(*) FROM b WHERE status <> 'persisted' OR ack IS NULL),
			(SELECT count(*) FROM b WHERE idempotency_key <> attempt_id::text || ':' || sequence_number),
			(SELECT coalesce(sum(record_count), 0) FROM b),
			(SELECT count(*) FROM assets WHERE organization_id = $1),
			(SELECT count(*) FROM assets WHERE organization_id = $1 AND last_seen_at <> first_seen_at),
			(SELECT count(*) FROM threats WHERE organization_id = $1),
			(SELECT count(*) FROM threats WHERE organization_id = $1 AND updated_at <> created_at)`, org,
	).Scan(&v.Batches, &v.NotPersisted, &v.KeysNotAttSeq, &v.Records, &v.Assets, &v.AssetsSeenAgain, &v.Threats, &v.ThreatsUpdated)
	if err != nil {
		return v, err
	}
	v.ok = v.Batches == v.BatchesWant && v.NotPersisted == 0 && v.KeysNotAttSeq == 0 && v.Records == v.RecordsWant &&
		v.Assets == v.AssetsWant && v.AssetsSeenAgain == 0 && v.Threats == v.ThreatsWant && v.ThreatsUpdated == 0 &&
		v.Replays == v.ReplaysWant && v.ReplaysNotMarked == 0 && v.ReplayAckDiffers == 0
	return v, nil
}

// settleDatabase runs maintenance statements between phases, outside any
// measured window (a failure, e.g. without superuser rights, is only logged).
func settleDatabase(ctx context.Context, s *Stack, stmts ...string) {
	for _, stmt := range stmts {
		if _, err := s.Pool.Exec(ctx, stmt); err != nil {
			s.cfg.logf("%s: %v (continuing)", stmt, err)
		}
	}
}

// storeMax raises a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orReason says why a setup step stopped: the context's end, or why.
func orReason(ctx context.Context, why string) string {
	if ctx.Err() != nil {
		return stopReason(ctx)
	}
	return why
}
