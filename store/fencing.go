package store

// The fencing rule of doc.go, written once. Every worker write builds its
// WHERE clause from these, so the rule cannot drift between statements.

// leaseLive is true while an attempt's lease may still be used: the attempt
// active (leased or running) and its lease unexpired by the database's
// clock. attempt is the SQL name of the attempt row (a table or alias).
func leaseLive(attempt string) string {
	return attempt + `.status IN (` + activeStatuses + `) AND ` + attempt + `.lease_expires_at > now()`
}

// leaseHeld is the fencing predicate of every worker write that names an
// attempt: the attempt, owned by the calling worker, presenting the hash of
// the lease token it was given, with its lease live. A stale writer — lease
// expired, superseded, finished or replaced — matches no row. The other
// arguments are SQL expressions (usually placeholders) for the attempt id,
// the worker id and the token's hash.
func leaseHeld(attempt, id, worker, tokenHash string) string {
	return attempt + `.id = ` + id + ` AND ` + attempt + `.worker_id = ` + worker +
		` AND ` + attempt + `.lease_token_hash = ` + tokenHash + ` AND ` + leaseLive(attempt)
}
