package store_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// changeSet is a scan's changes as "kind value" lines, sorted, and the
// earlier scan they were computed against (nil when there are none).
func changeSet(t *testing.T, s *store.Store, scan uuid.UUID) ([]string, *uuid.UUID) {
	t.Helper()
	changes, _, err := s.ListScanChanges(t.Context(), store.EveryOrganization(), scan, store.ChangeFilter{Limit: 100})
	require.NoError(t, err)
	var lines []string
	var prev *uuid.UUID
	for _, c := range changes {
		lines = append(lines, c.Kind+" "+c.AssetValue)
		require.NotNil(t, c.PreviousScanID)
		if prev != nil {
			require.Equal(t, *prev, *c.PreviousScanID, "one scan's changes are against one earlier scan")
		}
		prev = c.PreviousScanID
	}
	slices.Sort(lines)
	return lines, prev
}

func ports(values ...string) []store.ResultRecord {
	recs := []store.ResultRecord{asset("ip", "127.0.0.1", "")}
	for _, v := range values {
		recs = append(recs, asset("port", "127.0.0.1:"+v, ""))
	}
	return recs
}

// leaseOf leases the next job of scan.
func leaseOf(t *testing.T, s *store.Store, b *testBundle, scan uuid.UUID) store.Lease {
	t.Helper()
	l := acquireOne(t, s, b.worker.ID)
	require.Equal(t, scan, *l.Task.ScanID)
	return l
}

