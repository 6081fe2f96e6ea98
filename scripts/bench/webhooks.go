package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/store"
)

// webhookReceiver is the endpoint of -webhooks: every organization of the
// throughput run gets a target subscribed to task.completed that posts
// here, so the run measures completions that each write an outbox event
// and a delivery, and the deliverer sending them. It checks the guarantee
// as it receives: every retry of an event carries the same bytes.
type webhookReceiver struct {
	srv *http.Server
	url string

	mu         sync.Mutex
	bodies     map[string][]byte // event id → its body
	deliveries int               // every request, retries included
	mismatched int               // retries whose body differed from the first
	last       time.Time         // when the latest new event arrived
	changed    chan struct{}     // closed and replaced on every new event
}

func startWebhookReceiver() (*webhookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &webhookReceiver{url: "http://" + ln.Addr().String() + "/hook", bodies: map[string][]byte{},
		changed: make(chan struct{})}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.receive), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *webhookReceiver) receive(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	id := req.Header.Get("webhook-id")
	if err != nil || id == "" {
		http.Error(w, "bad delivery", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.deliveries++
	if first, ok := r.bodies[id]; ok {
		if !bytes.Equal(first, body) {
			r.mismatched++
		}
	} else {
		r.bodies[id] = body
		r.last = time.Now()
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// benchSecretsKey is the key-encryption key of the bench's webhook
// secrets: $GATEWAY_SECRETS_KEY (a gateway the bench did not start must
// hold it), else a key made for this run and given to the gateways the
// bench starts.
var benchSecretsKey = sync.OnceValues(func() (secretbox.KEK, error) {
	if v := os.Getenv("GATEWAY_SECRETS_KEY"); v != "" {
		return secretbox.ParseKEK(v)
	}
	return secretbox.GenerateKEK()
})

// subscribe creates each organization's target.
func (r *webhookReceiver) subscribe(ctx context.Context, s *Stack, orgs []uuid.UUID) error {
	st := store.New(s.Pool)
	kek, err := benchSecretsKey()
	if err != nil {
		return err
	}
	keyring := secretbox.NewKeyring(kek)
	for _, org := range orgs {
		if _, _, err := st.CreateWebhookTarget(ctx, store.EveryOrganization(), keyring, org, store.WebhookTargetParams{
			URL: r.url, Description: "bench receiver", EventTypes: []string{"task.completed"}, Enabled: true}); err != nil {
			return fmt.Errorf("create webhook target: %w", err)
		}
	}
	return nil
}

// waitFor waits until n distinct events arrived or ctx ends, and returns
// when the last of them arrived.
func (r *webhookReceiver) waitFor(ctx context.Context, n int) (time.Time, bool) {
	for {
		r.mu.Lock()
		got, last, changed := len(r.bodies), r.last, r.changed
		r.mu.Unlock()
		if got >= n {
			return last, true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return last, false
		}
	}
}

func (r *webhookReceiver) counts() (events, deliveries, mismatched int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies), r.deliveries, r.mismatched
}

func (r *webhookReceiver) close() { _ = r.srv.Close() }
