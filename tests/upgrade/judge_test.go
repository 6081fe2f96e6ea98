package upgrade

import (
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/tests/faults"
)

// crossing is a direction a live lease crossed the upgrade in.
type crossing struct{ from, to string }

// crossings counts, by direction, the attempts whose lease one release
// granted and whose renewal and completion the other release accepted, as
// the history's answers say.
func crossings(calls []faults.Call, releaseOf func(host string) string) map[crossing]int {
	granted := map[uuid.UUID]string{}
	renewed, completed := map[uuid.UUID]map[string]bool{}, map[uuid.UUID]map[string]bool{}
	mark := func(m map[uuid.UUID]map[string]bool, a uuid.UUID, release string) {
		if m[a] == nil {
			m[a] = map[string]bool{}
		}
		m[a][release] = true
	}
	for _, c := range calls {
		release := releaseOf(c.Replica)
		for _, it := range c.Items {
			if it.Result != faults.ResOK {
				continue
			}
			switch c.Op {
			case faults.OpLease:
				granted[it.Attempt] = release
			case faults.OpHeartbeat, faults.OpHeartbeatAll:
				mark(renewed, it.Attempt, release)
			case faults.OpComplete, faults.OpCompleteMany:
				mark(completed, it.Attempt, release)
			}
		}
	}
	out := map[crossing]int{}
	for a, from := range granted {
		for _, to := range []string{previous, current} {
			if to != from && renewed[a][to] && completed[a][to] {
				out[crossing{from, to}]++
			}
		}
	}
	return out
}

// leaseWait is how long a worker waited for a lease: from the first try
// of a poll — the tries under one Idempotency-Key are one poll, across
// replicas that stopped — to the answer that granted it leases.
type leaseWait struct {
	client int
	wait   time.Duration
}

// longestLeaseWait is the longest leaseWait of the history; polls that
// ended without a lease (nothing to lease) do not count.
func longestLeaseWait(calls []faults.Call) leaseWait {
	type poll struct {
		client int
		key    string
	}
	first := map[poll]time.Duration{}
	var longest leaseWait
	for i, c := range calls {
		if c.Op != faults.OpLease {
			continue
		}
		p := poll{c.Client, c.Key}
		if c.Key == "" {
			p.key = "call-" + strconv.Itoa(i) // no key: each call is its own poll
		}
		if at, ok := first[p]; !ok || c.Invoke < at {
			first[p] = c.Invoke
		}
	}
	for i, c := range calls {
		if c.Op != faults.OpLease || c.Status != http.StatusOK || len(c.Items) == 0 {
			continue
		}
		p := poll{c.Client, c.Key}
		if c.Key == "" {
			p.key = "call-" + strconv.Itoa(i)
		}
		if w := c.Return - first[p]; w > longest.wait {
			longest = leaseWait{client: c.Client, wait: w}
		}
	}
	return longest
}
