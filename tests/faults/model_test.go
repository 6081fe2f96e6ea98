package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// story builds a history of one task step by step; each step returns
// before the next is invoked unless it is concurrent.
type story struct {
	task     uuid.UUID
	attempts map[uuid.UUID]uuid.UUID
	calls    []Call
	clock    time.Duration
}

func newStory() *story {
	return &story{task: uuid.New(), attempts: map[uuid.UUID]uuid.UUID{}}
}

func (s *story) step(client int, op string, it Item) *story {
	s.attempts[it.Attempt] = s.task
	if it.Token == "" {
		it.Token = "token-" + it.Attempt.String()
	}
	s.calls = append(s.calls, Call{Client: client, Op: op, Invoke: s.clock, Return: s.clock + 1, Items: []Item{it}})
	s.clock += 2
	return s
}

func (s *story) linearizable() bool {
	return porcupine.CheckOperations(leaseModel.ToModel(), operations(s.calls, s.attempts))
}

func TestLeaseModel(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	key := func(at uuid.UUID, seq string) string { return at.String() + ":" + seq }
	lease := func(at uuid.UUID) Item { return Item{Attempt: at, Result: ResOK} }
	result := func(at uuid.UUID, seq string, r Result) Item { return Item{Attempt: at, Key: key(at, seq), Result: r} }
	complete := func(at uuid.UUID, r Result, state string) Item {
		return Item{Attempt: at, Outcome: "succeeded", Result: r, TaskState: state}
	}
	// replayed is attempt at as a poll's replay granted it, with a fresh
	// token, and with is an item of at sent with that token.
	replayed := func(at uuid.UUID) Item { return Item{Attempt: at, Token: "replayed-" + at.String(), Result: ResOK} }
	with := func(it, replay Item) Item { it.Token = replay.Token; return it }
	for _, tc := range []struct {
		name  string
		story *story
		ok    bool
	}{
		{"a lease renewed, written, completed and the completion repeated", newStory().
			step(0, OpLease, lease(a)).step(0, OpHeartbeat, lease(a)).step(0, OpResult, result(a, "1", ResOK)).
			step(0, OpResult, result(a, "1", ResReplayed)).step(0, OpComplete, complete(a, ResOK, "completed")).
			step(0, OpCompleteMany, complete(a, ResOK, "completed")), true},
		{"a renewal after another attempt was leased", newStory().
			step(0, OpLease, lease(a)).step(1, OpLease, lease(b)).step(0, OpHeartbeat, lease(a)), false},
		{"a batch ingested twice", newStory().
			step(0, OpLease, lease(a)).step(0, OpResult, result(a, "1", ResOK)).step(0, OpResult, result(a, "1", ResOK)), false},
		{"a write after lease-lost", newStory().
			step(0, OpLease, lease(a)).step(0, OpResult, result(a, "1", ResLeaseLost)).step(0, OpResult, result(a, "2", ResOK)), false},
		{"a batch of unknown outcome replayed after the lease moved on", newStory().
			step(0, OpLease, lease(a)).step(0, OpResult, result(a, "1", ResUnknown)).step(1, OpLease, lease(b)).
			step(0, OpResult, result(a, "1", ResReplayed)), true},
		{"a replay of a batch first sent after the lease moved on", newStory().
			step(0, OpLease, lease(a)).step(1, OpLease, lease(b)).step(0, OpResult, result(a, "1", ResUnknown)).
			step(0, OpResult, result(a, "1", ResReplayed)), false},
		{"an accepted batch refused as lease-lost", newStory().
			step(0, OpLease, lease(a)).step(0, OpResult, result(a, "1", ResOK)).step(0, OpResult, result(a, "1", ResLeaseLost)), false},
		{"a lease of a completed task", newStory().
			step(0, OpLease, lease(a)).step(0, OpComplete, complete(a, ResOK, "completed")).step(1, OpLease, lease(b)), false},
		{"a completion repeated as lease-lost", newStory().
			step(0, OpLease, lease(a)).step(0, OpComplete, complete(a, ResOK, "completed")).
			step(0, OpComplete, complete(a, ResLeaseLost, "")), false},
		{"a completion of unknown outcome, then lease-lost", newStory().
			step(0, OpLease, lease(a)).step(0, OpComplete, complete(a, ResUnknown, "")).
			step(0, OpComplete, complete(a, ResLeaseLost, "")).step(1, OpLease, lease(b)), true},
		// PostgreSQL down: the gateway answers 503, an unknown outcome
		// (as any 5xx), and the retry under the same key is a first write.
		{"a batch answered 503, then accepted by its retry", newStory().
			step(0, OpLease, lease(a)).step(0, OpResult, result(a, "1", ResUnknown)).
			step(0, OpResult, result(a, "1", ResOK)), true},
		{"a poll replay with a new token, then work under it", newStory().
			step(0, OpLease, lease(a)).step(0, OpLease, replayed(a)).step(0, OpHeartbeat, with(lease(a), replayed(a))).
			step(0, OpResult, with(result(a, "1", ResOK), replayed(a))).
			step(0, OpComplete, with(complete(a, ResOK, "completed"), replayed(a))), true},
		{"a poll replay with the same token", newStory().
			step(0, OpLease, lease(a)).step(0, OpLease, lease(a)), false},
		{"the token a replay replaced still accepted", newStory().
			step(0, OpLease, lease(a)).step(0, OpLease, replayed(a)).step(0, OpHeartbeat, lease(a)), false},
		{"the token a replay replaced refused", newStory().
			step(0, OpLease, lease(a)).step(0, OpLease, replayed(a)).step(0, OpResult, result(a, "1", ResLeaseLost)).
			step(0, OpResult, with(result(a, "1", ResOK), replayed(a))), true},
		{"a completion of unknown outcome, then its replay", newStory().
			step(0, OpLease, lease(a)).step(0, OpComplete, complete(a, ResUnknown, "")).
			step(0, OpComplete, complete(a, ResOK, "completed")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ok, tc.story.linearizable())
		})
	}
}

// TestClockCheckCatchesALocalClock: an expiry computed from a replica's
// skewed clock is caught.
func TestClockCheckCatchesALocalClock(t *testing.T) {
	now := time.Now()
	a := attemptRow{ID: uuid.New(), Task: uuid.New(), StartedAt: now.Add(-time.Second), LeaseSeconds: leaseSeconds}
	renewal := func(skew time.Duration) Call {
		return Call{Op: OpHeartbeat, InvokeWall: now, ReturnWall: now.Add(10 * time.Millisecond), Items: []Item{{
			Attempt: a.ID, Result: ResOK, ExpiresAt: now.Add(skew + leaseSeconds*time.Second), TTL: leaseSeconds}}}
	}
	c := &checker{t: t, shown: map[string]int{}, attempts: map[uuid.UUID]attemptRow{a.ID: a},
		calls: []Call{renewal(0), renewal(20 * time.Minute), renewal(-20 * time.Minute)}}
	c.checkClock()
	require.Equal(t, 2, c.v.ClockInconsistent, c.findings)
}
