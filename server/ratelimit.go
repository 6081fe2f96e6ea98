package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
)

// workerRateLimiter bounds each worker's request rate with a token bucket:
// a worker may send burst requests at once and rate per second on average;
// past that its requests are refused with 429 and a Retry-After saying when
// the next one fits. It protects a replica (and its database) from one
// misbehaving or compromised worker; well-behaved workers, which batch their
// calls, stay far below the default.
type workerRateLimiter struct {
	rate  float64 // tokens per second; 0 disables the limit
	burst float64

	mu      sync.Mutex
	buckets map[uuid.UUID]*tokenBucket
	swept   time.Time
}

type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func newWorkerRateLimiter(rate float64, burst int) *workerRateLimiter {
	return &workerRateLimiter{rate: rate, burst: math.Max(float64(burst), 1), buckets: map[uuid.UUID]*tokenBucket{}}
}

// allow takes one token from worker's bucket, or says how long until one is
// there.
func (l *workerRateLimiter) allow(worker uuid.UUID, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	b, found := l.buckets[worker]
	if !found {
		b = &tokenBucket{tokens: l.burst, at: now}
		l.buckets[worker] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// sweepLocked forgets, once a minute, the buckets that have refilled: a
// full bucket is what a new one would be.
func (l *workerRateLimiter) sweepLocked(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for id, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, id)
		}
	}
}

// rateLimited is the problem for a worker over its rate.
func rateLimited(retryAfter time.Duration) *Problem {
	p := newProblem(http.StatusTooManyRequests, "too-many-requests", "this worker sends requests faster than the gateway allows; slow down")
	p.RetryAfter = max(1, int(math.Ceil(retryAfter.Seconds())))
	return p
}
