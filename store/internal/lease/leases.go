package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
	"github.com/worker-gateway/gateway/store/internal/fencing"
)

// taskTypesFor maps a worker type to the task types it may run.
var taskTypesFor = map[string][]string{
	"scanner": {"scanner_plugin"},
	"ai":      {"ai"},
}

// AcquireParams asks for up to MaxTasks leases for one worker.
type AcquireParams struct {
	WorkerID uuid.UUID
	MaxTasks int
	// Capabilities, when not nil, replaces the worker's persisted
	// advertisement before candidates are matched against it.
	Capabilities    json.RawMessage
	SoftwareVersion *string
	ProtocolVersion *string
	// IdempotencyKey, when set, makes the poll repeatable: a repeat returns
	// the still-active leases the first poll created (at most MaxTasks of
	// them), each under a fresh lease token that replaces its old one.
	IdempotencyKey string
}

// AcquireResult is what one acquisition transaction decided.
type AcquireResult struct {
	Leases []Lease
	// Replayed is true when the leases come from an earlier poll with the
	// same idempotency key.
	Replayed bool
	// OrganizationIDs are the worker's live assignments, so a poll that got
	// nothing knows which organizations' wake-ups concern it.
	OrganizationIDs []uuid.UUID
	// FreeSlots is the worker's capacity left after this acquisition.
	FreeSlots int
	// Disabled is true when the worker is disabled: it leases nothing.
	Disabled bool
	// Began is the reading of an AcquireBatcher's clock taken just before
	// the transaction that served the poll began (zero without a batcher):
	// a wake-up after it may concern tasks the transaction did not see, one
	// before it cannot.
	Began uint64
}

// Lease is one granted lease with the task snapshot the worker needs.
type Lease struct {
	AttemptID      uuid.UUID
	LeaseToken     string
	LeaseExpiresAt time.Time
	LeaseTTL       time.Duration
	LeaseDuration  time.Duration
	Task           TaskSnapshot
}

// TaskSnapshot is the task as the worker sees it in a lease.
type TaskSnapshot struct {
	ID                  uuid.UUID
	Type                string
	OrganizationID      uuid.UUID
	ScanID              *uuid.UUID
	ScanJobID           *uuid.UUID
	Payload             json.RawMessage
	AttemptNumber       int
	MaxAttempts         int
	ExecutionDeadlineAt *time.Time
	ExecutionDeadlineIn *time.Duration
	AttemptDeadlineAt   *time.Time
	AttemptDeadlineIn   *time.Duration
	// SecretRefs names the organization's secrets the task needs; the
	// server resolves them into the lease answer (nil for most tasks).
	SecretRefs []string
}

// leaseColumns selects a Lease from attempt a joined with task t, after the
// lease's token slot (the 1-based index of its token among those the
// statement was given); durations are computed by the database so they
// agree with its clock.
const leaseColumns = `a.id, a.lease_expires_at,
	extract(epoch FROM a.lease_expires_at - now())::float8,
	t.lease_duration_seconds,
	t.id, t.task_type, t.organization_id, t.scan_id, t.scan_job_id, t.payload,
	a.attempt_number, t.max_attempts,
	t.execution_deadline_at, extract(epoch FROM t.execution_deadline_at - now())::float8,
	a.deadline_at, extract(epoch FROM a.deadline_at - now())::float8,
	t.secret_refs`

// scanLease reads a row of slot and leaseColumns; the lease's token is the
// slot-th of tokens.
func scanLease(row pgx.Row, tokens []string) (Lease, int, error) {
	var (
		l                 Lease
		slot              int
		ttl               float64
		leaseSeconds      int
		execIn, attemptIn *float64
		execAt, attemptAt *time.Time
	)
	err := row.Scan(&slot, &l.AttemptID, &l.LeaseExpiresAt, &ttl, &leaseSeconds,
		&l.Task.ID, &l.Task.Type, &l.Task.OrganizationID, &l.Task.ScanID, &l.Task.ScanJobID, &l.Task.Payload,
		&l.Task.AttemptNumber, &l.Task.MaxAttempts, &execAt, &execIn, &attemptAt, &attemptIn, &l.Task.SecretRefs)
	if err != nil {
		return Lease{}, 0, err
	}
	if slot < 1 || slot > len(tokens) {
		return Lease{}, 0, fmt.Errorf("lease %s has token slot %d of %d", l.AttemptID, slot, len(tokens))
	}
	l.LeaseToken = tokens[slot-1]
	l.LeaseTTL = core.Seconds(ttl)
	l.LeaseDuration = time.Duration(leaseSeconds) * time.Second
	l.Task.ExecutionDeadlineAt, l.Task.ExecutionDeadlineIn = execAt, core.OptSeconds(execIn)
	l.Task.AttemptDeadlineAt, l.Task.AttemptDeadlineIn = attemptAt, core.OptSeconds(attemptIn)
	return l, slot, nil
}

