package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/worker-gateway/gateway/problem"
)

// rateLimiter bounds a rate per key with a token bucket: a key may spend
// burst tokens at once and rate per second on average; past that allow
// refuses and says when the next token is there. The gateway keys one by
// worker (every request of a worker: a misbehaving or compromised worker
// cannot flood a replica and its database; well-behaved workers, which
// batch their calls, stay far below the default) and one by source address
// (refused enrollments: token guessing costs the guesser, not the database).
type rateLimiter[K comparable] struct {
	rate  float64 // tokens per second; 0 disables the limit
	burst float64
	// maxKeys bounds the buckets held at once (0: unbounded, for keys that
	// are authenticated and so already bounded). Past it a new key
	// replaces the fullest of a few buckets: an attacker with many source
	// addresses cannot grow the map, and what it displaces is mostly what
	// a new bucket would be anyway.
	maxKeys int

	mu      sync.Mutex
	buckets map[K]*tokenBucket
	swept   time.Time
}

type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func newRateLimiter[K comparable](rate float64, burst, maxKeys int) *rateLimiter[K] {
	return &rateLimiter[K]{rate: rate, burst: math.Max(float64(burst), 1), maxKeys: maxKeys, buckets: map[K]*tokenBucket{}}
}

// allow takes one token from key's bucket, or says how long until one is
// there.
func (l *rateLimiter[K]) allow(key K, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	b := l.bucketLocked(key, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// refund gives back a token allow took, for a request that turned out not
// to count (a successful enrollment holds nobody back).
func (l *rateLimiter[K]) refund(key K, now time.Time) {
	if l.rate <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.buckets[key]; ok {
		l.refill(b, now)
		b.tokens = math.Min(l.burst, b.tokens+1)
	}
}

// bucketLocked returns key's bucket brought up to now, creating a full one
// (in place of another when the map is at maxKeys).
func (l *rateLimiter[K]) bucketLocked(key K, now time.Time) *tokenBucket {
	if b, ok := l.buckets[key]; ok {
		l.refill(b, now)
		return b
	}
	if l.maxKeys > 0 && len(l.buckets) >= l.maxKeys {
		l.evictLocked(now)
	}
	b := &tokenBucket{tokens: l.burst, at: now}
	l.buckets[key] = b
	return b
}

func (l *rateLimiter[K]) refill(b *tokenBucket, now time.Time) {
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
}

// evictSample is how many buckets evictLocked compares: enough to rarely
// drop a nearly empty one, few enough to keep a full map O(1) per new key.
const evictSample = 8

// evictLocked drops the fullest of a few buckets (map order is random).
func (l *rateLimiter[K]) evictLocked(now time.Time) {
	var victim K
	best, seen := -1.0, 0
	for k, b := range l.buckets {
		if tokens := b.tokens + now.Sub(b.at).Seconds()*l.rate; tokens > best {
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
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
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
