// Package fencing is the store's fencing rule (store/doc.go, "Fencing"),
// written once: every worker write builds its WHERE clause from these
// predicates, so the rule cannot drift between statements. Only the lease
// engine (store/internal/lease) and the worker-facing verbs of the store
// facade (results, logs, uploads) import it; depguard keeps the control
// plane out (fencing-is-the-lease-engines).
package fencing

import "github.com/worker-gateway/gateway/store/internal/core"

// LeaseLive is true while an attempt's lease may still be used: the attempt
// active (leased or running) and its lease unexpired by the database's
// clock. attempt is the SQL name of the attempt row (a table or alias).
//
// Every statement using it finds its attempts another way — by id, or by
// worker and poll key — so the test is wrapped in IS TRUE (the same
// truth), which the planner cannot turn into a scan of the live-lease
// indexes: with the young statistics of a table filling fast it did, and
// read every live lease for each completion.
func LeaseLive(attempt string) string {
	return `(` + attempt + `.status IN (` + core.ActiveStatuses + `) AND ` + attempt + `.lease_expires_at > now()) IS TRUE`
}

// LeaseHeld is the fencing predicate of every worker write that names an
// attempt: the attempt, owned by the calling worker, presenting the hash of
// the lease token it was given, with its lease live. A stale writer — lease
// expired, superseded, finished or replaced — matches no row. The other
// arguments are SQL expressions (usually placeholders) for the attempt id,
// the worker id and the token's hash.
//
// Only the id is a lookup: the rest is wrapped in IS TRUE for the same
// reason as LeaseLive (the worker's index of live attempts is no way to
// find one attempt either).
func LeaseHeld(attempt, id, worker, tokenHash string) string {
	return attempt + `.id = ` + id + ` AND (` + attempt + `.worker_id = ` + worker +
		` AND ` + attempt + `.lease_token_hash = ` + tokenHash + `) IS TRUE AND ` + LeaseLive(attempt)
}