// Seconds and OptSeconds are the core's (core/durations.go).

// AcquireLeases leases up to p.MaxTasks tasks to a worker in one transaction:
// it locks the worker row (serialising the worker's own polls, so capacity
// can be counted), takes the worker's live assignments FOR SHARE (so an
// unassignment cannot interleave), then picks candidates one organization at
// a time — priority, then organizations in turns, then age — with FOR UPDATE
// SKIP LOCKED, and creates their attempts.
//
// The statements travel in one round trip with BEGIN (they need nothing
// from each other that SQL cannot read itself), and the candidate statement
// runs with a generic plan: planning it costs more than running it.
func (s *Engine) AcquireLeases(ctx context.Context, p AcquireParams) (AcquireResult, error) {
	out := s.AcquireLeasesMany(ctx, []AcquireParams{p})
	return out[0].Result, out[0].Err
}

// AcquireOutcome is one poll's answer within a group: its leases, or the
// error the poll alone would have got.
type AcquireOutcome struct {
	Result AcquireResult
	Err    error
}

// AcquireLeasesMany serves several polls with one acquisition (River's one
// fetcher per process): in one transaction it locks every polling worker's
// row in worker id order (workers come first in the lock order of doc.go,
// and two groups must take them in the same order), replays idempotent
// polls, takes every worker's assignments FOR SHARE and counts its active
// attempts; then, for each set of polls whose workers could run the same
// tasks (type, capabilities, organizations), it walks the candidates once
// for the sum of their free slots — FOR UPDATE SKIP LOCKED, priority, then
// organizations in turns, then age — hands them out in that order, and
// creates all the attempts in one statement. Each poll is answered on its
// own. A poll alone keeps its one-round-trip acquisition (LeaseCandidatesSQL
// in the same batch): coalescing costs two more round trips, paid back only
// when there is a group to serve. If the transaction fails, a group of
// several is retried one poll at a time, so one poll's failure is only its
// own.
func (s *Engine) AcquireLeasesMany(ctx context.Context, ps []AcquireParams) []AcquireOutcome {
	acqs := make([]*acquisition, len(ps))
	for i, p := range ps {
		acqs[i] = &acquisition{p: p, alone: len(ps) == 1}
		acqs[i].tokens, acqs[i].hashes = newLeaseTokens(max(p.MaxTasks, 0))
	}
	ordered := slices.Clone(acqs)
	slices.SortStableFunc(ordered, func(a, b *acquisition) int { return core.CompareWorkers(a.p.WorkerID, b.p.WorkerID) })
	queue := func(b *pgx.Batch) {
		b.Queue(core.GenericPlanSQL)
		for _, a := range ordered {
			a.queue(b)
		}
	}
	read := func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("plan mode: %w", err)
		}
		for _, a := range ordered {
			if err := a.read(br); err != nil {
				return err
			}
		}
		return nil
	}
	finish := func(ex core.Executor) error {
		if len(ordered) > 1 {
			if err := grantLeases(ctx, ex, ordered); err != nil {
				return err
			}
		}
		for _, a := range ordered {
			if err := a.finish(ctx, ex); err != nil {
				return err
			}
		}
		return nil
	}
	out := make([]AcquireOutcome, len(ps))
	if err := s.inPipelinedTx(ctx, "acquire leases", queue, read, finish); err != nil {
		if len(ps) == 1 {
			out[0].Err = err
			return out
		}
		for i, p := range ps {
			out[i] = s.AcquireLeasesMany(ctx, []AcquireParams{p})[0]
		}
		return out
	}
	for i, a := range acqs {
		out[i].Result, out[i].Err = a.result()
	}
	return out
}

