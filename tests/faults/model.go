package faults

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
)

// The model is the lease state machine of one task as a worker can observe
// it. Expiry, sweeps and the leases the history did not see are not
// operations: they may happen at any time, so the model only forbids what no
// interleaving of them explains.
//
//   - A lease granting attempt A is allowed unless the task is terminal or A
//     already ended. A becomes the active attempt; the previous active one
//     has ended (it expired). Granting the active A again is a poll replay:
//     it must come with a new token (only token hashes are stored, so a
//     replay issues a fresh one), which replaces the old; from then on the
//     old token is refused.
//   - A renewal, start or new result batch of A answered ok needs A to be the
//     active attempt with its token. A new batch adds its key to the task's
//     accepted keys; a key accepted before must be answered as a replay.
//   - A result answered as a replay needs its key accepted before.
//   - A completion of A answered ok ends A with its outcome when A is active,
//     or is the replay of a completion that ended A with that outcome.
//   - lease-lost is always allowed (expiry is nondeterministic) and ends A;
//     but never for a result key accepted before (that is a replay) nor for
//     a completion of an attempt a completion ended (that is a replay or
//     attempt-finished).
//   - Other refusals change nothing.
//   - An operation of unknown outcome may or may not have happened: both
//     branches are next states (a nondeterministic model), and its return is
//     the end of the history.

// modelInput is one attempt's share of a call.
type modelInput struct {
	Task      uuid.UUID
	Op        string
	Attempt   uuid.UUID
	Token     string
	Key       string
	Outcome   string
	Retryable bool
}

// modelOutput is what the gateway answered about it.
type modelOutput struct {
	Result    Result
	TaskState string
}

// taskState is the model's state of one task. Values are never mutated:
// each step copies what it changes.
type taskState struct {
	Active   uuid.UUID // uuid.Nil: none
	Token    string
	Terminal bool
	// Ended maps an ended attempt to how it ended: its completion outcome,
	// or "lost".
	Ended map[uuid.UUID]string
	// Accepted is the set of result batch keys accepted.
	Accepted map[string]bool
}

const endedLost = "lost"

func (s taskState) isActive(in modelInput) bool {
	return s.Active == in.Attempt && s.Token == in.Token
}

// end ends the active attempt, if any, the way how says.
func (s taskState) end(how string) taskState {
	if s.Active == uuid.Nil {
		return s
	}
	s.Ended = maps.Clone(s.Ended)
	if s.Ended == nil {
		s.Ended = map[uuid.UUID]string{}
	}
	s.Ended[s.Active] = how
	s.Active, s.Token = uuid.Nil, ""
	return s
}

func (s taskState) accept(key string) taskState {
	s.Accepted = maps.Clone(s.Accepted)
	if s.Accepted == nil {
		s.Accepted = map[string]bool{}
	}
	s.Accepted[key] = true
	return s
}

// endedByCompletion reports whether a completion ended the attempt.
func (s taskState) endedByCompletion(a uuid.UUID) bool {
	how, ok := s.Ended[a]
	return ok && how != endedLost
}

// step returns the states the task may be in after the operation; none when
// the answer is impossible.
func step(s taskState, in modelInput, out modelOutput) []taskState {
	if out.Result == ResUnknown {
		return append([]taskState{s}, applied(s, in)...)
	}
	switch out.Result {
	case ResRefused:
		return []taskState{s}
	case ResLeaseLost:
		if (in.Op == OpResult && s.Accepted[in.Key]) || (isCompletion(in.Op) && s.endedByCompletion(in.Attempt)) {
			return nil
		}
		if s.isActive(in) {
			return []taskState{s.end(endedLost)}
		}
		return []taskState{s}
	}
	switch in.Op {
	case OpLease:
		_, ended := s.Ended[in.Attempt]
		switch {
		case s.Terminal || ended:
			return nil
		case s.Active == in.Attempt:
			if s.Token == in.Token {
				return nil // a replay that did not replace the token
			}
			next := s
			next.Token = in.Token // a poll replay: the old token is dead
			return []taskState{next}
		}
		next := s.end(endedLost)
		next.Active, next.Token = in.Attempt, in.Token
		return []taskState{next}
	case OpHeartbeat, OpHeartbeatAll, OpStart:
		if !s.isActive(in) {
			return nil
		}
		return []taskState{s}
	case OpResult:
		if out.Result == ResReplayed {
			if !s.Accepted[in.Key] {
				return nil
			}
			return []taskState{s}
		}
		if !s.isActive(in) || s.Accepted[in.Key] {
			return nil
		}
		return []taskState{s.accept(in.Key)}
	case OpComplete, OpCompleteMany:
		if s.isActive(in) {
			next := s.end(in.Outcome)
			next.Terminal = isTerminal(out.TaskState)
			return []taskState{next}
		}
		if s.Ended[in.Attempt] == in.Outcome {
			return []taskState{s}
		}
		return nil
	}
	return []taskState{s}
}

