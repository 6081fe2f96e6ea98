package core

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// NotifyChannel is the one LISTEN/NOTIFY channel the gateway uses. Payloads
// are tiny (well under PostgreSQL's 8000-byte limit) and parsed by
// ParseWakeup.
const NotifyChannel = "worker_gateway_wakeup"

// WakeupKind says who a wake-up is for.
type WakeupKind int

const (
	// WakeOrganization: Count tasks of Organization became leasable now.
	WakeOrganization WakeupKind = iota + 1
	// WakeOrganizationAt: a task of Organization becomes leasable after
	// Delay. A relative delay, computed by the database, so a replica's
	// skewed clock cannot move the wake-up.
	WakeOrganizationAt
	// WakeWorker: something about Worker changed (capacity released,
	// assignment, enabled): its waiting polls should look again.
	WakeWorker
	// WakeWorkerRevoked: Worker was revoked: its waiting polls are answered
	// (refused) and its connections closed.
	WakeWorkerRevoked
	// WakeCapacity: one of Worker's attempts ended, freeing a slot: only its
	// polls that were waiting for a free slot need to look again.
	WakeCapacity
	// WakeIdentityChanged: which certificates authenticate Worker changed
	// (renewal, enrollment, a new certificate, a renewal's grace ended):
	// replicas forget what they cached about its certificates.
	WakeIdentityChanged
	// WakeSchedules: a schedule of Organization was created or changed:
	// the schedule timer reads the earliest fire time again.
	WakeSchedules
	// WakeWebhooks: a webhook delivery of Organization was queued or a
	// target changed: the deliverers and the webhook watcher look again.
	WakeWebhooks
)

// Wakeup is one decoded notification.
type Wakeup struct {
	Kind         WakeupKind
	Organization uuid.UUID
	Worker       uuid.UUID
	Count        int
	Delay        time.Duration
}

// Payload encodes the wake-up: "o:<org>:<count>", "t:<org>:<delay-ms>",
// "w:<worker>", "v:<worker>" (revoked), "c:<worker>" (a slot freed) or
// "i:<worker>" (its certificates changed), "s:<org>" (a schedule
// changed) or "h:<org>" (a webhook delivery queued, or a target changed;
// migration 000020 sends it from SQL too).
func (w Wakeup) Payload() string {
	switch w.Kind {
	case WakeOrganization:
		return "o:" + w.Organization.String() + ":" + strconv.Itoa(w.Count)
	case WakeOrganizationAt:
		return "t:" + w.Organization.String() + ":" + strconv.FormatInt(w.Delay.Milliseconds(), 10)
	case WakeWorker:
		return "w:" + w.Worker.String()
	case WakeWorkerRevoked:
		return "v:" + w.Worker.String()
	case WakeCapacity:
		return "c:" + w.Worker.String()
	case WakeIdentityChanged:
		return "i:" + w.Worker.String()
	case WakeSchedules:
		return "s:" + w.Organization.String()
	case WakeWebhooks:
		return "h:" + w.Organization.String()
	}
	return ""
}

// ParseWakeup decodes a notification payload.
func ParseWakeup(payload string) (Wakeup, error) {
	parts := strings.Split(payload, ":")
	bad := fmt.Errorf("bad wake-up payload %q", payload)
	if len(parts) < 2 {
		return Wakeup{}, bad
	}
	id, err := uuid.Parse(parts[1])
	if err != nil {
		return Wakeup{}, bad
	}
	switch {
	case parts[0] == "o" && len(parts) == 3:
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 0 {
			return Wakeup{}, bad
		}
		return Wakeup{Kind: WakeOrganization, Organization: id, Count: n}, nil
	case parts[0] == "t" && len(parts) == 3:
		ms, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return Wakeup{}, bad
		}
		return Wakeup{Kind: WakeOrganizationAt, Organization: id, Delay: time.Duration(ms) * time.Millisecond}, nil
	case parts[0] == "w" && len(parts) == 2:
		return Wakeup{Kind: WakeWorker, Worker: id}, nil
	case parts[0] == "v" && len(parts) == 2:
		return Wakeup{Kind: WakeWorkerRevoked, Worker: id}, nil
	case parts[0] == "c" && len(parts) == 2:
		return Wakeup{Kind: WakeCapacity, Worker: id}, nil
	case parts[0] == "i" && len(parts) == 2:
		return Wakeup{Kind: WakeIdentityChanged, Worker: id}, nil
	case parts[0] == "s" && len(parts) == 2:
		return Wakeup{Kind: WakeSchedules, Organization: id}, nil
	case parts[0] == "h" && len(parts) == 2:
		return Wakeup{Kind: WakeWebhooks, Organization: id}, nil
	}
	return Wakeup{}, bad
}

// NotifySQL sends one notification per payload $2 on channel $1.
const NotifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

// wakeupPayloads encodes wake-ups for NotifySQL.
//
// Wake-ups of one organization's new tasks are merged into one with their
// counts summed: PostgreSQL drops a notification identical to one already
// queued in the transaction, so a hundred "o:<org>:1" would arrive as one
// and wake one poller for a hundred tasks.
func wakeupPayloads(wakeups []Wakeup) []string {
	payloads := make([]string, 0, len(wakeups))
	merged := map[uuid.UUID]int{} // organization → its entry in payloads' order
	counts := []Wakeup{}
	for _, w := range wakeups {
		if w.Kind != WakeOrganization {
			payloads = append(payloads, w.Payload())
			continue
		}
		if i, ok := merged[w.Organization]; ok {
			counts[i].Count += w.Count
			continue
		}
		merged[w.Organization] = len(counts)
		counts = append(counts, w)
	}
	for _, w := range counts {
		payloads = append(payloads, w.Payload())
	}
	return payloads
}

// Notify queues wake-ups in the caller's transaction: PostgreSQL delivers
// them only if it commits, so no waiter wakes for work that never happened.
// In a pipelined transaction (InPipelinedTx) they are sent with its COMMIT,
// which saves the round trip of a statement of their own.
func Notify(ctx context.Context, ex Executor, wakeups ...Wakeup) error {
	if len(wakeups) == 0 {
		return nil
	}
	if tx, ok := ex.(*pipelinedConn); ok {
		tx.wakeups = append(tx.wakeups, wakeups...)
		return nil
	}
	_, err := ex.Exec(ctx, NotifySQL, NotifyChannel, wakeupPayloads(wakeups))
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}