// acquisition is one poll's part of an acquisition transaction.
type acquisition struct {
	p AcquireParams
	// tokens are the lease tokens this poll may hand out, one per lease
	// it may get, and hashes their hashes: the database sees only those.
	tokens []string
	hashes [][]byte

	res          AcquireResult
	err          error // the poll's own answer: unknown or revoked worker
	found        bool  // the worker exists, is enabled and not revoked
	workerType   string
	capabilities json.RawMessage
	labels       json.RawMessage
	maxTasks     int
	capsChanged  bool
	active       int
	// alone is a poll acquired on its own, in one round trip (the
	// candidate statement joins its batch); otherwise grantLeases serves
	// the group. want is how many leases the poll may get in a group, and
	// workerGranted counts the leases all of its worker's polls got.
	alone         bool
	want          int
	workerGranted *int
}

func (a *acquisition) queue(b *pgx.Batch) {
	p := a.p
	b.Queue(touchWorkerSQL, p.WorkerID, core.NullJSON(p.Capabilities), p.SoftwareVersion, p.ProtocolVersion)
	if p.IdempotencyKey != "" {
		b.Queue(ReplayLeasesSQL, p.WorkerID, p.IdempotencyKey, a.hashes)
	}
	b.Queue(LockAssignmentsSQL, p.WorkerID)
	if a.alone {
		// The same tokens as the replay: if it replays any lease, this
		// statement grants none.
		b.Queue(LeaseCandidatesSQL, p.WorkerID, p.MaxTasks, core.NullString(p.IdempotencyKey), a.hashes)
	}
}

// read consumes the poll's results. Every one of its statements is read
// even when the worker turns out unknown or revoked (they then match
// nothing), so the polls after it in the batch read their own.
func (a *acquisition) read(br pgx.BatchResults) error {
	a.res, a.err, a.found, a.capsChanged, a.active, a.want, a.workerGranted = AcquireResult{}, nil, false, false, 0, 0, nil
	var enabled, revoked bool
	err := br.QueryRow().Scan(&a.workerType, &a.capabilities, &a.maxTasks, &enabled, &revoked, &a.capsChanged, &a.labels)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		a.err = core.ErrNotFound
	case err != nil:
		return fmt.Errorf("lock worker: %w", err)
	case revoked:
		a.err = core.ErrWorkerRevoked
	default:
		a.found, a.res.Disabled = enabled, !enabled
	}
	if a.p.IdempotencyKey != "" {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("replay leases: %w", err)
		}
		if a.res.Leases, err = collectLeases(rows, a.tokens); err != nil {
			return fmt.Errorf("replay leases: %w", err)
		}
		a.res.Replayed = len(a.res.Leases) > 0
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("lock assignments: %w", err)
	}
	for rows.Next() {
		var org uuid.UUID
		if err := rows.Scan(&org, &a.active); err != nil {
			rows.Close()
			return err
		}
		a.res.OrganizationIDs = append(a.res.OrganizationIDs, org)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock assignments: %w", err)
	}
	if !a.alone {
		return nil
	}
	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("lease candidates: %w", err)
	}
	leases, err := collectLeases(rows, a.tokens)
	if err != nil {
		return fmt.Errorf("lease candidates: %w", err)
	}
	if !a.res.Replayed {
		a.res.Leases = leases
	}
	granted := len(leases)
	a.workerGranted = &granted
	return nil
}

// finish runs, before COMMIT, what depends on what read learnt.
func (a *acquisition) finish(ctx context.Context, ex core.Executor) error {
	if a.found && a.capsChanged {
		if _, err := releaseAttemptsLackingCritical(ctx, ex, a.p.WorkerID, a.capabilities); err != nil {
			return err
		}
	}
	return nil
}

func (a *acquisition) result() (AcquireResult, error) {
	if a.err != nil {
		return AcquireResult{}, a.err
	}
	res := a.res
	if a.found {
		res.FreeSlots = a.maxTasks
		if len(res.OrganizationIDs) > 0 && !res.Replayed {
			// Unknown without assignments, and then it does not matter.
			res.FreeSlots = max(a.maxTasks-a.active-*a.workerGranted, 0)
		}
	}
	return res, nil
}

// byIDPlanSQL is GenericPlanSQL for statements that find their rows by the
// ids in the arrays they are given (completions): each input row probes a
// primary key, in a nested loop. A generic plan made while the tables were
// small instead merge-joined the sorted input with a whole primary key,
// read from its start (4 ms for one completion).
const byIDPlanSQL = core.GenericPlanSQL + `,
	set_config('enable_mergejoin', 'off', true), set_config('enable_hashjoin', 'off', true)`

