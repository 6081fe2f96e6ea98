package lease

import (
	"context"
	"time"

	"github.com/worker-gateway/gateway/internal/groupcommit"
)

func newCommitter[P, R any](writers, maxGroup int, timeout time.Duration, write func(context.Context, []P) []R,
	abandoned func(context.Context, P, R)) *groupcommit.Committer[P, R] {
	return groupcommit.New(groupcommit.Options[P, R]{Writers: writers, MaxGroup: maxGroup, Timeout: timeout, Abandoned: abandoned}, write)
}

// CompletionBatcher group-commits completions (CompleteAttempts writes each
// group).
type CompletionBatcher struct {
	g *groupcommit.Committer[CompleteParams, CompleteOutcome]
}

// NewCompletionBatcher starts writers goroutines writing up to maxGroup
// completions per transaction.
func NewCompletionBatcher(s *Engine, writers, maxGroup int, timeout time.Duration) *CompletionBatcher {
	return &CompletionBatcher{g: newCommitter(writers, maxGroup, timeout, s.CompleteAttempts, nil)}
}

// Complete ends one attempt as CompleteAttempt would, in the next group.
func (b *CompletionBatcher) Complete(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	out := b.CompleteAll(ctx, []CompleteParams{p})
	return out[0].Result, out[0].Err
}

// CompleteAll ends several attempts, each answered on its own. They join the
// next groups together with other callers' completions.
func (b *CompletionBatcher) CompleteAll(ctx context.Context, ps []CompleteParams) []CompleteOutcome {
	out, errs := b.g.Submit(ctx, ps)
	for i, err := range errs {
		if err != nil {
			out[i] = CompleteOutcome{Err: err}
		}
	}
	return out
}

// Close stops the writers after the groups in flight are written.
func (b *CompletionBatcher) Close() { b.g.Close() }

// HeartbeatBatcher group-commits heartbeats (RenewLeasesMany writes each
// group).
type HeartbeatBatcher struct {
	g *groupcommit.Committer[RenewParams, RenewOutcome]
}

// NewHeartbeatBatcher starts writers goroutines writing up to maxGroup
// workers' heartbeats per transaction.
func NewHeartbeatBatcher(s *Engine, writers, maxGroup int, timeout time.Duration) *HeartbeatBatcher {
	return &HeartbeatBatcher{g: newCommitter(writers, maxGroup, timeout, s.RenewLeasesMany, nil)}
}

// Renew renews one worker's leases as RenewLeases would, in the next group.
func (b *HeartbeatBatcher) Renew(ctx context.Context, p RenewParams) ([]LeaseStatus, error) {
	out, errs := b.g.Submit(ctx, []RenewParams{p})
	if errs[0] != nil {
		return nil, errs[0]
	}
	return out[0].Statuses, out[0].Err
}

// Close stops the writers after the groups in flight are written.
func (b *HeartbeatBatcher) Close() { b.g.Close() }

// AcquireBatcher group-commits polls' acquisitions (AcquireLeasesMany
// writes each group).
type AcquireBatcher struct {
	g *groupcommit.Committer[AcquireParams, AcquireOutcome]
}

// NewAcquireBatcher starts writers goroutines writing up to maxGroup polls'
// acquisitions per transaction. clock, when set, is read just before each
// group's transaction begins (AcquireResult.Began): a poll that waited for
// the group in flight must not take the wake-ups it missed meanwhile for
// tasks its own transaction might not see. The leases of a poll whose
// caller gave up while its group was written are released at once
// (ReleaseLeases), never left to expire; release, when set, is told how
// many and why it failed.
func NewAcquireBatcher(s *Engine, writers, maxGroup int, timeout time.Duration, clock func() uint64,
	release func(n int, err error)) *AcquireBatcher {
	write := func(ctx context.Context, ps []AcquireParams) []AcquireOutcome {
		var began uint64
		if clock != nil {
			began = clock()
		}
		out := s.AcquireLeasesMany(ctx, ps)
		for i := range out {
			out[i].Result.Began = began
		}
		return out
	}
	if release == nil {
		release = func(int, error) {}
	}
	abandoned := func(ctx context.Context, p AcquireParams, out AcquireOutcome) {
		if len(out.Result.Leases) == 0 {
			return
		}
		release(s.ReleaseLeases(ctx, p.WorkerID, out.Result.Leases))
	}
	return &AcquireBatcher{g: newCommitter(writers, maxGroup, timeout, write, abandoned)}
}

// Acquire leases for one poll as AcquireLeases would, in the next group.
func (b *AcquireBatcher) Acquire(ctx context.Context, p AcquireParams) (AcquireResult, error) {
	out, errs := b.g.Submit(ctx, []AcquireParams{p})
	if errs[0] != nil {
		return AcquireResult{}, errs[0]
	}
	return out[0].Result, out[0].Err
}

// Close stops the writers after the groups in flight are written.
func (b *AcquireBatcher) Close() { b.g.Close() }