// TestPartialScanIsNotCompared: a scan with a failed job observed part of
// its scope; it is neither compared nor compared with (else every port of
// the failed job would be reported closed, then opened again), until a
// redrive completes it. Then it and the scan after it are compared again,
// each change once.
func TestPartialScanIsNotCompared(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	targets := []string{"127.0.0.1"}
	page := asset("url", "https://127.0.0.1/", `{"status": 200}`)

	first := createScan1(t, s, b.org.ID, targets, "tcp-connect", "http-probe")
	runJob(t, s, b, store.AttemptSucceeded, ports("22", "443")...)
	runJob(t, s, b, store.AttemptSucceeded, page)

	partial := createScan1(t, s, b.org.ID, targets, "tcp-connect", "http-probe")
	failed := runJob(t, s, b, store.AttemptFailed)
	runJob(t, s, b, store.AttemptSucceeded, page)
	require.Equal(t, "completed", scanState(t, s, partial.ID), "a scan with a job that succeeded completes")
	changes, _ := changeSet(t, s, partial.ID)
	require.Empty(t, changes, "a partial scan is not compared")

	third := createScan1(t, s, b.org.ID, targets, "tcp-connect", "http-probe")
	runJob(t, s, b, store.AttemptSucceeded, ports("22", "8443")...)
	runJob(t, s, b, store.AttemptSucceeded, page)
	changes, prev := changeSet(t, s, third.ID)
	require.Equal(t, []string{"port_closed 127.0.0.1:443", "port_opened 127.0.0.1:8443"}, changes)
	require.Equal(t, first.ID, *prev, "the partial scan is skipped")

	// The redrive completes the partial scan: it is compared with the
	// first, and the third is compared with it instead.
	_, err := s.RetryTask(ctx, store.EveryOrganization(), failed.Task.ID)
	require.NoError(t, err)
	again := leaseOf(t, s, b, partial.ID)
	ref := refOf(b.worker.ID, again)
	sendBatch(t, s, ref, 1, uuid.NewString(), ports("22")...)
	complete(t, s, ref, store.AttemptSucceeded, false)
	require.Equal(t, "completed", scanState(t, s, partial.ID))
	changes, prev = changeSet(t, s, partial.ID)
	require.Equal(t, []string{"port_closed 127.0.0.1:443"}, changes)
	require.Equal(t, first.ID, *prev)
	changes, prev = changeSet(t, s, third.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:8443"}, changes)
	require.Equal(t, partial.ID, *prev)
	var all, distinct int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (scan_id, asset_id, kind)) FROM asset_scan_changes
		WHERE organization_id = $1`, b.org.ID).Scan(&all, &distinct))
	require.Equal(t, 2, all)
	require.Equal(t, distinct, all)
}

// TestScansCompareInCreationOrder: two scans of one scope running at once
// complete in the other order; each is compared with the one created
// before it.
func TestScansCompareInCreationOrder(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	first, second, third, secondRef, thirdRef := threeScansOfOneScope(t, s, b)
	sendBatch(t, s, thirdRef, 1, uuid.NewString(), ports("22", "80", "443")...)
	complete(t, s, thirdRef, store.AttemptSucceeded, false)
	changes, prev := changeSet(t, s, third.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:443", "port_opened 127.0.0.1:80"}, changes)
	require.Equal(t, first.ID, *prev)

	sendBatch(t, s, secondRef, 1, uuid.NewString(), ports("22", "80")...)
	complete(t, s, secondRef, store.AttemptSucceeded, false)
	changes, prev = changeSet(t, s, second.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:80"}, changes)
	require.Equal(t, first.ID, *prev)
	changes, prev = changeSet(t, s, third.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:443"}, changes, "the port the second scan saw open is not opened twice")
	require.Equal(t, second.ID, *prev)
}

// TestConcurrentCompletionsOfOneScope: while one scan of a scope records its
// history (a hand-run transaction doing what advance_scan does when the
// scan completes), a later scan of the scope completing waits for it, and
// is then compared with it — not with the scan before both.
func TestConcurrentCompletionsOfOneScope(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := withTimeout(t, 30*time.Second)
	first, second, third, secondRef, thirdRef := threeScansOfOneScope(t, s, b)
	sendBatch(t, s, secondRef, 1, uuid.NewString(), ports("22", "80")...)
	sendBatch(t, s, thirdRef, 1, uuid.NewString(), ports("22", "80", "443")...)

	op, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = op.Rollback(ctx) }()
	var opPID int
	require.NoError(t, op.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&opPID))
	_, err = op.Exec(ctx, `UPDATE scan_jobs SET state = 'completed' WHERE scan_id = $1`, second.ID)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `UPDATE scans SET state = 'completed', completed_at = now() WHERE id = $1`, second.ID)
	require.NoError(t, err)
	_, err = op.Exec(ctx, `SELECT record_scan_history($1)`, second.ID)
	require.NoError(t, err)

	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := s.CompleteAttempt(ctx, store.CompleteParams{AttemptRef: thirdRef, Outcome: store.AttemptSucceeded})
		done <- err
	})
	t.Cleanup(wg.Wait)
	// Until the third scan's completion waits behind the second's history
	// (or, without the lock, has already finished).
	var completeErr error
	for blocked, finished := false, false; !blocked && !finished; {
		select {
		case completeErr = <-done:
			finished = true
			done <- completeErr
		default:
			require.NoError(t, b.pool.QueryRow(ctx,
				`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, opPID).Scan(&blocked))
		}
	}
	require.NoError(t, op.Commit(ctx))
	require.NoError(t, <-done)

	changes, prev := changeSet(t, s, second.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:80"}, changes)
	require.Equal(t, first.ID, *prev)
	changes, prev = changeSet(t, s, third.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:443"}, changes)
	require.Equal(t, second.ID, *prev)
}

// TestScopeKeyHoldsPluginInputs: scans whose plugins take other inputs
// observe other things and are not compared; the order of targets and of
// an input's keys does not matter.
func TestScopeKeyHoldsPluginInputs(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	scan := func(targets []string, input string) store.Scan {
		sc, _, err := s.CreateScan(t.Context(), store.EveryOrganization(), store.CreateScanParams{OrganizationID: b.org.ID,
			Targets: targets, Plugins: []store.ScanPlugin{{Name: "tcp-connect", Input: []byte(input)}}})
		require.NoError(t, err)
		return sc
	}
	first := scan([]string{"127.0.0.1", "127.0.0.2"}, `{"ports": [22, 443], "timeout": 2}`)
	runJob(t, s, b, store.AttemptSucceeded, ports("22", "443")...)

	scan([]string{"127.0.0.1", "127.0.0.2"}, `{"ports": [22]}`)
	runJob(t, s, b, store.AttemptSucceeded, ports("22")...)

	same := scan([]string{"127.0.0.2", "127.0.0.1"}, `{"timeout":2,"ports":[22,443]}`)
	runJob(t, s, b, store.AttemptSucceeded, ports("22")...)
	changes, prev := changeSet(t, s, same.ID)
	require.Equal(t, []string{"port_closed 127.0.0.1:443"}, changes)
	require.Equal(t, first.ID, *prev, "compared with the scan of the same ports, not the one of port 22 only")
}

// TestConcurrentRedrivesOfOneScan: two failed jobs of a finished scan
// redriven at once (both waiting on the scan while another transaction
// holds it) — one reopens the scan, the other is refused as busy: a scan
// runs one job at a time.
func TestConcurrentRedrivesOfOneScan(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := withTimeout(t, 30*time.Second)
	scan := createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "fail", "fail-too", "tcp-connect")
	first := runJob(t, s, b, store.AttemptFailed)
	second := runJob(t, s, b, store.AttemptFailed)
	runJob(t, s, b, store.AttemptSucceeded, ports("22")...)
	require.Equal(t, "completed", scanState(t, s, scan.ID))

	op, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = op.Rollback(ctx) }()
	_, err = op.Exec(ctx, `SELECT 1 FROM scans WHERE id = $1 FOR UPDATE`, scan.ID)
	require.NoError(t, err)

	results := make(chan error, 2)
	var wg sync.WaitGroup
	for _, task := range []uuid.UUID{first.Task.ID, second.Task.ID} {
		wg.Go(func() {
			_, err := s.RetryTask(ctx, store.EveryOrganization(), task)
			results <- err
		})
	}
	t.Cleanup(wg.Wait)
	// Until both wait for the scan's lock: the first behind this
	// transaction, the second behind the first (the test's database is its
	// own).
	for waiting := 0; waiting < 2; {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0`).Scan(&waiting))
	}
	require.NoError(t, op.Commit(ctx))

	var ok, busy int
	for range 2 {
		switch err := <-results; {
		case err == nil:
			ok++
		case errors.Is(err, store.ErrScanBusy):
			busy++
		default:
			require.NoError(t, err)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, 1, busy)
	var inFlight int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE scan_id = $1
		AND state NOT IN ('completed', 'failed_terminal', 'cancelled')`, scan.ID).Scan(&inFlight))
	require.Equal(t, 1, inFlight, "one job at a time")
}