// LockAssignmentsSQL takes the worker's live assignments FOR SHARE and
// counts its active attempts. A statement of its own, after the worker row
// lock, so it sees the attempts of the worker's previous poll that we may
// have waited for on that lock.
var LockAssignmentsSQL = `
	SELECT ow.organization_id,
		(SELECT count(*) FROM worker_task_attempts a WHERE ` + core.WorkerLiveAttempts("a", "$1") + `)
	FROM organization_workers ow
	JOIN workers w ON w.id = ow.worker_id AND w.enabled AND w.revoked_at IS NULL
	WHERE ow.worker_id = $1 AND ow.enabled AND ow.revoked_at IS NULL
	ORDER BY ow.organization_id
	FOR SHARE OF ow`

// ReplayLeasesSQL finds the still-active leases an earlier poll of worker
// $1 with the same idempotency key $2 created and gives each a fresh token:
// the n-th of them gets the n-th hash of $3 (there are as many as the poll
// may get leases; any further lease keeps its token and is not replayed).
// Only hashes are stored, so the old token cannot be answered again; a
// worker repeats a poll only when it never got the answer, so nobody holds
// the old token, and it stops working here. The update is fenced like any
// lease write: the attempt still active, this worker's, and unexpired.
var ReplayLeasesSQL = `
WITH replay AS (
	SELECT a.id, row_number() OVER (ORDER BY a.created_at, a.id) AS slot
	FROM worker_task_attempts a
	WHERE ` + core.WorkerLiveAttempts("a", "$1") + ` AND a.lease_request_key = $2
		AND ` + fencing.LeaseLive("a") + `
		AND EXISTS (SELECT 1 FROM workers w WHERE w.id = $1 AND w.revoked_at IS NULL)
), rotated AS (
	UPDATE worker_task_attempts a SET lease_token_hash = ($3::bytea[])[r.slot]
	FROM replay r
	WHERE a.id = r.id AND r.slot <= cardinality($3::bytea[])
		AND a.worker_id = $1 AND ` + fencing.LeaseLive("a") + `
	RETURNING a.*, r.slot
)
SELECT a.slot, ` + leaseColumns + `
FROM rotated a JOIN worker_tasks t ON t.id = a.task_id
ORDER BY a.slot`

// collectLeases reads rows of slot and leaseColumns, tokens being the
// statement's tokens.
func collectLeases(rows pgx.Rows, tokens []string) ([]Lease, error) {
	leases, _, err := collectSlottedLeases(rows, tokens)
	return leases, err
}

// collectSlottedLeases is collectLeases that also returns each lease's
// token slot (1-based).
func collectSlottedLeases(rows pgx.Rows, tokens []string) ([]Lease, []int, error) {
	defer rows.Close()
	var (
		leases []Lease
		slots  []int
	)
	for rows.Next() {
		l, slot, err := scanLease(rows, tokens)
		if err != nil {
			return nil, nil, err
		}
		leases, slots = append(leases, l), append(slots, slot)
	}
	return leases, slots, rows.Err()
}

// candidate is a task a walk found: a task pinned to a worker goes to
// that worker only.
type candidate struct {
	ID             uuid.UUID
	PinnedWorkerID *uuid.UUID
}

