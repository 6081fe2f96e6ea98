package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

// backlogConfig is the backlog scenario: does a lease cost more when the
// database holds a large backlog the worker cannot take?
type backlogConfig struct {
	tasks     int // pending tasks of other organizations
	unmatched int // pending tasks of the measured organization that need a capability no worker has
	samples   int // measured lease cycles per phase
}

const (
	// backlogOrgs is how many other organizations share the backlog.
	backlogOrgs = 10
	// backlogWarmup cycles start each phase and are not measured.
	backlogWarmup = 10
	// backlogTimeLimit replaces the default -time-limit: on a busy 2-core
	// machine the default run took 4 min 40 s, 95 s of it inserting.
	backlogTimeLimit = 15 * time.Minute
)

// unmatchedCapabilities is what the measured organization's unmatched
// tasks require: a plugin no benchmark worker advertises (they advertise
// nothing).
const unmatchedCapabilities = `{"plugins":["bench-no-such-plugin"]}`

// backlogPhase is one phase's record.
type backlogPhase struct {
	leaseLat []time.Duration // lease calls that got the task
	created  int
	empty    int // lease answers without a lease (the task was committed: not expected)
}

// runBacklog measures the lease latency of one worker of a fresh
// organization in sequential cycles — create a task through the API, lease
// it (max_tasks 1, wait_seconds 0), complete it — first with no other
// pending task in the database, then with c.tasks pending tasks of other
// organizations and c.unmatched older pending tasks of its own organization
// that need a capability it lacks.
func runBacklog(ctx context.Context, s *Stack, c backlogConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "backlog", Workers: 1, Samples: c.samples, BacklogTasks: c.tasks, UnmatchedTasks: c.unmatched}
	org, err := s.NewOrganization(ctx, "backlog")
	if err != nil {
		return r, err
	}
	workers, err := s.NewWorkers(ctx, "bl", 1, 1, 1, org)
	if err != nil {
		return r, err
	}
	defer s.ReleaseWorkers(ctx, org, workers)
	w := workers[0]
	if err := warmAll(ctx, workers); err != nil {
		return r, err
	}
	prod, err := s.Producer(ctx)
	if err != nil {
		return r, err
	}
	defer prod.close()
	errs := &errorTally{}
	createBody := noopTaskBody(org)

	settleDatabase(ctx, s, "VACUUM ANALYZE worker_tasks", "CHECKPOINT")
	logf("backlog: %d lease cycles with no other pending task", c.samples)
	empty := backlogCycles(ctx, w, prod, createBody, c.samples, errs)

	// The backlog: other organizations' tasks, and tasks of the measured
	// organization that no worker can take, all older than the tasks the
	// cycles create. Removed again at the end (they would stay pending for
	// ever in an existing deployment, and slow later scenarios).
	others := make([]uuid.UUID, 0, backlogOrgs)
	removeBacklog := sync.OnceValues(func() (backlogRemoved, error) {
		return deleteBacklog(context.WithoutCancel(ctx), s, org, others)
	})
	defer func() { _, _ = removeBacklog() }()
	var full backlogPhase
	if ctx.Err() == nil {
		for i := range backlogOrgs {
			o, err := s.NewOrganization(ctx, fmt.Sprintf("backlog-other-%d", i))
			if err != nil {
				return r, err
			}
			others = append(others, o)
		}
		logf("backlog: inserting %d pending tasks over %d other organizations and %d unmatched ones in the measured organization",
			c.tasks, backlogOrgs, c.unmatched)
		t0 := time.Now()
		if err := bulkInsertTasks(ctx, s, others, c.tasks, "{}"); err != nil {
			return r, err
		}
		if err := bulkInsertTasks(ctx, s, []uuid.UUID{org}, c.unmatched, unmatchedCapabilities); err != nil {
			return r, err
		}
		r.BacklogInsertSeconds = ptr(round(time.Since(t0).Seconds(), 3))
		logf("backlog: inserted in %.1f s; VACUUM ANALYZE and CHECKPOINT", time.Since(t0).Seconds())
		settleDatabase(ctx, s, "VACUUM ANALYZE worker_tasks", "CHECKPOINT")
		logf("backlog: %d lease cycles with the backlog", c.samples)
		full = backlogCycles(ctx, w, prod, createBody, c.samples, errs)
	}

	p := percentiles(empty.leaseLat, 50, 99)
	r.EmptyLeaseP50, r.EmptyLeaseP99 = ptr(p[0]), ptr(p[1])
	if len(full.leaseLat) > 0 {
		p = percentiles(full.leaseLat, 50, 99)
		r.LeaseP50, r.LeaseP99 = ptr(p[0]), ptr(p[1])
		r.RatioP50, r.RatioP99 = ratio(r.LeaseP50, r.EmptyLeaseP50), ratio(r.LeaseP99, r.EmptyLeaseP99)
	}
	r.LeaseCalls = len(empty.leaseLat) + len(full.leaseLat)
	r.EmptyPolls = empty.empty + full.empty
	r.HTTPErrors, _ = errs.snapshot()
	r.errorText = errs.String()

	removed, err := removeBacklog()
	if err != nil {
		return r, fmt.Errorf("remove the backlog: %w", err)
	}
	created := empty.created + full.created
	v := backlogVerification{backlogRemoved: removed, BacklogWant: c.tasks, UnmatchedWant: c.unmatched}
	if len(others) == 0 {
		v.BacklogWant, v.UnmatchedWant = 0, 0 // never inserted
	}
	if v.Tasks, err = verifyTasks(context.WithoutCancel(ctx), s, []uuid.UUID{org}, created); err != nil {
		return r, fmt.Errorf("verification query: %w", err)
	}
	v.ok = v.Tasks.ok && v.Backlog == v.BacklogWant && v.BacklogPending == v.BacklogWant &&
		v.Unmatched == v.UnmatchedWant && v.UnmatchedPending == v.UnmatchedWant
	r.Verification = v
	want := 2 * (backlogWarmup + c.samples)
	r.Verified = v.ok && created == want && len(empty.leaseLat) == c.samples && len(full.leaseLat) == c.samples
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s after %d of %d cycles", stopReason(ctx), created, want)
	}
	if !r.Verified && v.ok {
		return r, fmt.Errorf("only %d of %d cycles completed (see http errors)", created, want)
	}
	return r, nil
}

