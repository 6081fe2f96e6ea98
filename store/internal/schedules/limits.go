package schedules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// ScheduleLimits bound what an organization's schedules may ask of the
// gateway: how often a schedule may fire, and how many it may have.
type ScheduleLimits struct {
	// MinInterval is the shortest gap allowed between two consecutive
	// slots of a schedule, on create and on every edit.
	MinInterval time.Duration
	// Quota is how many schedules (not deleted) an organization may have
	// when its organizations.max_schedules is NULL.
	Quota int
}

// DefaultScheduleLimits are the limits of a Calendar until SetScheduleLimits.
var DefaultScheduleLimits = ScheduleLimits{MinInterval: time.Minute, Quota: 1000}

// SetScheduleLimits replaces the calendar's schedule limits; call it before
// the store serves requests.
func (s *Calendar) SetScheduleLimits(l ScheduleLimits) { s.limits = l }

// checkMinInterval refuses a schedule whose slots may come closer together
// than least: an interval shorter than it, or a cron expression two of
// whose consecutive slots are (slots.Cron.MinGap).
func checkMinInterval(c compiled, least time.Duration) error {
	gap := c.slots.MinGap()
	if gap >= least {
		return nil
	}
	field := "interval_seconds"
	if c.slots.Cron != nil {
		field = "cron"
	}
	return problem.Wrap(core.ErrScheduleTooFrequent, problem.Text(fmt.Sprintf(
		"%s: two slots would be %s apart; this gateway's minimum between slots is %s", field, gap, least)))
}

// lockScheduleQuota takes the organization's row and refuses a new
// schedule when it already has its quota (organizations.max_schedules, or
// the calendar's default). The row lock (FOR NO KEY UPDATE, which a task's
// foreign key check does not wait for) serialises the creates of one
// organization, and the count is a statement of its own, after the lock:
// in READ COMMITTED a later statement sees what the previous holder of the
// lock committed, where a count in the locking statement would read the
// snapshot taken before it waited.
func lockScheduleQuota(ctx context.Context, tx pgx.Tx, tenant core.Tenant, org uuid.UUID, defaultQuota int) error {
	var quota int
	err := tx.QueryRow(ctx, `SELECT coalesce(max_schedules, $2) FROM organizations WHERE id = $1 FOR NO KEY UPDATE`,
		org, defaultQuota).Scan(&quota)
	if errors.Is(err, pgx.ErrNoRows) {
		return core.MissingOrganization(tenant, org)
	}
	if err != nil {
		return fmt.Errorf("lock organization for schedule quota: %w", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE organization_id = $1 AND deleted_at IS NULL`,
		org).Scan(&n); err != nil {
		return fmt.Errorf("count schedules: %w", err)
	}
	if n >= quota {
		return problem.Wrap(core.ErrQuotaExceeded, problem.Text(fmt.Sprintf(
			"the organization has %d schedules, its quota is %d; delete one first", n, quota)))
	}
	return nil
}