// grantLeases is the shared part of an acquisition, run once every poll's
// worker, replay and assignments were read. Each worker's free slots are
// shared by its polls in the group; polls that could run exactly the same
// tasks — one worker type, one capability advertisement, one set of
// labels, one set of organizations — take their candidates in one walk for
// the sum of their free slots, handed out in the walk's order (priority,
// organizations in turns, age), one to each poll in turn; then one
// statement grants them all. A task pinned to one of the group's workers
// goes to that worker's polls; a walk that found tasks pinned to a worker
// already served in full walks again without them.
func grantLeases(ctx context.Context, ex core.Executor, polls []*acquisition) error {
	type like struct {
		polls   []*acquisition
		want    int
		workers []uuid.UUID
	}
	type pollKey struct {
		worker uuid.UUID
		key    string
	}
	free, granted := map[uuid.UUID]int{}, map[uuid.UUID]*int{}
	groups := map[string]*like{}
	// A poll repeated within the group under the same Idempotency-Key is
	// the same poll: it is answered with the first one's leases.
	firstOf, repeats := map[pollKey]*acquisition{}, map[*acquisition]*acquisition{}
	var keys []string
	for _, a := range polls {
		w := a.p.WorkerID
		if granted[w] == nil {
			granted[w], free[w] = new(int), a.maxTasks-a.active
		}
		a.workerGranted = granted[w]
		if !a.found || a.res.Replayed || len(a.res.OrganizationIDs) == 0 {
			continue
		}
		if a.p.IdempotencyKey != "" {
			k := pollKey{w, a.p.IdempotencyKey}
			if first, ok := firstOf[k]; ok {
				repeats[a] = first
				continue
			}
			firstOf[k] = a
		}
		a.want = max(min(a.p.MaxTasks, free[w], len(a.tokens)), 0)
		free[w] -= a.want
		if a.want == 0 {
			continue
		}
		var key strings.Builder
		key.WriteString(a.workerType + "\x00" + string(a.capabilities) + "\x00" + string(a.labels))
		for _, org := range a.res.OrganizationIDs {
			key.WriteString("\x00" + org.String())
		}
		g := groups[key.String()]
		if g == nil {
			g = &like{}
			groups[key.String()] = g
			keys = append(keys, key.String())
		}
		g.polls, g.want = append(g.polls, a), g.want+a.want
		if !slices.Contains(g.workers, w) {
			g.workers = append(g.workers, w)
		}
	}

	var (
		// taskIDs starts empty, not nil: it is the exclusion list of the
		// walks, and a NULL array would exclude every task.
		taskIDs     = []uuid.UUID{}
		workerIDs   []uuid.UUID
		requestKeys []*string
		hashes      [][]byte
		tokens      []string
		owners      []*acquisition
		taken       = map[uuid.UUID]bool{}
	)
	give := func(a *acquisition, slot int, id uuid.UUID) {
		taken[id] = true
		taskIDs, workerIDs = append(taskIDs, id), append(workerIDs, a.p.WorkerID)
		requestKeys = append(requestKeys, core.NullString(a.p.IdempotencyKey))
		hashes, tokens = append(hashes, a.hashes[slot]), append(tokens, a.tokens[slot])
		owners = append(owners, a)
	}
	for _, key := range keys {
		g := groups[key]
		first := g.polls[0]
		handed := make([]int, len(g.polls))
		next := 0
		// pinnable are the group's workers that may still take tasks
		// pinned to them; dropped the pinned tasks a walk found for a
		// worker already served in full (this transaction holds their
		// queue rows, so SKIP LOCKED would not skip them: they are
		// excluded by id).
		pinnable, dropped := slices.Clone(g.workers), []uuid.UUID{}
		for want := g.want; want > 0; {
			rows, err := ex.Query(ctx, candidatesSQL, first.res.OrganizationIDs, taskTypesFor[first.workerType],
				string(first.capabilities), want, g.workers, append(slices.Clone(taskIDs), dropped...),
				string(first.labels), pinnable)
			if err != nil {
				return fmt.Errorf("lease candidates: %w", err)
			}
			cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[candidate])
			if err != nil {
				return fmt.Errorf("lease candidates: %w", err)
			}
			var unpinned []uuid.UUID
			full := false
			for _, c := range cands {
				if taken[c.ID] {
					// Cannot happen: the walk excludes what earlier walks took.
					return fmt.Errorf("grant leases: task %s picked twice", c.ID)
				}
				if c.PinnedWorkerID == nil {
					unpinned = append(unpinned, c.ID)
					continue
				}
				i := -1
				for j, a := range g.polls {
					if a.p.WorkerID == *c.PinnedWorkerID && handed[j] < a.want {
						i = j
						break
					}
				}
				if i < 0 {
					full = true
					dropped = append(dropped, c.ID)
					pinnable = slices.DeleteFunc(pinnable, func(w uuid.UUID) bool { return w == *c.PinnedWorkerID })
					continue
				}
				give(g.polls[i], handed[i], c.ID)
				handed[i]++
				want--
			}
			// The rest in the walk's order, one to each poll in turn.
			for _, id := range unpinned {
				for handed[next] == g.polls[next].want {
					next = (next + 1) % len(g.polls)
				}
				give(g.polls[next], handed[next], id)
				handed[next]++
				want--
				next = (next + 1) % len(g.polls)
			}
			// The walk found fewer tasks than wanted, or all it found were
			// handed out: there is no more to find. Otherwise tasks pinned
			// to a served worker took places in it: walk again without them
			// (each walk again leaves out one more worker, so this ends).
			if !full || len(cands) == 0 {
				break
			}
		}
	}
	if len(taskIDs) > 0 {
		rows, err := ex.Query(ctx, grantSQL, taskIDs, workerIDs, requestKeys, hashes)
		if err != nil {
			return fmt.Errorf("grant leases: %w", err)
		}
		leases, slots, err := collectSlottedLeases(rows, tokens)
		if err != nil {
			return fmt.Errorf("grant leases: %w", err)
		}
		// A task whose queue row the walk locked but which another
		// transaction holds (a cancel, about to dequeue it) was skipped:
		// its poll gets one lease fewer.
		for i, l := range leases {
			a := owners[slots[i]-1]
			a.res.Leases = append(a.res.Leases, l)
			*a.workerGranted++
		}
	}
	for repeat, first := range repeats {
		repeat.res.Leases, repeat.res.Replayed = first.res.Leases, len(first.res.Leases) > 0
	}
	return nil
}