// TestAssetTargetComparesAsItsValue: a scan naming an asset as its target
// scans what a scan naming the asset's value does (the jobs get the same
// targets), so the two are compared.
func TestAssetTargetComparesAsItsValue(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	first := createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "tcp-connect")
	runJob(t, s, b, store.AttemptSucceeded, ports("22")...)
	assets, _, err := s.ListAssets(t.Context(), store.EveryOrganization(), b.org.ID, nil, 10)
	require.NoError(t, err)
	var ip uuid.UUID
	for _, a := range assets {
		if a.Type == "ip" {
			ip = a.ID
		}
	}
	require.NotEqual(t, uuid.Nil, ip)

	second, _, err := s.CreateScan(t.Context(), store.EveryOrganization(), store.CreateScanParams{OrganizationID: b.org.ID,
		AssetTargets: []uuid.UUID{ip}, Plugins: []store.ScanPlugin{{Name: "tcp-connect"}}})
	require.NoError(t, err)
	runJob(t, s, b, store.AttemptSucceeded, ports("22", "80")...)
	changes, prev := changeSet(t, s, second.ID)
	require.Equal(t, []string{"port_opened 127.0.0.1:80"}, changes)
	require.Equal(t, first.ID, *prev)
}

// threeScansOfOneScope creates three port scans of one scope: the first run
// to completion with port 22 open (the baseline), the second and third
// created after it, each with its job leased and not yet completed.
func threeScansOfOneScope(t *testing.T, s *store.Store, b *testBundle) (first, second, third store.Scan, secondRef, thirdRef store.AttemptRef) {
	t.Helper()
	targets := []string{"127.0.0.1"}
	first = createScan1(t, s, b.org.ID, targets, "tcp-connect")
	runJob(t, s, b, store.AttemptSucceeded, ports("22")...)

	second = createScan1(t, s, b.org.ID, targets, "tcp-connect")
	third = createScan1(t, s, b.org.ID, targets, "tcp-connect")
	leases := map[uuid.UUID]store.Lease{}
	for _, l := range acquire(t, s, b.worker.ID, 2).Leases {
		leases[*l.Task.ScanID] = l
	}
	require.Len(t, leases, 2)
	return first, second, third, refOf(b.worker.ID, leases[second.ID]), refOf(b.worker.ID, leases[third.ID])
}
