package webhooks

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// A webhook target's signing secrets (the current one, and the one before
// the last rotation while its overlap lasts) are stored sealed under the
// key-encryption key, as task secrets are (store/internal/secrets): the columns
// secret_* and previous_secret_*, bound to (organization, target) by
// secretbox.WebhookAAD. Every write seals (create, rotate) or wipes
// (delete).
//
// Across the upgrade from a release before migration 000027, which signs
// with the plaintext columns secret and previous_secret and rotates by
// writing them alone, the plaintext stays beside the seals until the
// contract step: this release writes both (plaintextUntilContracted), the
// sealing pass keeps the plaintext it seals, and a rotation by the
// previous release clears the seals of its row (trigger of migration
// 000029), so the plaintext is then what a delivery signs with (secrets
// falls back to it) until the next sealing pass. The contract step
// (migrations/contract/000030) refuses while a live secret has no seal,
// then empties the plaintext columns and forbids them
// (webhook_targets_no_plaintext_secret).

// webhookSecretBytes is the length of a signing secret.
const webhookSecretBytes = 32

// WebhookSecret is a signing secret as a delivery claims it: sealed, or,
// on a row not sealed yet, in plaintext. Open with OpenWebhookSecret.
type WebhookSecret struct {
	Plain  []byte
	Sealed secretbox.Sealed
	AAD    []byte
}

// OpenWebhookSecret returns the secret's bytes: the plaintext of a row not
// yet sealed, else the seal opened under the keyring (core.ErrUnknownKey
// without one).
func OpenWebhookSecret(keyring *secretbox.Keyring, s WebhookSecret) ([]byte, error) {
	if s.Plain != nil {
		return s.Plain, nil
	}
	if keyring == nil {
		return nil, secretbox.ErrUnknownKey
	}
	return keyring.Open(s.Sealed, s.AAD)
}

// webhookSecretColumnsSQL are the columns that hold a target t's secrets,
// in the order of webhookSecretColumns.dest.
const webhookSecretColumnsSQL = `t.secret, t.secret_ciphertext, t.secret_wrapped_key, t.secret_kek_id,
	t.previous_secret, t.previous_secret_ciphertext, t.previous_secret_wrapped_key, t.previous_secret_kek_id`

// webhookSecretColumns is a row's secret columns, plaintext and sealed.
type webhookSecretColumns struct {
	plain, ciphertext, wrapped             []byte
	kekID                                  *string
	prevPlain, prevCiphertext, prevWrapped []byte
	prevKEKID                              *string
}

func (c *webhookSecretColumns) dest() []any {
	return []any{&c.plain, &c.ciphertext, &c.wrapped, &c.kekID, &c.prevPlain, &c.prevCiphertext, &c.prevWrapped, &c.prevKEKID}
}

// secrets reads a row's current and previous secret, each from its seal,
// or from its plaintext column where it has none: a row not sealed yet,
// or one the previous release rotated (whose seals migration 000029's
// trigger cleared). Where both are present they hold the same secret.
func (c webhookSecretColumns) secrets(org, target uuid.UUID) (current, previous *WebhookSecret) {
	aad := secretbox.WebhookAAD(org, target)
	return webhookSecretOf(c.ciphertext, c.wrapped, c.kekID, c.plain, aad),
		webhookSecretOf(c.prevCiphertext, c.prevWrapped, c.prevKEKID, c.prevPlain, aad)
}

// webhookSecretOf is one secret: its seal, else its plaintext, else nil.
func webhookSecretOf(ciphertext, wrapped []byte, kekID *string, plain, aad []byte) *WebhookSecret {
	switch {
	case ciphertext != nil && kekID != nil:
		return &WebhookSecret{Sealed: secretbox.Sealed{Ciphertext: ciphertext, WrappedKey: wrapped, KEKID: *kekID}, AAD: aad}
	case len(plain) > 0:
		return &WebhookSecret{Plain: plain}
	}
	return nil
}

// plaintextUntilContracted is a plaintext secret column's new value in a
// writing statement: value (SQL) until the contract step has run, NULL
// after it. Decided by the statement itself, not before it: a write racing
// the contract step sees it in the catalog, or fails on its constraint,
// and never stores plaintext after it.
func plaintextUntilContracted(value string) string {
	return `CASE WHEN EXISTS (SELECT 1 FROM pg_constraint
		WHERE conrelid = 'webhook_targets'::regclass AND conname = 'webhook_targets_no_plaintext_secret')
		THEN NULL ELSE ` + value + ` END`
}

// unsealedWebhookSecretSQL: a live target t has a secret in plaintext
// without a seal beside it (the contract step refuses such a row).
const unsealedWebhookSecretSQL = `t.deleted_at IS NULL
	AND ((t.secret IS NOT NULL AND t.secret <> '' AND t.secret_ciphertext IS NULL)
		OR (t.previous_secret IS NOT NULL AND t.previous_secret_ciphertext IS NULL))`