// organizationWalkSQL is the candidate walk of one organization (org, an
// SQL expression) shared by both acquisition statements: it finds the
// organization's lease classes in the queue (core/queue.go) with a loose index
// scan (each class is one task type with one set of required capabilities,
// one label selector or none, one pinned worker or none; one index probe
// per class), keeps the classes whose type is in types, whose required
// capabilities caps has, whose selector labels satisfy and whose pin, if
// any, passes pinned (a condition on cls.pinned_worker_id) — a class
// without selector or pin costs two NULL tests — and walks each kept class in
// worker_task_queue_walk_idx in priority and age order, up to limit rows,
// locking the queue rows with SKIP LOCKED so that concurrent acquisitions
// never wait on each other. Each row carries its turn: its rank by age
// within its priority, so that organizations can take turns.
func organizationWalkSQL(org, types, caps, labels, pinned, limit, exclude string) string {
	return `
		WITH RECURSIVE classes AS (
			(SELECT q.lease_class, q.task_type, q.required_capabilities, q.label_selector, q.pinned_worker_id
			FROM worker_task_queue q
			WHERE q.organization_id = ` + org + `
			ORDER BY q.lease_class LIMIT 1)
			UNION ALL
			(SELECT n.* FROM classes prev CROSS JOIN LATERAL (
				SELECT q.lease_class, q.task_type, q.required_capabilities, q.label_selector, q.pinned_worker_id
				FROM worker_task_queue q
				WHERE q.organization_id = ` + org + ` AND q.lease_class > prev.lease_class
				ORDER BY q.lease_class LIMIT 1) n)
		)
		-- Window functions cannot share a SELECT with FOR UPDATE, so the
		-- turn number is computed over the locked rows one level up.
		SELECT locked.*, row_number() OVER (PARTITION BY locked.priority ORDER BY locked.created_at, locked.id) AS turn
		FROM (
			SELECT picked.* FROM classes cls CROSS JOIN LATERAL (
				SELECT q.task_id AS id, q.organization_id, q.priority, q.created_at, q.pinned_worker_id
				FROM worker_task_queue q
				WHERE q.organization_id = ` + org + ` AND q.lease_class = cls.lease_class
					AND q.available_at <= now()
					AND (q.execution_deadline_at IS NULL OR q.execution_deadline_at > now())` + exclude + `
				ORDER BY q.priority DESC, q.created_at, q.task_id
				LIMIT ` + limit + `
				FOR UPDATE OF q SKIP LOCKED
			) picked
			WHERE cls.task_type = ANY(` + types + `) AND ` + caps + ` @> cls.required_capabilities
				AND (cls.pinned_worker_id IS NULL OR ` + pinned + `)
				AND (cls.label_selector IS NULL OR worker_labels_match(` + labels + `, cls.label_selector))
		) locked`
}

// takeQueuedSQL takes the tasks of the queue rows in rel (a relation whose
// idColumn holds task ids, whose queue rows this transaction locked): it locks each
// still-leasable task with SKIP LOCKED — a transaction that holds the task
// is about to change it and delete the queue row, and waits for ours to do
// so, so waiting for it would deadlock — and deletes the queue rows of the
// tasks it took. The CTEs taken and dequeued it defines go into a WITH
// list; taken has the ids.
func takeQueuedSQL(rel, idColumn string) string {
	return `taken AS (
		SELECT t.id FROM worker_tasks t
		WHERE t.id IN (SELECT ` + idColumn + ` FROM ` + rel + `) AND t.state IN (` + core.LeasableStates + `)
		FOR UPDATE OF t SKIP LOCKED
	), dequeued AS (
		DELETE FROM worker_task_queue q USING taken WHERE q.task_id = taken.id
	)`
}

