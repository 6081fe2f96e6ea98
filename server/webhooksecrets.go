package server

import (
	"context"
	"log/slog"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/store"
)

// sealWebhookSecretsBatch bounds the targets one sealing transaction locks.
const sealWebhookSecretsBatch = 100

// sealWebhookSecrets is a replica's start-up step: webhook signing secrets
// stored in plaintext without a seal (written before migration 000027, or
// by an older replica during an upgrade) are sealed under the
// key-encryption key (store.SealWebhookSecrets: batched, resumable, shared
// by replicas). Without a key nothing can be sealed: the gateway says how
// many remain, and they keep signing until a key is configured (the
// contract step refuses them).
func sealWebhookSecrets(ctx context.Context, st *store.Store, keyring *secretbox.Keyring, logger *slog.Logger) {
	if keyring == nil {
		n, err := st.UnsealedWebhookSecrets(ctx)
		if err == nil && n > 0 {
			logger.Warn("webhook signing secrets are stored in plaintext only: configure a secrets key (-secrets-key-file) to seal them",
				"webhook_targets", n)
		}
		return
	}
	n, err := st.SealWebhookSecrets(ctx, keyring, sealWebhookSecretsBatch)
	switch {
	case err != nil && ctx.Err() == nil:
		logger.Error("sealing webhook signing secrets failed; the next start resumes", "sealed", n, "error", err.Error())
	case n > 0:
		logger.Info("webhook signing secrets sealed under the secrets key", "webhook_targets", n, "kek_id", keyring.CurrentID())
	}
}
