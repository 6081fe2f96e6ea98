package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// WebhookConfig is how a replica delivers webhooks.
type WebhookConfig struct {
	// Deliver runs the deliverer and the watcher on this replica. Every
	// replica may: deliveries are claimed with SKIP LOCKED.
	Deliver bool
	// AllowPrivate lets targets resolve to loopback, link-local and private
	// addresses (a gateway flag; tests turn it on).
	AllowPrivate bool
	// Resolver resolves targets' host names, at creation and on every
	// dial; nil is the system's (net.DefaultResolver). Tests set their own.
	Resolver WebhookResolver
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

// DefaultWebhookConfig: about four hours of retries (10 s doubling to an
// hour, 12 tries), and a circuit that opens for a minute after 5 failures
// in a row.
func DefaultWebhookConfig() WebhookConfig {
	return WebhookConfig{
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
func (c WebhookConfig) claimFor() time.Duration { return 2*c.Timeout + 5*time.Second }

// newWebhookClient is the HTTP client of deliveries: no proxy (it would
// dial for us), no redirects followed, every phase under the timeout.
func newWebhookClient(cfg WebhookConfig) *http.Client {
	return &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           newWebhookDialer(cfg).DialContext,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// signWebhook is the webhook-signature header of Standard Webhooks: for
// each secret, "v1," and the base64 HMAC-SHA256 of "id.timestamp.body",
// space-separated.
func signWebhook(id string, timestamp int64, body []byte, secrets [][]byte) string {
	sigs := make([]string, len(secrets))
	for i, key := range secrets {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// webhookDeliverer delivers due webhook deliveries. It sleeps until the
// earliest retry time (a delay the database computed) or a WakeWebhooks
// notice — sent by the trigger on every new delivery — so an idle gateway
// sends the database nothing.
type webhookDeliverer struct {
	services.Unit
	store *store.Store
	cfg   WebhookConfig
	// keyring opens the signing secrets (nil: only rows not sealed yet
	// can be signed).
	keyring *secretbox.Keyring
	client  *http.Client
	logger  *slog.Logger
	kick    chan struct{}
	// tries, delivered and failed count this replica's tries (tests,
	// metrics); a try cut short by shutdown is neither.
	tries, delivered, failed atomic.Int64
	lastPrune                time.Time
}

// webhookPruneEvery bounds how often a deliverer prunes the log.
const webhookPruneEvery = time.Hour

const (
	// webhookRetry is the pause after a failed query.
	webhookRetry = 2 * time.Second
	// webhookBusy is the pause while another replica's claim of a due
	// delivery has not committed.
	webhookBusy = 100 * time.Millisecond
)

// webhookClaimBatch bounds the deliveries one claim takes.
const webhookClaimBatch = 32

func newWebhookDeliverer(st *store.Store, cfg WebhookConfig, keyring *secretbox.Keyring, u services.Unit) *webhookDeliverer {
	return &webhookDeliverer{Unit: u, store: st, cfg: cfg, keyring: keyring, client: newWebhookClient(cfg), logger: u.Logger(), kick: make(chan struct{}, 1)}
}

// errSecretUnavailable is a try not made because its signing secret does
// not open: the gateway lacks the key-encryption key that sealed it.
var errSecretUnavailable = errors.New("the signing secret could not be opened with this gateway's secrets key")

// signingKeys opens a delivery's signing secrets, the current one first.
func (d *webhookDeliverer) signingKeys(c store.ClaimedDelivery) ([][]byte, error) {
	keys := make([][]byte, 0, len(c.Secrets))
	for _, s := range c.Secrets {
		k, err := store.OpenWebhookSecret(d.keyring, s)
		if err != nil {
			return nil, errSecretUnavailable
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errSecretUnavailable
	}
	return keys, nil
}

func (d *webhookDeliverer) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Subscriptions: a delivery was queued, or a target changed.
func (d *webhookDeliverer) Subscriptions() []store.WakeupKind {
	return []store.WakeupKind{store.WakeWebhooks}
}

// Wake looks for due deliveries again.
func (d *webhookDeliverer) Wake(store.Wakeup) { d.wake() }

// CatchUp looks for due deliveries again: a notice may have been missed.
func (d *webhookDeliverer) CatchUp() { d.wake() }

// Run delivers until ctx ends.
func (d *webhookDeliverer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		sleep := d.deliverDue(ctx)
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-d.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
	return nil
}

// deliverDue delivers everything due and returns how long to sleep.
func (d *webhookDeliverer) deliverDue(ctx context.Context) time.Duration {
	ctx, span := d.Iteration(ctx)
	defer span.End()
	d.prune(ctx)
	claimed := 0
	for ctx.Err() == nil {
		batch, err := d.store.ClaimWebhookDeliveries(ctx, min(webhookClaimBatch, max(d.cfg.Concurrency, 1)), d.cfg.claimFor())
		if err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("claiming webhook deliveries failed; retrying", "error", err.Error())
			}
			return services.Jittered(webhookRetry)
		}
		claimed += len(batch)
		outcomes := make([]store.DeliveryOutcome, len(batch))
		var wg sync.WaitGroup
		for i, c := range batch {
			wg.Go(func() { outcomes[i] = d.deliver(ctx, c) })
		}
		wg.Wait()
		if len(batch) == 0 {
			break
		}
		if ctx.Err() != nil {
			break // shutting down: the claims run out and other tries follow
		}
		// One statement for the batch: a record per try, each its own
		// transaction, queued behind one another on a busy target's row.
		if err := d.store.RecordWebhookDeliveries(ctx, outcomes, d.cfg.Policy); err != nil {
			d.logger.Warn("recording webhook deliveries failed", "deliveries", len(outcomes), "error", err.Error())
		}
	}
	next, ok, err := d.store.NextWebhookDeliveryIn(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.logger.Warn("reading the next webhook delivery failed; retrying", "error", err.Error())
		}
		return services.Jittered(webhookRetry)
	}
	switch {
	case !ok:
		return services.SleepUntilWoken
	case next <= 0 && claimed == 0:
		// Due but not claimed: another replica's claim has not committed.
		return services.Jittered(webhookBusy)
	}
	return next
}

// prune deletes ended deliveries past the retention, at most hourly.
func (d *webhookDeliverer) prune(ctx context.Context) {
	if d.cfg.Retention <= 0 || time.Since(d.lastPrune) < webhookPruneEvery {
		return
	}
	d.lastPrune = time.Now()
	for ctx.Err() == nil {
		n, err := d.store.PruneWebhookEvents(ctx, d.cfg.Retention, store.DefaultPruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("pruning webhook events failed", "error", err.Error())
			}
			return
		}
		if n < store.DefaultPruneBatch {
			return
		}
	}
}

// deliver makes one try; deliverDue records it with the batch. A replica
// that dies before the record leaves the claim to run out: the delivery is
// tried again, with the same id and body (at least once).
func (d *webhookDeliverer) deliver(ctx context.Context, c store.ClaimedDelivery) store.DeliveryOutcome {
	d.tries.Add(1)
	out := store.DeliveryOutcome{DeliveryID: c.ID, Attempt: c.Attempt}
	start := time.Now()
	status, err := d.post(ctx, c)
	out.Latency = time.Since(start)
	if status != 0 {
		out.StatusCode = &status
	}
	switch {
	case err != nil:
		out.Error = err.Error()
	case status < 200 || status > 299:
		out.Error = "HTTP " + strconv.Itoa(status)
	default:
		out.Delivered = true
		d.delivered.Add(1)
	}
	if !out.Delivered && ctx.Err() == nil {
		d.failed.Add(1)
		d.logger.Info("webhook delivery failed", "delivery_id", c.ID.String(), "webhook_id", c.TargetID.String(),
			"attempt", c.Attempt, "error", out.Error)
	}
	return out
}

// post sends the event and answers the status code.
func (d *webhookDeliverer) post(ctx context.Context, c store.ClaimedDelivery) (int, error) {
	keys, err := d.signingKeys(c)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return 0, fmt.Errorf("bad target URL: %w", err)
	}
	id := c.EventID.String()
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "worker-gateway-webhooks/1")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", signWebhook(id, ts, c.Body, keys))
	resp, err := d.client.Do(req)
	if err != nil {
		if errors.Is(err, errUndeliverableHost) {
			return 0, errUndeliverableHost
		}
		return 0, errors.New(deliveryErrorText(err))
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// deliveryErrorText is what the delivery log says of a failed request:
// the cause without the URL (which may carry a receiver's token).
func deliveryErrorText(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			err = inner
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timed out"
	}
	return err.Error()
}

// webhookDelivererFlags registers the webhook deliverer's flags (-webhooks-deliver runs the webhook watcher too).
func webhookDelivererFlags(fs *flag.FlagSet, cfg *Config) {
	fs.BoolVar(&cfg.Webhooks.Deliver, "webhooks-deliver", cfg.Webhooks.Deliver, "deliver webhooks from this replica (every replica may; deliveries are claimed with SKIP LOCKED); -webhooks-deliver=false leaves delivering to the others")
	fs.DurationVar(&cfg.Webhooks.Timeout, "webhooks-timeout", cfg.Webhooks.Timeout, "longest webhook delivery try, from dialing to the end of the answer")
	fs.DurationVar(&cfg.Webhooks.Retention, "webhooks-retention", cfg.Webhooks.Retention, "how long ended webhook deliveries stay in the delivery log (0: forever)")
	fs.IntVar(&cfg.Webhooks.Concurrency, "webhooks-concurrency", cfg.Webhooks.Concurrency, "webhook tries in flight per replica")
	fs.IntVar(&cfg.Webhooks.Policy.MaxAttempts, "webhooks-max-attempts", cfg.Webhooks.Policy.MaxAttempts, "tries of one webhook delivery before it is marked failed")
	fs.DurationVar(&cfg.Webhooks.Policy.RetryBase, "webhooks-retry-base", cfg.Webhooks.Policy.RetryBase, "first webhook retry delay; it doubles per try, with jitter, up to -webhooks-retry-max")
	fs.DurationVar(&cfg.Webhooks.Policy.RetryMax, "webhooks-retry-max", cfg.Webhooks.Policy.RetryMax, "longest webhook retry delay")
	fs.IntVar(&cfg.Webhooks.Policy.BreakerThreshold, "webhooks-breaker-threshold", cfg.Webhooks.Policy.BreakerThreshold, "failed tries in a row that open a webhook target's circuit")
	fs.DurationVar(&cfg.Webhooks.Policy.BreakerCooldown, "webhooks-breaker-cooldown", cfg.Webhooks.Policy.BreakerCooldown, "how long an open circuit holds a target's deliveries back before one try probes it")
}