// LeaseCandidatesSQL is the acquisition of a poll alone, in the same round
// trip as its worker, replay and assignment statements (a coalesced
// acquisition needs two more): it picks and leases tasks in one statement: $1 the
// worker, $2 the most tasks the poll asks for, $3 its idempotency key, $4
// the hashes of the lease tokens to grant ($2 of them; the n-th lease
// granted gets the n-th).
//
// It leases nothing when the worker is not enabled, has no free slot, or an
// earlier poll with the same key still holds live leases (those are the
// answer). For each assigned organization separately (LATERAL) it walks the
// candidates (organizationWalkSQL). So the cost depends on the organizations
// this worker serves and their number of classes — never on anyone else's
// backlog, nor on tasks no worker like this one could run.
// Across organizations, within one priority, the n-th task of each
// organization comes before the (n+1)-th of any, and the organization this
// worker served least recently goes first: organizations take turns.
var LeaseCandidatesSQL = `
WITH worker AS (
	SELECT w.capabilities, w.labels, ` + taskTypesSQL("w.worker_type") + ` AS task_types,
		least($2, w.max_concurrent_tasks - (SELECT count(*) FROM worker_task_attempts a
			WHERE ` + core.WorkerLiveAttempts("a", "$1") + `)) AS want
	FROM workers w
	WHERE w.id = $1 AND w.enabled AND w.revoked_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM worker_task_attempts r
			WHERE ` + core.WorkerLiveAttempts("r", "$1") + ` AND r.lease_request_key = $3
				AND ` + fencing.LeaseLive("r") + `)
), candidates AS (
	SELECT c.id, c.organization_id
	FROM worker, organization_workers ow
	CROSS JOIN LATERAL (` + organizationWalkSQL("ow.organization_id", "worker.task_types", "worker.capabilities", "worker.labels",
	"cls.pinned_worker_id = $1", "(SELECT greatest(want, 0) FROM worker)", "") + `
	) c
	WHERE ow.worker_id = $1 AND ow.enabled AND ow.revoked_at IS NULL
	ORDER BY c.priority DESC, c.turn, ow.last_leased_at NULLS FIRST, c.created_at, c.id
	LIMIT (SELECT greatest(want, 0) FROM worker)
), ` + takeQueuedSQL("candidates", "id") + `, leased AS (
	UPDATE worker_tasks t SET
		` + leaseTaskSetSQL + `
	FROM taken c
	WHERE t.id = c.id
	RETURNING t.*
), slots AS (
	SELECT l.id, row_number() OVER (ORDER BY l.id) AS slot FROM leased l
), attempts AS (
	INSERT INTO worker_task_attempts
		(task_id, worker_id, organization_id, attempt_number, lease_token_hash, status, lease_expires_at, deadline_at, lease_request_key)
	SELECT l.id, $1, l.organization_id, l.attempts_started,
		($4::bytea[])[s.slot],
		'` + string(core.AttemptLeased) + `', ` + firstLeaseExpirySQL + `, d.deadline,
		$3
	FROM leased l
	JOIN slots s ON s.id = l.id
	` + attemptDeadlineSQL + `
	RETURNING *
), served AS (
	UPDATE organization_workers ow SET last_leased_at = now()
	WHERE ow.worker_id = $1 AND ow.organization_id IN (SELECT organization_id FROM leased)
)
SELECT s.slot, ` + leaseColumns + `
FROM attempts a JOIN leased t ON t.id = a.task_id JOIN slots s ON s.id = t.id
ORDER BY t.priority DESC, a.id`

// What leasing does to a task row t and to the attempt of a just-leased
// task row l, written once for both acquisition statements: the lease
// edge's change to the task; the attempt's deadline d (its timeout, never
// past the task's execution deadline), joined laterally; and its first
// lease expiry, never past that deadline.
var (
	leaseTaskSetSQL = `state = '` + string(core.TaskTransitions[core.EventLease].To) + `',
		attempt_count = t.attempt_count + 1,
		attempts_started = t.attempts_started + 1,
		updated_at = now()`
	attemptDeadlineSQL = `CROSS JOIN LATERAL (
		SELECT least(l.execution_deadline_at, now() + make_interval(secs => l.attempt_timeout_seconds)) AS deadline
	) d`
	firstLeaseExpirySQL = `least(now() + make_interval(secs => l.lease_duration_seconds), d.deadline)`
)

