package webhookdeliver

import (
	"flag"
	"net/http"
	"time"

	"github.com/worker-gateway/gateway/store"
)

// Config is how a replica delivers webhooks.
type Config struct {
	// Deliver runs the deliverer and the watcher (webhookwatch) on this
	// replica. Every replica may: deliveries are claimed with SKIP LOCKED.
	Deliver bool
	// AllowPrivate lets targets resolve to loopback, link-local and private
	// addresses (a gateway flag; tests turn it on).
	AllowPrivate bool
	// Resolver resolves targets' host names, at creation and on every
	// dial; nil is the system's (net.DefaultResolver). Tests set their own.
	Resolver Resolver
	// Timeout bounds one try, from dialing to the end of the answer.
	Timeout time.Duration
	// Concurrency bounds a replica's tries in flight.
	Concurrency int
	// Policy is the retry schedule and the circuit breaker.
	Policy store.DeliveryPolicy
	// Retention is how long an ended delivery stays in the log; 0 keeps
	// it forever. The deliverer prunes at most hourly, when it wakes.
	Retention time.Duration
}

// DefaultConfig: about four hours of retries (10 s doubling to an
// hour, 12 tries), and a circuit that opens for a minute after 5 failures
// in a row.
func DefaultConfig() Config {
	return Config{
		Deliver:     true,
		Timeout:     10 * time.Second,
		Concurrency: 16,
		Policy: store.DeliveryPolicy{MaxAttempts: 12, RetryBase: 10 * time.Second, RetryMax: time.Hour,
			BreakerThreshold: 5, BreakerCooldown: time.Minute},
		Retention: 30 * 24 * time.Hour,
	}
}

// claimFor is how long a claimed delivery is this replica's: longer than a
// try can last, so only a replica that died lets it go early.
func (c Config) claimFor() time.Duration { return 2*c.Timeout + 5*time.Second }

// newClient is the HTTP client of deliveries: no proxy (it would dial for
// us), no redirects followed, every phase under the timeout.
func newClient(cfg Config) *http.Client {
	return &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           newDialer(cfg).DialContext,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// RegisterFlags registers the deliverer's flags, into cfg
// (-webhooks-deliver runs the webhook watcher too).
func RegisterFlags(fs *flag.FlagSet, cfg *Config) {
	fs.BoolVar(&cfg.Deliver, "webhooks-deliver", cfg.Deliver, "deliver webhooks from this replica (every replica may; deliveries are claimed with SKIP LOCKED); -webhooks-deliver=false leaves delivering to the others")
	fs.DurationVar(&cfg.Timeout, "webhooks-timeout", cfg.Timeout, "longest webhook delivery try, from dialing to the end of the answer")
	fs.DurationVar(&cfg.Retention, "webhooks-retention", cfg.Retention, "how long ended webhook deliveries stay in the delivery log (0: forever)")
	fs.IntVar(&cfg.Concurrency, "webhooks-concurrency", cfg.Concurrency, "webhook tries in flight per replica")
	fs.IntVar(&cfg.Policy.MaxAttempts, "webhooks-max-attempts", cfg.Policy.MaxAttempts, "tries of one webhook delivery before it is marked failed")
	fs.DurationVar(&cfg.Policy.RetryBase, "webhooks-retry-base", cfg.Policy.RetryBase, "first webhook retry delay; it doubles per try, with jitter, up to -webhooks-retry-max")
	fs.DurationVar(&cfg.Policy.RetryMax, "webhooks-retry-max", cfg.Policy.RetryMax, "longest webhook retry delay")
	fs.IntVar(&cfg.Policy.BreakerThreshold, "webhooks-breaker-threshold", cfg.Policy.BreakerThreshold, "failed tries in a row that open a webhook target's circuit")
	fs.DurationVar(&cfg.Policy.BreakerCooldown, "webhooks-breaker-cooldown", cfg.Policy.BreakerCooldown, "how long an open circuit holds a target's deliveries back before one try probes it")
}