// backlogCycles runs backlogWarmup unmeasured and then n measured cycles:
// create a task through the API (committed when the call returns), lease it
// with one POST /v1/leases (max_tasks 1, wait_seconds 0: a single
// acquisition, no waiting) — the measured call — and complete it.
func backlogCycles(ctx context.Context, w *benchWorker, prod *producer, createBody []byte, n int, errs *errorTally) backlogPhase {
	var ph backlogPhase
	leaseBody := []byte(`{"max_tasks":1,"wait_seconds":0}`)
	const maxErrors = 100
	for i := 0; i < backlogWarmup+n && ctx.Err() == nil; {
		if _, _, err := prod.createTask(ctx, createBody); err != nil {
			if ctx.Err() != nil || errs.add("create", err) >= maxErrors || !backoffAfter(ctx, err) {
				return ph
			}
			continue
		}
		ph.created++
		for ctx.Err() == nil {
			t0 := time.Now()
			leases, err := w.poll(ctx, leaseBody)
			lat := time.Since(t0)
			if err != nil {
				if ctx.Err() != nil || errs.add("lease", err) >= maxErrors || !backoffAfter(ctx, err) {
					return ph
				}
				continue
			}
			if len(leases) == 0 {
				ph.empty++
				if ph.empty >= maxErrors {
					return ph
				}
				continue
			}
			if i >= backlogWarmup {
				ph.leaseLat = append(ph.leaseLat, lat)
			}
			for _, l := range leases {
				if err := w.completeDetached(ctx, l); err != nil {
					errs.add("complete", err)
				}
			}
			break
		}
		i++
	}
	return ph
}

// backlogRemoved is what deleting the backlog found: every task still
// pending means none was leased.
type backlogRemoved struct {
	Backlog          int `json:"backlog_deleted"`
	BacklogPending   int `json:"backlog_pending"`
	Unmatched        int `json:"unmatched_deleted"`
	UnmatchedPending int `json:"unmatched_pending"`
}

// deleteBacklog deletes the other organizations' tasks and the measured
// organization's unmatched ones.
func deleteBacklog(ctx context.Context, s *Stack, org uuid.UUID, others []uuid.UUID) (backlogRemoved, error) {
	var d backlogRemoved
	if len(others) == 0 {
		return d, nil
	}
	err := s.Pool.QueryRow(ctx, `
		WITH d AS (DELETE FROM worker_tasks WHERE organization_id = ANY($1) RETURNING state)
		SELECT count(*), count(*) FILTER (WHERE state = 'pending') FROM d`, others).Scan(&d.Backlog, &d.BacklogPending)
	if err != nil {
		return d, err
	}
	err = s.Pool.QueryRow(ctx, `
		WITH d AS (DELETE FROM worker_tasks WHERE organization_id = $1 AND required_capabilities = $2::jsonb RETURNING state)
		SELECT count(*), count(*) FILTER (WHERE state = 'pending') FROM d`, org, unmatchedCapabilities).Scan(&d.Unmatched, &d.UnmatchedPending)
	return d, err
}

// backlogVerification: the backlog was there (and untouched) during the
// second phase, and the measured organization's tasks each completed once.
type backlogVerification struct {
	backlogRemoved
	BacklogWant   int          `json:"backlog_want"`
	UnmatchedWant int          `json:"unmatched_want"`
	Tasks         verification `json:"tasks"`
	ok            bool
}

func (v backlogVerification) String() string {
	verdict := verdictOf(v.ok)
	return fmt.Sprintf("%s: backlog %d/%d tasks, %d still pending; unmatched %d/%d, %d still pending (deleted at the end); measured tasks %s",
		verdict, v.Backlog, v.BacklogWant, v.BacklogPending, v.Unmatched, v.UnmatchedWant, v.UnmatchedPending, v.Tasks)
}
