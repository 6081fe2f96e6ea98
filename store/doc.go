// Package store holds all of the gateway's SQL. Each exported method is one
// domain verb run in one transaction, and the fencing rules live here and only
// here.
//
// # Layout
//
// Package store is the facade: every caller uses store.Store and the names
// of this package, whichever package below does the work. Under it, each
// layer imports only the ones beneath (depguard's store-* rules):
//
//   - internal/core: what every verb stands on — the transaction runners
//     (core.InTx, core.InPipelinedTx, core.InBatches: deadlock retry, the
//     failpoints around COMMIT, the declared audit row, wake-ups sent with
//     COMMIT), the error sentinels (errors.go), the task, attempt and scan
//     state machines (transitions.go, scantransitions.go), wake-ups
//     (notify.go), the audit context and record (auditctx.go,
//     auditrecord.go), creation idempotency (idempotency.go), the one
//     webhook emitter (events.go), the Tenant and its SQL predicate and
//     the worker visibility rule (tenant.go, see Isolation), the queue's
//     rule (queue.go, see Shape), the plan settings of the statements that
//     walk an index (plans.go) and the one page helper of every listing
//     (listing.go, cursor.go, see Listings);
//   - internal/fencing: the fencing predicates (see Fencing), on the core;
//   - internal/lease: the lease engine — acquisition and the queue walk
//     (leases.go), heartbeats and starts (attempts.go,
//     heartbeat_batch.go), completion (complete.go, complete_batch.go),
//     the group-commit batchers (batchers.go), lease tokens
//     (leasetoken.go), the expiry sweep and queue upkeep (sweep.go,
//     queuevacuum.go, duetask.go) and the warm-up (warmup.go). The Store
//     embeds its Engine, so its verbs are the Store's. Leases end by
//     policy in one statement, lease.ReleaseAttempts (release.go), which
//     the engine's releases and the control plane's (disabling or
//     unassigning a worker, a label taken away) share;
//   - internal/secrets: an organization's sealed secrets (secrets.go, see
//     Secrets), the Vault the Store embeds;
//   - internal/webhooks: targets (targets.go), their sealed signing
//     secrets (secrets.go), the event catalogue (events.go), the watcher
//     (watch.go) and the outbox's delivery (delivery.go), the Hub the Store
//     embeds (see Webhooks);
//   - internal/targetscope: an organization's scan scope — the decision
//     and its lock (scope.go), the policy (policy.go), the entries
//     (targets.go) — the Scopes the Store embeds (see Scan scope). What a
//     narrowing does to live tasks and scans is this package's
//     (recheckLiveWork in targetscope.go), handed to targetscope.New, so
//     the domain does not reach back for tasks and scans;
//   - internal/history: what scans found and how it changed — assets,
//     their graph, threats (assets.go), the changes between scans
//     (changes.go), threat exclusions (exclusions.go) — the Archive the
//     Store embeds (see Scan history). Ingestion is worker-facing and stays
//     in this package (ingest.go, beside results.go), as does a redrive's
//     reopening of a scan (scanhistory.go, part of RetryTask);
//   - internal/work: creating work — a task (tasks.go), a scan and its
//     jobs (scans.go), what caused them (trigger.go), and what every
//     creation checks: the scan scope and a scan's scope key (scope.go), a
//     task's label selector and pinned worker (placement.go). It runs in
//     its caller's transaction and is shared by this package's CreateTask
//     and CreateScan and by a schedule's fire, below both; it embeds
//     nothing, and this package names its types (work.go);
//   - internal/schedules: schedules, their versions and history
//     (schedules.go), the claim that fires due slots and manual runs
//     (fire.go, its batched fast path fire_batch.go) and the limits
//     (limits.go) — the Calendar the Store embeds (see Schedules). A fire
//     creates its run with internal/work;
//   - this package: the rest of the control plane (reading, cancelling
//     and redriving tasks and scans, workers, organizations, tokens…),
//     the worker-facing verbs not yet moved (results, logs, uploads), and
//     the names callers use for what lives below (core.go, lease.go,
//     tenant.go, cursor.go, errors.go, secrets.go, webhooks.go,
//     targetscope.go, scopepolicy.go, history.go, work.go,
//     schedules.go); this package's own
//     files call the packages below by their own names (core.Notify,
//     lease.TokenHash…), with no second name. Only the lease engine and these worker verbs may
//     import internal/fencing; a control-plane domain under internal/
//     imports neither internal/fencing nor internal/lease nor this package
//     (depguard: fencing-is-the-lease-engines,
//     control-plane-is-below-the-facade-and-beside-the-engine).
//
// Paths below are relative to store/.
//
// # Rules without SQL
//
// The rules that need no database live in internal packages that import
// neither this package nor a driver (depguard's pure-logic-needs-no-database
// rule), and are tested there without PostgreSQL; this package reads their
// inputs, calls them and files their refusals under ErrInvalid
// (core.InvalidBecause):
//
//   - internal/scanscope: scope entries, matching targets and assets in
//     every spelling, what a payload names (internal/targetscope,
//     internal/work, targetscope.go, ingest.go call it);
//   - internal/slots: cron and interval slots, jitter, the slots due after
//     a downtime and their grace (internal/schedules);
//   - internal/labels: label keys and values, a selector's canonical form
//     (labels.go, workers.go, internal/work/placement.go).
//
// # Fencing
//
// A worker may change an attempt only while it holds the attempt's lease. Every
// such write is a single UPDATE or INSERT whose WHERE clause names
//
//   - the attempt id and the worker that owns it,
//   - the attempt's lease token (the fencing token handed out with the lease),
//   - an active status (leased or running), and
//   - lease_expires_at > now(), the database's clock.
//
// That predicate is written once, as fencing.LeaseHeld (and
// fencing.LeaseLive for the statements that name an upload session instead
// of a token) in internal/fencing/fencing.go;
// every worker write builds its WHERE clause from it, and TestFencing drives
// every such verb — heartbeat (single and batch), start, complete (single and
// batch), results, logs, artifact open and commit — with leases it does not
// hold. A single completion is a batch of one: CompleteAttempt and
// CompleteAttempts share the same set-based statements.
//
// A stale writer — its lease expired, superseded, or finished — changes zero
// rows. Only then may a second read run, and it only decides which error to
// return (not found, lease lost, or an idempotent replay of a finished call).
// Nothing is ever read, checked in Go and then written without a lock.
//
// The database holds only the SHA-256 of each lease token (lease_token_hash,
// internal/lease/leasetoken.go): tokens are made in Go, handed out in the lease answer and
// never stored, and statements compare the hash of the token a worker sent.
// So read access to the database cannot forge a worker's writes. It also
// means a poll repeated under its Idempotency-Key cannot answer the tokens
// its first try handed out: the replay gives each still-active lease it
// returns a fresh token, replacing the stored hash in the same statement
// (fenced like any lease write), and the old token stops working. A worker
// repeats a poll only when it never got the answer, so nobody holds the old
// token; were the first try answered after all, its token is refused as
// lease-lost and the task is retried, never run twice under one lease.
//
// # Time
//
// Every lease, expiry and deadline decision compares against PostgreSQL's
// now() inside the deciding statement. The gateway's own clock is never
// consulted, so replicas with skewed clocks decide identically.
//
// # Lock order
//
// Rows are locked in the order workers, attempts, tasks, queue rows, scans.
// Statements that touch attempts and tasks lock attempts first (complete,
// expire, release), statements that touch only tasks lock only tasks
// (cancel, retry), and a statement that also touches the workers row does
// so first (acquire, heartbeats, disabling a worker, and assigning,
// unassigning and withdrawing a grant, which take it whatever they go on to
// change: see Isolation). Acquisition
// serialises per worker on the workers row, then takes the worker's
// assignment rows FOR SHARE so that an unassignment and an acquisition can
// never interleave. The two statements that start from the queue — the
// acquisition walk and the deadline sweep — lock queue rows before their
// tasks, against that order, and so never wait for a task: they take it
// with SKIP LOCKED and leave a held one to its holder
// (internal/core/queue.go).
// Schedule rows come before all of these: a claim or a manual run locks
// the schedule, then creates its task or scan (see Schedules). Recording a
// scan's history takes, after the scan's row, a transaction-scoped
// advisory lock of class 1800 per (organization, scope key) — nothing
// else takes one of that class — and then writes only history rows (see
// Scan history). An organization's scan-scope lock (advisory, class 1801)
// comes before the task, attempt and scan rows a verb locks (a schedule
// claim takes it after its schedule rows, which a narrowing never locks):
// deciders take it shared, a narrowing exclusively (see Scan scope).
//
// # Shape
//
// The tables are the record users and the API see (tasks with states,
// attempts with their history); how the hot path moves through them was
// chosen by measurement (go run ./scripts/bench -scenario throughput
// -pg-statements N prints each table's updates and how many were HOT, and
// each index's entries read):
//
//   - worker_task_queue holds the leasable tasks only, with the columns the
//     walk orders and filters by. The acquisition walks it per organization
//     and lease class and deletes what it leases; retries, releases and
//     redrives insert into it (internal/core/queue.go has the rule and who
//     keeps it). A
//     lease class is what decides who may run a task — its type, required
//     capabilities, label selector and pinned worker (migration 000019) —
//     so a worker skips a class it cannot run with one index probe, however
//     many tasks it holds.
//   - worker_tasks has no index that names a column a state change writes
//     (state, available_at, counts, timestamps), and leaves half of each
//     page free, so lease, start and completion are HOT updates: no index
//     entry is written for them. Half, because tasks are leased in the order
//     they were written, a whole page of them by one statement, and each
//     needs room for its new version before the statement commits
//     (migration 000014).
//   - The queue is vacuumed by the gateway every so many leases
//     (VacuumQueue): a leased task's queue row is deleted, and its index
//     entry stays at the head of the walk until a vacuum removes it.
//   - New tasks, attempts and result batches get time-ordered ids
//     (gateway_uuid_v7, migration 000014): inserts append to the primary
//     keys instead of dirtying a random leaf each.
//   - An attempt is inserted by its lease and updated once when it ends:
//     the completion locks the fenced attempts and their tasks in one
//     statement and ends both rows in the next, and a single completion is
//     a batch of one. Its indexes are its id, (task, attempt number), and
//     three partial ones over live attempts only — one per task (unique),
//     by lease expiry (the sweep; a lease never outlives its attempt's
//     deadline, so the sweep finds timeouts too), by worker and poll key
//     (capacity, repeated polls) — so ending an attempt writes entries to
//     the first two alone (migration 000013).
//   - The walks must read indexes in order and stop early; statements that
//     walk run with sequential and bitmap scans off (core.OrderedScansSQL,
//     internal/core/plans.go), since a plan made from the statistics of a
//     table just filled in bulk read a whole class and sorted it. The hot
//     statements run on generic plans (core.GenericPlanSQL; byIDPlanSQL in
//     internal/lease: planning cost more than running them),
//     written so that a plan made on small tables stays right as they grow:
//     lookups by id are lateral subqueries, which cannot be turned around.
//   - A connection is warmed when it opens (WarmConnections): the hot
//     statements prepared and planned, so no request pays for a cold one.
//     Behind a pooler in transaction mode (PgBouncer) statements are
//     unnamed instead and planned on every run, still as generic plans;
//     every plan setting is transaction-local (execmode.go).
//   - A hot transaction is a few round trips (core.InPipelinedTx): BEGIN and the
//     statements that need nothing from each other in one, each statement
//     that needs an answer from before in its own, and COMMIT with the
//     transaction's wake-ups (NOTIFY) in the last.
//   - With LeaseGroupCommit a replica serves the polls that arrive while an
//     acquisition is in flight with the next one (AcquireBatcher, one
//     writer): one walk per set of like workers instead of one SKIP LOCKED
//     walk per poll, each stepping over the others' locked rows.
//   - Completions are group-committed by few writers (two per replica by
//     default): one group's statements cost about the same for 30 attempts
//     as for 100, and concurrent groups contend for the same pages.
//
// # Worker text
//
// Text a worker sends reaches the store already redacted of its task's
// secrets (the server's one redaction step, server/redact.go), with one
// exception: a log is redacted here, chunk by chunk inside the append's
// transaction (AppendRedactedLog), since a value cut by a chunk's end is
// seen whole only with what the previous chunk held back. The attempt's
// row keeps that as log_redact_carry — which spelling of which secret and
// how many of its bytes, never the bytes — and the fenced append that
// reads it moves it on, so two appends cannot start from one carry.
//
// # Isolation
//
// A control-plane caller acts for a Tenant (internal/core/tenant.go): one organization, or
// every organization (an unscoped admin token: the platform operator). In
// this package "scope" means only that tenant; what an API token may do
// (admin, producer, reader — the API's "scopes") is its permissions, checked
// by the server before it calls in: each operation's x-permission in
// openapi.yaml, decided once at authentication, which also decides the
// Scope passed here.
//
//   - Every method that reads or writes an organization's data takes the
//     Tenant as a required argument, the way openfga's storage takes its
//     store id, and filters on it in SQL with core.InTenant
//     (tenant.Where for squirrel) — one predicate,
//     "(scope IS NULL OR organization_id = scope)", never a read followed by
//     a check in Go. Something outside the scope is ErrNotFound, exactly as
//     something that does not exist, so no answer confirms another
//     organization's data.
//   - The zero Tenant binds an organization id no organization has: a call
//     that forgot its scope sees and changes nothing, instead of everything.
//   - Creating follows the same rule: a task, scan or API token for another
//     organization is ErrNotFound; only an unscoped caller creates
//     organizations.
//   - Only an unscoped caller, who may see every organization, is told that
//     an organization it names does not exist (core.MissingOrganization); a
//     scoped caller gets the plain ErrNotFound, or its empty list.
//   - Worker-facing verbs (leases, heartbeats, completions, results, logs,
//     uploads) take no Scope: a worker is isolated by its identity and its
//     lease (see Fencing), and a worker leases only from organizations it is
//     assigned to.
//   - The sweeps (expiry, retention, uploads, queue vacuum) are the
//     platform's own and act on every organization.
//
// Workers are shared infrastructure, so their rule is written out
// (core.WorkerVisibleTo in internal/core/tenant.go):
//
//   - An organization sees a worker it owns, one assigned to it, and one its
//     owner granted it. Of a worker that serves several organizations it
//     sees only its own assignment and its own active attempts, and the
//     owner only if it is the owner.
//   - A worker created by an organization's admin is owned by (and assigned
//     to) that organization; one created by an unscoped admin is a platform
//     worker unless it names an owner. Ownership never changes.
//   - Changing a worker itself (name, capacity, enabling, certificates,
//     enrollment tokens, revocation, grants) takes an unscoped admin or an
//     admin of the owning organization; a scoped admin that sees a worker
//     it does not own gets ErrForbidden.
//   - Assigning a worker to an organization takes an unscoped admin, or an
//     admin of that organization when the organization owns the worker, was
//     granted it by the owner, or already has it. A grant alone leases
//     nothing: both the owner (by granting) and the grantee (by assigning)
//     consent. Withdrawing a grant removes the grantee's assignment in the
//     same transaction.
//   - Every change of which organizations a worker serves (assigning,
//     unassigning, withdrawing a grant) first takes the worker's row
//     (lockWorkerAccess) and decides in a later statement, on what the last
//     such change committed: an assignment can never revive one that a
//     withdrawal it raced had just removed. Every path — API, console, ctl,
//     gateway admin and dev — assigns through AssignWorker.
//   - An assignment an unscoped admin removed can be restored only by an
//     unscoped admin, whatever grants exist.
//
// tests/security/matrix_test.go checks every operation of openapi.yaml
// against these rules.
//
// # Idempotency
//
// Every write a client may repeat — because it never saw the answer — is
// safe to repeat, and a repeat gets the first answer. There are four
// mechanisms, because the four writes differ in who holds the key and in
// what a repeat must give back:
//
//   - Creation keys (CreateTask, CreateScan; core.CreationReplay in
//     internal/core/idempotency.go): the producer's Idempotency-Key, unique per
//     organization, with the SHA-256 of the request's canonical JSON. The
//     INSERT … ON CONFLICT DO NOTHING waits for a concurrent first try to
//     commit; then the same request returns the row it created (replayed),
//     another request under the key is ErrIdempotencyKeyReused. Tasks and
//     scans share this one mechanism, and a manual run of a schedule
//     (RunScheduleNow) keys the task or scan it creates with it. A
//     scheduled run's key is (schedule, slot) instead (see Schedules).
//   - Poll keys (AcquireLeases; lease.ReplayLeasesSQL in internal/lease/leases.go): the worker's
//     Idempotency-Key on a lease request, stored on the attempts it
//     created. A repeat returns the still-active leases of the first try,
//     each with a fresh token (only token hashes are stored, see Fencing),
//     and leases nothing new; it differs from creation keys because its
//     answer holds secrets that cannot be stored.
//   - Result-batch keys (AcceptResultBatch): the worker's key per task with
//     the payload's SHA-256, answered with the acknowledgement stored with
//     the batch — even after the lease ended, since the first write was
//     fenced. Ingesting a batch is long, so a concurrent duplicate is
//     refused as ErrIdempotencyInFlight (an advisory lock on the key) rather
//     than left waiting on a lock.
//   - Completion replay (CompleteAttempts): no key, the attempt is the key.
//     Completing an attempt that already ended with the same outcome is a
//     replay answered as the first was; another outcome is
//     ErrAttemptFinished. Heartbeats and starts are idempotent by nature.
//
// Enrollment follows the same rule: a repeat with a used, unexpired token
// and the same public key gets the same certificate back (Enroll).
//
// What a batch ingests is idempotent by natural keys (assets, threats,
// edges, vulnerability details, detections per job), so a second attempt of
// a job sending its records again changes no count. Asset history is
// computed at each scan completion, in its transaction, keyed (scan,
// asset, kind) (internal/history/changes.go): a scan completed again after a redrive
// updates its changes in place.
//
// # Schedules
//
// A schedule (internal/schedules) creates a scan or a task per
// slot: a cron slot (robfig/cron parses; stepping is ours) or a fixed
// interval from its start. Its definition is a row of schedule_versions,
// never changed: an edit inserts the next version, and every fire, scan
// and task records the version and slot it came from (the trigger columns,
// which also say manual or api, and the token; a scan's tasks copy its
// trigger).
//
//   - Claiming. FireDueSchedules locks due schedules in one statement
//     (next_fire_at passed, or a queued slot whose run ended; FOR UPDATE
//     SKIP LOCKED, so replicas share the work) and, in the same
//     transaction, creates each slot's run, records the slot in
//     schedule_fires with it, and advances next_fire_at. A crash before
//     COMMIT leaves the slot due, and it fires later; after COMMIT the
//     schedule has moved on. The idempotency key is (schedule, slot),
//     unique in schedule_fires: a run whose fire row conflicts is rolled
//     back, so a slot never creates two runs even if the schedule were put
//     back to it. A claim's fires are written in a batch (a few set-based
//     statements for all its scans, jobs and fire rows,
//     internal/schedules/fire_batch.go); a conflict or a refused run sends
//     the claim back to one slot at a time (work.CreateTask /
//     work.CreateScan in a savepoint each), which has the answer to each. Slots are decided on the
//     database's now(); tests pass a time instead (FireDueSchedulesAt).
//   - Policies. Overlap (the latest run still active): skip records the
//     slot as skipped; allow runs it; queue_one keeps one slot queued until
//     the run ends and skips more. Catch-up (several slots due at once after
//     downtime): once fires one run for the latest and counts the others on
//     its entry; skip records them as one skipped entry and fires only a
//     slot still within its grace (a minute, at most half its period). A
//     run the database refuses is rolled back to a savepoint and its slot
//     recorded as skipped (error), so it cannot block the other schedules.
//   - Time zones (internal/slots). Cron slots are computed on wall-clock
//     time and mapped to instants: a wall time a DST change skips fires
//     once, at the first instant after the gap; one that occurs twice fires
//     once, at its first occurrence (so an hourly schedule has one fire
//     fewer that night). Intervals are absolute time. Jitter is a hash of
//     (schedule, slot), so every replica computes the same fire time.
//   - Idle cost. A timer (server/services/scheduletimer) sleeps for
//     NextScheduleFireAt's delay (the database's clock, relative), and
//     creating, editing, pausing or resuming a schedule sends WakeSchedules
//     so it reads again; so does the end of the run a queued slot waits for
//     (triggers on worker_tasks and scans, migration 000016, notify only
//     for such a run). Nothing polls: an idle gateway sends no query.
//   - Retention. Prune deletes fires older than the task retention (the
//     runs they point at are gone by then), never a queued one; versions
//     are kept, as every run records the version it came from and they
//     grow only with edits.
//   - Lock order: a claim locks schedule rows first, then creates; the
//     previous run's state is read, not locked. Creating a schedule locks
//     its organization's row first (FOR NO KEY UPDATE, which foreign-key
//     checks do not wait for).
//   - Limits (internal/schedules/limits.go). Every version's timing passes
//     one check, compileLimited: no two consecutive slots closer than the
//     store's minimum (an interval, or a cron's closest slots, computed
//     from its fields: slots.Slotter.MinGap). An organization has at most
//     its quota of schedules (organizations.max_schedules, else the
//     store's default, SetScheduleLimits): a create
//     locks the organization's row, then counts in a statement of its own,
//     which sees every create that held the lock before.
//   - Deletion. DeleteSchedule keeps the row (its versions name what its
//     kept runs came from) and marks it deleted_at under the row lock, with
//     enabled off and no next slot: a claim holding the row commits its
//     fire first, a claim after it finds nothing due, and readSchedule — the
//     one read every verb goes through — answers ErrNotFound. A manual run
//     (RunScheduleNow) keeps the overlap policy: while the latest run is
//     active and the policy is not allow, it is ErrScheduleRunInProgress.
//
// # Rules in the database
//
// Each rule the database carries has one home (issue 32 §1). Every SQL
// function has one current definition, migrations/functions/<name>.sql,
// which migrations.Up applies after the numbered migrations (a function's
// definitions in older migrations are history; from 000031 on a migration
// defines none, and TestDatabaseFunctionsHaveOneSource holds the
// database's bodies to those files). What Go also spells — the wake-up
// channel and payloads, task, scan and scan job states, the queue row of a
// task, change kinds — no function writes: it calls the functions generated
// from the Go constants (migrations/functions/00_from_go.gen.sql,
// sqlfromgo.go, TestSQLFromGo). Webhook event types stay literal in the
// calls of webhook_emit, where TestEveryEventHasOneEmitter reads them and
// checks each against the catalogue. Trigger WHEN clauses
// stay in the migrations that made them; TestTriggerConditionsSpellGoStates
// checks the states they name are Go's. DatabaseTriggers (triggers.go)
// lists every trigger and what it sets off, for the reader of a statement
// that fires it (TestDatabaseTriggersAreListed). Per rule:
//
//   - Task state machine: TaskTransitions (internal/core/transitions.go), in Go; every
//     statement that moves worker_tasks.state takes its states from it.
//   - Scan state machine (a job mirrors its task, the scan starts, advances
//     job by job and ends): ScanJobStateOf, core.ScanStartedBy, core.FinalScanStates
//     (internal/core/scantransitions.go), applied in SQL by mirror_task_state_to_scan_job
//     and advance_scan, from the trigger worker_tasks_mirror_scan_job.
//     Kept in SQL: eleven statements in eight files move a scan task's
//     state (lease, start, completion, expiry sweep, cancel, revoke, scope
//     policy, redrive), and the trigger is the one point all of them pass;
//     it fires only for scan tasks (its WHEN clause), so the generic
//     completion path pays nothing, and a scan's next task is made in the
//     statement that ended the last one, with no extra round trip. The
//     completion (moveTasksSQL in internal/lease/complete_batch.go) says so where it
//     moves the task.
//   - Scan history (record_scan_history, compare_scan_history; which scans
//     compare, in what order, one scope key at a time: work.ScanScopeKey in
//     internal/work/scope.go, internal/history/changes.go):
//     SQL, called by advance_scan when a scan completes: set-based diffing
//     over the snapshots, which a Go port would fetch and write back.
//   - Schedule wake-up when a queued slot's run ends:
//     wake_schedule_of_ended_run, from the triggers worker_tasks_wake_schedule
//     and scans_wake_schedule, for the same reason as the scan mirror (every
//     ending path; the WHEN clause keeps it off runs no schedule made).
//   - Webhook outbox: webhook_emit, the one writer (internal/core/events.go); the scan end
//     and skipped slot triggers call it (webhook_scan_ended,
//     webhook_fire_skipped); webhook_delivery_notify wakes the deliverers.
//   - Exclusion matching (threat_exclusion_for, gateway_glob_like), job
//     summaries (scan_job_output), label selectors (worker_labels_match,
//     labels.go), ids (gateway_uuid_v7): SQL, called from the statements
//     that need them.
//   - Transitional: webhook_worker_revoked (000026) serves the previous
//     release until the contract step (contract/000030) drops it.
//
// A function's body changes by editing its file, with a numbered migration
// in the same release (a COMMENT will do): the functions step runs only on
// a database at the release's own expand version, so a replica of the
// previous release restarting mid-upgrade leaves the new bodies alone; and
// the new bodies must still serve that release's writes.
//
// # Scan history
//
// See record_scan_history and compare_scan_history above, and
// internal/history (changes.go; assets, threats and the asset graph in
// assets.go; exclusions in exclusions.go). The scope key a scan is created
// with is work.ScanScopeKey (internal/work/scope.go).
//
// A redrive of a scan's job (RetryTask, reopenScanForRedrive) locks the
// task, then the scan, and only then reads whether another job of the scan
// is in flight, so two redrives at once put one job back, not two.
//
// # Scan scope
//
// Whether an organization may direct a worker at a target is decided in
// one place, targetscope.Scope.Refuse (internal/targetscope/scope.go), from what a task or scan
// names (scanscope.TaskTargets and ScanTargets: every string under a target
// key — compared as a Go worker's JSON decoder folds keys — every network asset
// the payload carries, every other string that reads as a network location,
// every host spelling a resolver reads as an address) and from the
// organization's policy and entries (internal/targetscope/policy.go: allow_list, the API's
// default, or unrestricted, explicit). Every way a task becomes leasable
// reaches it:
//
//   - created: CreateTask, CreateScan (its jobs are made from what the scan
//     was approved for), a schedule's fire (batched or one slot at a time);
//   - redriven: RetryTask, for a task or a scan's job, one or many (the
//     console's bulk redrive calls it per task);
//   - already queued or running when the scope narrows (an entry removed,
//     the policy moved to allow_list): recheckLiveWork (targetscope.go)
//     cancels, in the
//     narrowing's own transaction, every active scan and unfinished
//     scanner_plugin task that lies outside — a queued one at once, a held
//     one asked to stop, so neither a retry nor a release can queue it
//     again — with last_error_code target-out-of-scope. A scan's next job is
//     made by advance_scan in SQL, from the scan and the assets it found,
//     which ingestion held to the scope; a scan that left its scope is
//     cancelled, so it makes no next job.
//
// Leases never consult the scope: checking at narrowing costs one pass over
// an organization's live work when an operator narrows its scope, where a
// lease-time check would parse payloads in the hottest transaction.
// Narrowing and deciding are ordered by an advisory lock per organization
// (class 1801): deciders (creation, redrive, fire, ingestion) take it
// shared before they read the scope — in a statement before the one that
// reads, so its snapshot sees a narrowing the lock waited for — and a
// narrowing takes it exclusively first. A task or asset decided by the old
// scope therefore commits before the narrowing re-checks, and one decided
// after reads the new scope. A redrive reads its task (type and payload,
// which never change) before it locks the task, so the scope lock always
// comes before task rows. TestEveryPathToALeasableTaskDecidesScope
// enumerates the edges of TaskTransitions into a leasable state and the
// creation paths, and fails for an edge it does not cover.
//
// # Webhooks
//
// Events are written to an outbox (webhook_events, and one
// webhook_deliveries row per subscribed target) in the transaction of the
// change they describe, with the exact body every delivery sends, and only
// when an organization that hears it has an enabled target subscribed to
// the event. There is one writer of the outbox, the database function
// webhook_emit, and every event reaches it (internal/core/events.go;
// tests/security/events_test.go checks the catalogue,
// internal/webhooks/events.go, against it):
// core.EmitEvent from Go, which decides the recipients in the change's
// transaction (a worker's events go to the organizations that may see it
// then, its grants and assignments read FOR SHARE so that a withdrawal
// cannot interleave); core.TaskEventsSQL, a CTE of the completion and sweeper
// statements (no round trip; one index probe per ended task when no target
// exists); and the triggers of migration 000020 for a scan's end (inside
// advance_scan) and a skipped schedule slot, which go to the subject's own
// organization. worker.offline and organization.no_eligible_worker,
// computed from time, are noticed by WatchWebhookConditions
// (internal/webhooks/watch.go), once per
// transition, and emitted through core.EmitEvent. Any replica delivers:
// ClaimWebhookDeliveries takes due rows FOR UPDATE SKIP LOCKED and pushes
// them past the try's end, so a replica that dies mid-delivery leaves them
// due again (at least once); RecordWebhookDeliveries is fenced on each try's
// attempt number. The circuit breaker is the target row's, so replicas
// agree. Lock order: a delivery before its target.
//
// # Audit
//
// A control-plane change's audit row is written in the change's own
// transaction: the caller declares the record (WithAudit: the HTTP
// handlers, console sign-in and sign-out, the gateway admin commands), and
// inTx (core.InTx) writes it just before
// COMMIT (internal/core/auditctx.go). What only the change knows — the id it created,
// the organization of what an id names, a count — the verb adds inside its
// transaction (core.AuditTarget, core.AuditDetail); a replay that changes nothing
// drops it (core.AuditSkip). So every verb a change goes through runs in inTx,
// single statements too. TestEveryControlPlaneChangeIsAudited
// (tests/security) calls every changing operation of the contract, and
// TestCrashAroundAuditedChangeCommit (tests) kills a replica around COMMIT.
// Security events (refused certificates and tokens, fencing rejections)
// change nothing and are throttled: RecordAudit writes them on their own.
//
// # Secrets
//
// An organization's secrets (internal/secrets) are stored sealed: the value under
// a data key of its own, the data key wrapped by a key-encryption key the
// gateway holds outside the database (internal/secretbox), both bound to
// (organization, id, name, version). The store never sees a key-encryption
// key's bytes other than through the keyring it is handed to seal, and
// never opens a value: the lease answer does, after the acquisition
// commits (server/secrets.go), so the lease transaction is unchanged and a
// task without secret_refs costs no query. SealedSecrets is worker-facing
// and takes no Tenant: the organizations come from the leased tasks.
// RewrapSecrets (rotate-kek) locks rows in batches; a concurrent replace
// is waited for and then left out, as it sealed under the current key.
//
// Webhook signing secrets (internal/webhooks/secrets.go) are sealed the same way,
// bound to (organization, target): creation and rotation seal, deletion
// wipes, and the delivery opens them after its claim (server), never the
// store. Rows written in plaintext before migration 000027 are read as
// they are until SealWebhookSecrets — run by every replica at start-up
// with a key, by migrate up (-contract too) and by rotate-kek; batched,
// FOR UPDATE SKIP LOCKED, resumable — seals them. Until the contract step
// the plaintext stays beside the seal and this release writes both, for
// the previous release, which signs with the plaintext; a rotation by that
// release clears the row's seals (trigger of migration 000029) and each
// secret is read from its seal or else its plaintext. The contract step
// empties and forbids the plaintext columns. RewrapWebhookSecrets
// re-wraps the seals with the task secrets.
//
// # Transitions
//
// The task and attempt state machines are the tables in internal/core/transitions.go. SQL
// predicates take their "from" states from those tables, so a statement can
// never move a row along an edge the table does not have.
//
// # Listings
//
// Every listing pages by keyset through one helper, core.ListPage
// (internal/core/listing.go): a listing states its own SELECT with
// squirrel — columns, joins, its tenant predicate and its optional filters
// — and one order (core.NewestFirst or core.OldestFirst on a time and an
// id), from which ListPage makes both the
// ORDER BY and the predicate that resumes after a Cursor, so the two cannot
// disagree. TestEveryListingPagesToTheEnd walks each over tied times. A
// Cursor's encoding is a promise to clients: one handed out before must
// still decode and resume.
//
// # Errors
//
// The outcomes a caller tells apart are the sentinels in internal/core/errors.go, named for callers in
// errors.go, all of
// them (TestSentinelsListed fails for an Err declared elsewhere or left out
// of Sentinels); the HTTP layer answers each from one table. An error's text
// is for the log: a reason a client may read travels as problem.Text
// (problem.Wrap(ErrInvalid, "malformed cursor")).
//
// # Schema changes across an upgrade
//
// The statements here run beside the previous release's on one schema
// (package migrations: expand migrations only add, contract migrations,
// run after the fleet is upgraded, drop). So a statement that moves to a
// new column or table writes the shape the previous release reads too
// (both columns, or a trigger carries one over), reads what the previous
// release writes, and leaves the old shape to a contract migration.
package store
