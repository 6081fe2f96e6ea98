//go:build failpoints

// Package failpoint in test builds: crash points armed by
// GATEWAY_FAILPOINTS and a skewable clock (failpoint.go is the release
// build).
package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Enabled reports whether this build contains failpoints.
const Enabled = true

// Inject kills the process at once — exit status 137, no deferred cleanup,
// as kill -9 would — when GATEWAY_FAILPOINTS names this place:
// "name" always, "name@p" with probability p (0 < p ≤ 1) each time it is
// reached. Names are comma-separated.
func Inject(name string) {
	p, ok := armed()[name]
	if ok && (p >= 1 || rand.Float64() < p) {
		os.Exit(137)
	}
}

var armed = sync.OnceValue(func() map[string]float64 {
	out := map[string]float64{}
	for _, fp := range strings.Split(os.Getenv("GATEWAY_FAILPOINTS"), ",") {
		name, prob, found := strings.Cut(strings.TrimSpace(fp), "@")
		if name == "" {
			continue
		}
		p := 1.0
		if found {
			if v, err := strconv.ParseFloat(prob, 64); err == nil && v > 0 && v <= 1 {
				p = v
			}
		}
		out[name] = p
	}
	return out
})

// Now is the gateway's wall clock shifted by GATEWAY_CLOCK_SKEW ("+2h",
// "-90m"; any time.ParseDuration value), so a fault test can run a replica
// whose clock is wrong. The shift keeps the monotonic reading, so durations
// measured between two calls are unaffected, as on a real skewed host.
func Now() time.Time { return time.Now().Add(skew()) }

var skew = sync.OnceValue(func() time.Duration {
	v := strings.TrimSpace(os.Getenv("GATEWAY_CLOCK_SKEW"))
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		// A typo must not silently run the test without skew.
		panic(fmt.Sprintf("failpoint: GATEWAY_CLOCK_SKEW=%q: %v", v, err))
	}
	return d
})