func requireKeyring(keyring *secretbox.Keyring) error {
	if keyring == nil {
		return problem.Wrap(core.ErrInvalid, "this gateway has no secrets key configured (-secrets-key-file)")
	}
	return nil
}

// newSealedWebhookSecret makes a signing secret and seals it for the target.
func newSealedWebhookSecret(keyring *secretbox.Keyring, org, target uuid.UUID) ([]byte, secretbox.Sealed, error) {
	secret := make([]byte, webhookSecretBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, secretbox.Sealed{}, fmt.Errorf("webhook secret: %w", err)
	}
	sealed, err := keyring.Seal(secret, secretbox.WebhookAAD(org, target))
	if err != nil {
		return nil, secretbox.Sealed{}, fmt.Errorf("seal webhook secret: %w", err)
	}
	return secret, sealed, nil
}

// sealedArgs are a seal's three columns; a missing seal is three NULLs.
func sealedArgs(s *secretbox.Sealed) (ciphertext, wrapped []byte, kekID *string) {
	if s == nil {
		return nil, nil, nil
	}
	id := s.KEKID
	return s.Ciphertext, s.WrappedKey, &id
}

// SealWebhookSecrets seals, batch by batch, the signing secrets stored in
// plaintext without a seal (rows written before migration 000027, or by
// the previous release during an upgrade), keeping the plaintext for that
// release until the contract step; a deleted target's plaintext is only
// wiped. Each batch is a transaction over rows taken FOR UPDATE SKIP
// LOCKED, so replicas starting together share the work, and a step
// stopped half-way is resumed by the next. Returns how many targets it
// changed.
func (s *Hub) SealWebhookSecrets(ctx context.Context, keyring *secretbox.Keyring, batch int) (int, error) {
	if err := requireKeyring(keyring); err != nil {
		return 0, err
	}
	return s.inBatches(ctx, "seal webhook secrets", "webhook_secrets_sealed", func(tx pgx.Tx) (int, error) {
		rows, err := tx.Query(ctx, `
			SELECT t.id, t.organization_id, t.deleted_at IS NOT NULL, `+webhookSecretColumnsSQL+` FROM webhook_targets t
			WHERE (`+unsealedWebhookSecretSQL+`)
				OR (t.deleted_at IS NOT NULL AND (t.secret IS NOT NULL OR t.previous_secret IS NOT NULL))
			ORDER BY t.id LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
		if err != nil {
			return 0, fmt.Errorf("lock plaintext webhook secrets: %w", err)
		}
		type plainRow struct {
			id, org uuid.UUID
			deleted bool
			cols    webhookSecretColumns
		}
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plainRow, error) {
			var p plainRow
			return p, r.Scan(append([]any{&p.id, &p.org, &p.deleted}, p.cols.dest()...)...)
		})
		if err != nil {
			return 0, fmt.Errorf("lock plaintext webhook secrets: %w", err)
		}
		for _, p := range found {
			var current, previous *secretbox.Sealed
			if !p.deleted {
				cur, prev := p.cols.secrets(p.org, p.id)
				if current, err = sealWebhookSecret(keyring, cur, p.org, p.id); err != nil {
					return 0, err
				}
				if previous, err = sealWebhookSecret(keyring, prev, p.org, p.id); err != nil {
					return 0, err
				}
			}
			ct, wk, kek := sealedArgs(current)
			pct, pwk, pkek := sealedArgs(previous)
			// The plaintext stays (the same secret as the seal) on a live
			// target: the trigger of migration 000029 sees no rotation.
			if _, err := tx.Exec(ctx, `
				UPDATE webhook_targets SET
					secret = CASE WHEN deleted_at IS NULL THEN secret END,
					previous_secret = CASE WHEN deleted_at IS NULL THEN previous_secret END,
					secret_ciphertext = $2, secret_wrapped_key = $3, secret_kek_id = $4,
					previous_secret_ciphertext = $5, previous_secret_wrapped_key = $6, previous_secret_kek_id = $7
				WHERE id = $1`, p.id, ct, wk, kek, pct, pwk, pkek); err != nil {
				return 0, fmt.Errorf("seal webhook secret: %w", err)
			}
		}
		return len(found), nil
	})
}

// sealWebhookSecret is a secret's seal: sealed now if it was plaintext,
// kept if it was sealed, nil if there is none.
func sealWebhookSecret(keyring *secretbox.Keyring, s *WebhookSecret, org, target uuid.UUID) (*secretbox.Sealed, error) {
	switch {
	case s == nil:
		return nil, nil
	case s.Plain == nil:
		return &s.Sealed, nil
	}
	sealed, err := keyring.Seal(s.Plain, secretbox.WebhookAAD(org, target))
	if err != nil {
		return nil, fmt.Errorf("seal webhook secret: %w", err)
	}
	return &sealed, nil
}

// UnsealedWebhookSecrets counts the live targets with a secret in
// plaintext and no seal (a gateway without a key-encryption key warns of
// them; the contract step refuses them).
func (s *Hub) UnsealedWebhookSecrets(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_targets t WHERE `+unsealedWebhookSecretSQL).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unsealed webhook secrets: %w", err)
	}
	return n, nil
}

// sealedWebhookSecret is one seal of a target, for the key check and
// rotation.
type sealedWebhookSecret struct {
	target, org uuid.UUID
	previous    bool
	sealed      secretbox.Sealed
}

// WebhookSecretKeySample is one sealed webhook secret per key-encryption
// key, for the start-up check that the gateway holds every key in use.
func (s *Hub) WebhookSecretKeySample(ctx context.Context) ([]WebhookSecret, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT ON (kek_id) id, organization_id, ciphertext, wrapped_key, kek_id FROM (
			SELECT id, organization_id, secret_ciphertext, secret_wrapped_key, secret_kek_id FROM webhook_targets
			WHERE secret_kek_id IS NOT NULL
			UNION ALL
			SELECT id, organization_id, previous_secret_ciphertext, previous_secret_wrapped_key, previous_secret_kek_id
			FROM webhook_targets WHERE previous_secret_kek_id IS NOT NULL
		) AS s(id, organization_id, ciphertext, wrapped_key, kek_id)
		ORDER BY kek_id, id`)
	if err != nil {
		return nil, fmt.Errorf("sample webhook secret keys: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookSecret, error) {
		var (
			id, org uuid.UUID
			sealed  secretbox.Sealed
		)
		err := r.Scan(&id, &org, &sealed.Ciphertext, &sealed.WrappedKey, &sealed.KEKID)
		return WebhookSecret{Sealed: sealed, AAD: secretbox.WebhookAAD(org, id)}, err
	})
}

// RewrapWebhookSecrets re-wraps, batch by batch, every webhook secret's
// data key not wrapped by the keyring's current key, as RewrapSecrets does
// for task secrets; a row a concurrent rotation holds is waited for and
// then left out if the rotation sealed under the current key. Returns how
// many data keys were re-wrapped.
func (s *Hub) RewrapWebhookSecrets(ctx context.Context, keyring *secretbox.Keyring, batch int) (int, error) {
	if err := requireKeyring(keyring); err != nil {
		return 0, err
	}
	return s.inBatches(ctx, "rewrap webhook secrets", "webhook_secrets_rewrapped", func(tx pgx.Tx) (int, error) {
		rows, err := tx.Query(ctx, `
			SELECT id, organization_id, secret_ciphertext, secret_wrapped_key, secret_kek_id,
				previous_secret_ciphertext, previous_secret_wrapped_key, previous_secret_kek_id
			FROM webhook_targets
			WHERE secret_kek_id <> $1 OR previous_secret_kek_id <> $1
			ORDER BY id LIMIT $2 FOR UPDATE`, keyring.CurrentID(), batch)
		if err != nil {
			return 0, fmt.Errorf("lock webhook secrets: %w", err)
		}
		var found []sealedWebhookSecret
		_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
			var (
				id, org          uuid.UUID
				ct, wk, pct, pwk []byte
				kek, pkek        *string
			)
			if err := r.Scan(&id, &org, &ct, &wk, &kek, &pct, &pwk, &pkek); err != nil {
				return struct{}{}, err
			}
			if kek != nil && *kek != keyring.CurrentID() {
				found = append(found, sealedWebhookSecret{target: id, org: org, sealed: secretbox.Sealed{Ciphertext: ct, WrappedKey: wk, KEKID: *kek}})
			}
			if pkek != nil && *pkek != keyring.CurrentID() {
				found = append(found, sealedWebhookSecret{target: id, org: org, previous: true,
					sealed: secretbox.Sealed{Ciphertext: pct, WrappedKey: pwk, KEKID: *pkek}})
			}
			return struct{}{}, nil
		})
		if err != nil {
			return 0, fmt.Errorf("lock webhook secrets: %w", err)
		}
		for _, f := range found {
			re, err := keyring.Rewrap(f.sealed, secretbox.WebhookAAD(f.org, f.target))
			if err != nil {
				return 0, fmt.Errorf("webhook %s: %w", f.target, err)
			}
			update := `UPDATE webhook_targets SET secret_wrapped_key = $2, secret_kek_id = $3 WHERE id = $1`
			if f.previous {
				update = `UPDATE webhook_targets SET previous_secret_wrapped_key = $2, previous_secret_kek_id = $3 WHERE id = $1`
			}
			if _, err := tx.Exec(ctx, update, f.target, re.WrappedKey, re.KEKID); err != nil {
				return 0, fmt.Errorf("rewrap webhook secret: %w", err)
			}
		}
		return len(found), nil
	})
}
