package store

import (
	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/store/internal/webhooks"
)

// Webhooks are the webhook domain's (store/internal/webhooks): targets,
// their sealed signing secrets, the watcher and the outbox's delivery. The
// Store embeds its Hub, so its verbs (CreateWebhookTarget,
// RotateWebhookSecret, ListWebhookDeliveries, WatchWebhookConditions,
// ClaimWebhookDeliveries, RecordWebhookDeliveries, SealWebhookSecrets,
// RewrapWebhookSecrets…) are the Store's, and its types are named here.
type (
	WebhookTarget       = webhooks.WebhookTarget
	WebhookTargetParams = webhooks.WebhookTargetParams
	WebhookDelivery     = webhooks.WebhookDelivery
	WebhookWatch        = webhooks.WebhookWatch
	WebhookSecret       = webhooks.WebhookSecret
	ClaimedDelivery     = webhooks.ClaimedDelivery
	DeliveryPolicy      = webhooks.DeliveryPolicy
	DeliveryOutcome     = webhooks.DeliveryOutcome
)

// The event types a webhook target may subscribe to.
const (
	EventTaskCompleted       = webhooks.EventTaskCompleted
	EventTaskFailedTerminal  = webhooks.EventTaskFailedTerminal
	EventScanCompleted       = webhooks.EventScanCompleted
	EventScanFailed          = webhooks.EventScanFailed
	EventWorkerOffline       = webhooks.EventWorkerOffline
	EventWorkerRevoked       = webhooks.EventWorkerRevoked
	EventOrgNoEligibleWorker = webhooks.EventOrgNoEligibleWorker
	EventScheduleFireSkipped = webhooks.EventScheduleFireSkipped
)

// WebhookEventTypes lists every event type, in the contract's order.
var WebhookEventTypes = webhooks.WebhookEventTypes

// Delivery states.
const (
	DeliveryPending   = webhooks.DeliveryPending
	DeliveryDelivered = webhooks.DeliveryDelivered
	DeliveryFailed    = webhooks.DeliveryFailed
)

// OpenWebhookSecret opens a target's sealed signing secret (the delivery's
// one reader).
func OpenWebhookSecret(keyring *secretbox.Keyring, s WebhookSecret) ([]byte, error) {
	return webhooks.OpenWebhookSecret(keyring, s)
}
