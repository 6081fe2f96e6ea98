package lease

import (
	"context"
	"fmt"
)

// VacuumQueue vacuums worker_task_queue. Every lease deletes a queue row,
// and the entry of a deleted row stays at the head of the walk index until
// a vacuum removes it: each acquisition, walking from the head, steps over
// every entry deleted since the last one. Autovacuum visits a database at
// most once a minute (autovacuum_naptime), whatever the table's own
// thresholds say — at thousands of leases a second, a 500,000-task backlog
// drained with the walk getting longer by the second (1,900 → 18,000
// buffers per walk). So the gateway asks for one itself after so many
// leases (server's queue vacuum); it locks nothing writers wait for.
//
// SKIP_LOCKED: should another vacuum hold the table, this one is skipped
// rather than queued. Without the table's ownership PostgreSQL skips it
// with a warning; the queue is then left to autovacuum.
func (s *Engine) VacuumQueue(ctx context.Context) error {
	// VACUUM cannot run in a transaction block: the pool's plain Exec sends
	// it alone.
	if _, err := s.pool.Exec(ctx, "VACUUM (SKIP_LOCKED) worker_task_queue"); err != nil {
		return fmt.Errorf("vacuum queue: %w", err)
	}
	return nil
}
