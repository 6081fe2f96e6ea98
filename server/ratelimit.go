package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/worker-gateway/gateway/problem"
)

// rateLimiter bounds a rate per key with a token bucket per key
// (golang.org/x/time/rate): a key may spend burst tokens at once and rate
// per second on average; past that allow refuses and says when the next
// token is there. The gateway keys one by worker (every request of a
// worker: a misbehaving or compromised worker cannot flood a replica and
// its database; well-behaved workers, which batch their calls, stay far
// below the default) and one by source address (refused enrollments: token
// guessing costs the guesser, not the database). The rate package has no
// keyed limiter, so the map of buckets, and keeping it bounded, are ours.
type rateLimiter[K comparable] struct {
	rate  rate.Limit // tokens per second; 0 disables the limit
	burst int
	// maxKeys bounds the buckets held at once (0: unbounded, for keys that
	// are authenticated and so already bounded). Past it a new key
	// replaces the fullest of a few buckets: an attacker with many source
	// addresses cannot grow the map, and what it displaces is mostly what
	// a new bucket would be anyway.
	maxKeys int

	mu      sync.Mutex
	buckets map[K]*rate.Limiter
	swept   time.Time
}

func newRateLimiter[K comparable](perSecond float64, burst, maxKeys int) *rateLimiter[K] {
	return &rateLimiter[K]{rate: rate.Limit(perSecond), burst: max(burst, 1), maxKeys: maxKeys, buckets: map[K]*rate.Limiter{}}
}

// allow takes one token from key's bucket, or says how long until one is
// there. refund gives the token back, for a request that turned out not to
// count (a successful enrollment holds nobody back); it is never nil.
func (l *rateLimiter[K]) allow(key K, now time.Time) (ok bool, retryAfter time.Duration, refund func()) {
	if l.rate <= 0 {
		return true, 0, func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	bucket := l.bucketLocked(key, now)
	r := bucket.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now) // a refusal takes nothing
		return false, wait, func() {}
	}
	// Cancelled as of the moment it was taken, the reservation is undone
	// whenever the request ends: the rate package gives its token back
	// (never past the burst), whatever the key took meanwhile.
	return true, 0, func() { r.CancelAt(now) }
}

// bucketLocked returns key's bucket, creating a full one (in place of
// another when the map is at maxKeys).
func (l *rateLimiter[K]) bucketLocked(key K, now time.Time) *rate.Limiter {
	if b, ok := l.buckets[key]; ok {
		return b
	}
	if l.maxKeys > 0 && len(l.buckets) >= l.maxKeys {
		l.evictLocked(now)
	}
	b := rate.NewLimiter(l.rate, l.burst)
	l.buckets[key] = b
	return b
}

// evictSample is how many buckets evictLocked compares: enough to rarely
// drop a nearly empty one, few enough to keep a full map O(1) per new key.
const evictSample = 8

// evictLocked drops the fullest of a few buckets (map order is random).
func (l *rateLimiter[K]) evictLocked(now time.Time) {
	var victim K
	best, seen := -1.0, 0
	for k, b := range l.buckets {
		if tokens := b.TokensAt(now); tokens > best {
			victim, best = k, tokens
		}
		if seen++; seen == evictSample {
			break
		}
	}
	delete(l.buckets, victim)
}

// sweepLocked forgets, once a minute, the buckets that have refilled: a
// full bucket is what a new one would be.
func (l *rateLimiter[K]) sweepLocked(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
}

// retryAfterSeconds is a Retry-After header value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// rateLimited is the problem for a worker over its rate.
func rateLimited(retryAfter time.Duration) *Problem {
	p := newProblem(http.StatusTooManyRequests, problem.TooManyRequests, "this worker sends requests faster than the gateway allows; slow down")
	p.RetryAfter = retryAfterSeconds(retryAfter)
	return p
}

// enrollmentRateLimited is the problem for a source address that has had
// too many enrollments refused.
func enrollmentRateLimited(retryAfter time.Duration) *Problem {
	p := newProblem(http.StatusTooManyRequests, problem.TooManyRequests,
		"too many refused enrollments from this address; wait before trying again")
	p.RetryAfter = retryAfterSeconds(retryAfter)
	return p
}
