package services

import (
	"math"
	"math/rand/v2"
	"time"
)

// SleepUntilWoken is a service's sleep when nothing is due: only a
// wake-up (or the listener reconnecting) ends it.
const SleepUntilWoken = time.Duration(math.MaxInt64)

// Jittered spreads the retries of several replicas apart: d, give or take
// a half.
func Jittered(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}
