// Package work creates the work a worker leases: tasks (tasks.go) and
// scans with their jobs (scans.go), in the caller's transaction, with what
// caused them (trigger.go), the checks every creation passes — the scan
// scope and a scan's scope key (scope.go), where a task may run: its label
// selector and pinned worker (placement.go) — and the rows that read them
// back. Creating is shared by the facade's CreateTask and CreateScan and by
// a schedule's fire (store/internal/schedules), so it lives below both.
//
// It stands on store/internal/core (the queue's rule, creation
// idempotency) and the secrets and scan-scope domains, and imports neither
// the fencing predicates, nor the lease engine, nor the facade (depguard);
// the facade names its types (store.Task is work.Task) so that callers do
// not change.
package work
