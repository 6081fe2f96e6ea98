package lease

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// dueTaskQueuedSQL: is a task of these organizations due and still queued?
// One probe of the walk index per organization; no row is locked, so a
// task another poll is taking right now still counts.
const dueTaskQueuedSQL = `
SELECT EXISTS (
	SELECT 1 FROM unnest($1::uuid[]) AS o(id)
	WHERE EXISTS (SELECT 1 FROM worker_task_queue q
		WHERE q.organization_id = o.id AND q.available_at <= now()))`

// DueTaskQueued reports whether any of orgs has a due task still queued.
// A poll woken by a notice that then leased nothing asks it before passing
// the notice on: if nothing is queued, another poll took the task and
// there is nothing to pass on; if something is, this worker could not take
// it (a capability, a label, its capacity) and the next one may.
func (s *Engine) DueTaskQueued(ctx context.Context, orgs []uuid.UUID) (bool, error) {
	var queued bool
	if err := s.pool.QueryRow(ctx, dueTaskQueuedSQL, orgs).Scan(&queued); err != nil {
		return false, fmt.Errorf("due task queued: %w", err)
	}
	return queued, nil
}