// applied is the states an operation of unknown outcome leaves when it did
// take effect.
func applied(s taskState, in modelInput) []taskState {
	if !s.isActive(in) {
		return nil
	}
	switch in.Op {
	case OpResult:
		if s.Accepted[in.Key] {
			return nil
		}
		return []taskState{s.accept(in.Key)}
	case OpComplete, OpCompleteMany:
		next := s.end(in.Outcome)
		switch {
		case in.Outcome == "succeeded" || (in.Outcome == "failed" && !in.Retryable):
			next.Terminal = true
			return []taskState{next}
		case in.Outcome == "failed":
			// Retried, unless that was the last attempt.
			final := next
			final.Terminal = true
			return []taskState{next, final}
		}
		return []taskState{next}
	}
	return nil
}

func isCompletion(op string) bool { return op == OpComplete || op == OpCompleteMany }

func isTerminal(taskState string) bool {
	return taskState == "completed" || taskState == "failed_terminal" || taskState == "cancelled"
}

func equalStates(a, b taskState) bool {
	return a.Active == b.Active && a.Token == b.Token && a.Terminal == b.Terminal &&
		maps.Equal(a.Ended, b.Ended) && maps.Equal(a.Accepted, b.Accepted)
}

func short(id uuid.UUID) string { return id.String()[:8] }

// leaseModel is the porcupine model, partitioned by task.
var leaseModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byTask := map[uuid.UUID][]porcupine.Operation{}
		var order []uuid.UUID
		for _, op := range history {
			task := op.Input.(modelInput).Task
			if _, ok := byTask[task]; !ok {
				order = append(order, task)
			}
			byTask[task] = append(byTask[task], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, task := range order {
			out = append(out, byTask[task])
		}
		return out
	},
	Init: func() []any { return []any{taskState{}} },
	Step: func(state, input, output any) []any {
		var out []any
		for _, s := range step(state.(taskState), input.(modelInput), output.(modelOutput)) {
			out = append(out, s)
		}
		return out
	},
	Equal: func(a, b any) bool { return equalStates(a.(taskState), b.(taskState)) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(modelInput), output.(modelOutput)
		d := fmt.Sprintf("%s %s", in.Op, short(in.Attempt))
		switch {
		case in.Key != "":
			d += " key=" + in.Key[strings.LastIndex(in.Key, ":")+1:]
		case in.Outcome != "":
			d += " " + in.Outcome
		}
		d += " → " + out.Result.String()
		if out.TaskState != "" {
			d += " (" + out.TaskState + ")"
		}
		return d
	},
	DescribeState: func(state any) string {
		s := state.(taskState)
		active := "none"
		if s.Active != uuid.Nil {
			active = short(s.Active)
		}
		var ended []string
		for a, how := range s.Ended {
			ended = append(ended, short(a)+":"+how)
		}
		sort.Strings(ended)
		keys := slices.Sorted(maps.Keys(s.Accepted))
		return fmt.Sprintf("active=%s terminal=%t ended=[%s] accepted=%d", active, s.Terminal, strings.Join(ended, " "), len(keys))
	},
}

// operations turns the history into porcupine operations, one per item,
// with each attempt's task from attemptTask. A poll repeated under the same
// Idempotency-Key is one logical call: its leases may have been granted by
// the first try, so their operations start when it did. Unknown outcomes
// return at the end of the history; polls of unknown outcome, whose leases
// nobody saw, are left out (like any lease the history did not see).
func operations(calls []Call, attemptTask map[uuid.UUID]uuid.UUID) []porcupine.Operation {
	type pollKey struct {
		client int
		key    string
	}
	firstPoll := map[pollKey]int64{}
	var end int64
	for _, c := range calls {
		end = max(end, int64(c.Return)+1)
		if c.Op == OpLease && c.Key != "" {
			k := pollKey{c.Client, c.Key}
			if t, ok := firstPoll[k]; !ok || int64(c.Invoke) < t {
				firstPoll[k] = int64(c.Invoke)
			}
		}
	}
	var ops []porcupine.Operation
	for _, c := range calls {
		for _, it := range c.Items {
			task, ok := attemptTask[it.Attempt]
			if !ok {
				continue // an attempt the database never had: a made-up id, refused
			}
			call, ret := int64(c.Invoke), int64(c.Return)
			if c.Op == OpLease && c.Key != "" {
				call = firstPoll[pollKey{c.Client, c.Key}]
			}
			if it.Result == ResUnknown {
				ret = end
			}
			ops = append(ops, porcupine.Operation{
				ClientId: c.Client, Call: call, Return: ret,
				Input: modelInput{Task: task, Op: c.Op, Attempt: it.Attempt, Token: it.Token,
					Key: it.Key, Outcome: it.Outcome, Retryable: it.Retryable},
				Output: modelOutput{Result: it.Result, TaskState: it.TaskState},
			})
		}
	}
	return ops
}