// candidatesSQL walks the leasable tasks one set of like polls may take:
// $1 the organizations they serve, $2 the task types their worker type
// runs, $3 their capabilities, $4 the sum of their free slots, $5 their
// workers, $6 the tasks earlier walks of the same acquisition took or left
// (rows this transaction locked are not skipped by SKIP LOCKED), $7 their
// labels, $8 those of their workers that may take tasks pinned to them —
// per organization
// (organizationWalkSQL), so the cost depends on
// the organizations served and their number of classes, never on anyone
// else's backlog. Across organizations, within one priority, the n-th task
// of each organization comes before the (n+1)-th of any, and the
// organization these workers served least recently goes first:
// organizations take turns.
var candidatesSQL = `
WITH orgs AS MATERIALIZED (
	-- When these workers last leased from each organization, read once per
	-- organization (joined laterally, it was read again for every candidate).
	SELECT o.organization_id,
		(SELECT min(ow.last_leased_at) FROM organization_workers ow
			WHERE ow.organization_id = o.organization_id AND ow.worker_id = ANY($5::uuid[])) AS served
	FROM unnest($1::uuid[]) AS o(organization_id)
)
SELECT c.id, c.pinned_worker_id
FROM orgs o
CROSS JOIN LATERAL (` + organizationWalkSQL("o.organization_id", "$2::text[]", "$3::jsonb", "$7::jsonb",
	"cls.pinned_worker_id = ANY($8::uuid[])", "$4", `
					AND q.task_id <> ALL($6::uuid[])`) + `
) c
ORDER BY c.priority DESC, c.turn, o.served NULLS FIRST, c.created_at, c.id
LIMIT $4`

// grantSQL leases the tasks of locked queue rows: $1 the tasks, $2 the
// worker each goes to, $3 that poll's idempotency key (or NULL), $4 the hash
// of the lease token it gets. It takes them off the queue (takeQueuedSQL),
// moves them to leased, creates their attempts and records
// which organizations each worker was served by, and answers each lease
// with its position in the input (the slot of its token).
var grantSQL = `
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bytea[]) WITH ORDINALITY
		AS i(task_id, worker_id, request_key, token_hash, slot)
), ` + takeQueuedSQL("input", "task_id") + `, leased AS (
	UPDATE worker_tasks t SET
		` + leaseTaskSetSQL + `
	FROM input i JOIN taken k ON k.id = i.task_id
	WHERE t.id = i.task_id
	RETURNING t.*, i.worker_id AS grant_worker, i.request_key AS grant_request_key,
		i.token_hash AS grant_token_hash, i.slot AS grant_slot
), attempts AS (
	INSERT INTO worker_task_attempts
		(task_id, worker_id, organization_id, attempt_number, lease_token_hash, status, lease_expires_at, deadline_at, lease_request_key)
	SELECT l.id, l.grant_worker, l.organization_id, l.attempts_started, l.grant_token_hash,
		'` + string(core.AttemptLeased) + `', ` + firstLeaseExpirySQL + `, d.deadline,
		l.grant_request_key
	FROM leased l
	` + attemptDeadlineSQL + `
	RETURNING *
), served AS (
	UPDATE organization_workers ow SET last_leased_at = now()
	FROM (SELECT DISTINCT grant_worker, organization_id FROM leased) s
	WHERE ow.worker_id = s.grant_worker AND ow.organization_id = s.organization_id
)
SELECT t.grant_slot, ` + leaseColumns + `
FROM attempts a JOIN leased t ON t.id = a.task_id
ORDER BY t.priority DESC, a.id`

// taskTypesSQL is a SQL expression mapping the worker type in column to the
// array of task types it may run (taskTypesFor).
func taskTypesSQL(column string) string {
	workerTypes := make([]string, 0, len(taskTypesFor))
	for wt := range taskTypesFor {
		workerTypes = append(workerTypes, wt)
	}
	sort.Strings(workerTypes)
	var b strings.Builder
	b.WriteString("CASE " + column)
	for _, wt := range workerTypes {
		fmt.Fprintf(&b, " WHEN '%s' THEN ARRAY[%s]::text[]", wt, core.SQLStates(taskTypesFor[wt]...))
	}
	b.WriteString(" ELSE ARRAY[]::text[] END")
	return b.String()
}
