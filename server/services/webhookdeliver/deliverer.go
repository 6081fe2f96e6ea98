// Package webhookdeliver is the background service delivering webhooks
// (Deliverer), and the one decision of where webhooks may go (addr.go).
package webhookdeliver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// Name names the service: its logs, its spans.
const Name = "webhook-deliverer"

// sign is the webhook-signature header of Standard Webhooks: for
// each secret, "v1," and the base64 HMAC-SHA256 of "id.timestamp.body",
// space-separated.
func sign(id string, timestamp int64, body []byte, secrets [][]byte) string {
	sigs := make([]string, len(secrets))
	for i, key := range secrets {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// Deliverer delivers due webhook deliveries, retried with backoff
// (Config.Policy), each try signed by the Standard Webhooks scheme. It sleeps until the
// earliest retry time (a delay the database computed) or a WakeWebhooks
// notice — sent by the trigger on every new delivery — so an idle gateway
// sends the database nothing.
type Deliverer struct {
	services.Unit
	store *store.Store
	cfg   Config
	// keyring opens the signing secrets (nil: only rows not sealed yet
	// can be signed).
	keyring *secretbox.Keyring
	client  *http.Client
	logger  *slog.Logger
	wake    services.Signal
	// tries, delivered and failed count this replica's tries (tests,
	// metrics); a try cut short by shutdown is neither.
	tries, delivered, failed atomic.Int64
	lastPrune                time.Time
}

// pruneEvery bounds how often a deliverer prunes the log.
const pruneEvery = time.Hour

const (
	// retry is the pause after a failed query.
	retry = 2 * time.Second
	// busy is the pause while another replica's claim of a due
	// delivery has not committed.
	busy = 100 * time.Millisecond
)

// claimBatch bounds the deliveries one claim takes.
const claimBatch = 32

// New builds a replica's deliverer; keyring opens the targets' signing
// secrets.
func New(st *store.Store, cfg Config, keyring *secretbox.Keyring, u services.Unit) *Deliverer {
	return &Deliverer{Unit: u, store: st, cfg: cfg, keyring: keyring, client: newClient(cfg), logger: u.Logger(), wake: services.NewSignal()}
}

// errSecretUnavailable is a try not made because its signing secret does
// not open: the gateway lacks the key-encryption key that sealed it.
var errSecretUnavailable = errors.New("the signing secret could not be opened with this gateway's secrets key")

// signingKeys opens a delivery's signing secrets, the current one first.
func (d *Deliverer) signingKeys(c store.ClaimedDelivery) ([][]byte, error) {
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

// Subscriptions: a delivery was queued, or a target changed.
func (d *Deliverer) Subscriptions() []store.WakeupKind {
	return []store.WakeupKind{store.WakeWebhooks}
}

// Wake looks for due deliveries again.
func (d *Deliverer) Wake(store.Wakeup) { d.wake.Notify() }

// CatchUp looks for due deliveries again: a notice may have been missed.
func (d *Deliverer) CatchUp() { d.wake.Notify() }

// Run delivers until ctx ends.
func (d *Deliverer) Run(ctx context.Context) error {
	return services.RunPasses(ctx, d.wake, d.deliverDue)
}

// deliverDue delivers everything due and returns how long to sleep.
func (d *Deliverer) deliverDue(ctx context.Context) time.Duration {
	ctx, span := d.Iteration(ctx)
	defer span.End()
	d.prune(ctx)
	claimed := 0
	for ctx.Err() == nil {
		batch, err := d.store.ClaimWebhookDeliveries(ctx, min(claimBatch, max(d.cfg.Concurrency, 1)), d.cfg.claimFor())
		if err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("claiming webhook deliveries failed; retrying", "error", err.Error())
			}
			return services.Jittered(retry)
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
		return services.Jittered(retry)
	}
	switch {
	case !ok:
		return services.SleepUntilWoken
	case next <= 0 && claimed == 0:
		// Due but not claimed: another replica's claim has not committed.
		return services.Jittered(busy)
	}
	return next
}

// prune deletes ended deliveries past the retention, at most hourly.
func (d *Deliverer) prune(ctx context.Context) {
	if d.cfg.Retention <= 0 || time.Since(d.lastPrune) < pruneEvery {
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
func (d *Deliverer) deliver(ctx context.Context, c store.ClaimedDelivery) store.DeliveryOutcome {
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
func (d *Deliverer) post(ctx context.Context, c store.ClaimedDelivery) (int, error) {
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
	req.Header.Set("webhook-signature", sign(id, ts, c.Body, keys))
	resp, err := d.client.Do(req)
	if err != nil {
		if errors.Is(err, ErrUndeliverableHost) {
			return 0, ErrUndeliverableHost
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

// triesDesc is the deliverer's one metric, read from its own counts.
var triesDesc = prometheus.NewDesc("gateway_webhook_tries_total",
	"Webhook delivery tries this replica made, by outcome (delivered: a 2xx answer; failed: anything else).", []string{"outcome"}, nil)

// Collectors are its metrics.
func (d *Deliverer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{triesCollector{d}}
}

// triesCollector reads the deliverer's own counts.
type triesCollector struct{ d *Deliverer }

func (triesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- triesDesc }

func (c triesCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(triesDesc, prometheus.CounterValue, float64(c.d.delivered.Load()), "delivered")
	ch <- prometheus.MustNewConstMetric(triesDesc, prometheus.CounterValue, float64(c.d.failed.Load()), "failed")
}
