package store_test

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

// hookKeyring seals the store tests' webhook secrets.
var hookKeyring = func() *secretbox.Keyring {
	k, err := secretbox.GenerateKEK()
	if err != nil {
		panic(err)
	}
	return secretbox.NewKeyring(k)
}()

// requireNoPlaintext fails when a target's row, as text, holds the secret
// in any form: raw (bytea hex), base64, or the whsec_ form.
func requireNoPlaintext(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, secrets ...[]byte) {
	t.Helper()
	var row string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT t::text FROM webhook_targets t WHERE id = $1`, id).Scan(&row))
	require.NotContains(t, row, "whsec_")
	for _, s := range secrets {
		require.NotContains(t, row, hex.EncodeToString(s))
		require.NotContains(t, row, base64.StdEncoding.EncodeToString(s))
	}
	var plain, previous *[]byte
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT secret, previous_secret FROM webhook_targets WHERE id = $1`, id).Scan(&plain, &previous))
	require.Nil(t, plain)
	require.Nil(t, previous)
}

// claimedSecrets completes a task, claims the delivery to target and
// opens its secrets with keyring, current first.
func claimedSecrets(t *testing.T, s *store.Store, b *testBundle, keyring *secretbox.Keyring, target uuid.UUID) [][]byte {
	t.Helper()
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	complete(t, s, refOf(b.worker.ID, acquireOne(t, s, b.worker.ID)), store.AttemptSucceeded, false)
	claimed, err := s.ClaimWebhookDeliveries(t.Context(), 100, time.Minute)
	require.NoError(t, err)
	var out [][]byte
	for _, c := range claimed {
		if c.TargetID != target {
			continue
		}
		require.Nil(t, out, "one delivery per target")
		for _, sec := range c.Secrets {
			k, err := store.OpenWebhookSecret(keyring, sec)
			require.NoError(t, err)
			out = append(out, k)
		}
	}
	require.NotNil(t, out, "a delivery to the target")
	return out
}

// TestWebhookSecretsSealedAtRest: creation and rotation store the secrets
// sealed only, and a delivery opens what creation and rotation answered.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	tenant := store.OneOrganization(b.org.ID)
	w, secret, err := s.CreateWebhookTarget(t.Context(), tenant, hookKeyring, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	requireNoPlaintext(t, b.pool, w.ID, secret)
	require.Equal(t, [][]byte{secret}, claimedSecrets(t, s, b, hookKeyring, w.ID))

	_, rotated, err := s.RotateWebhookSecret(t.Context(), tenant, hookKeyring, w.ID, time.Hour)
	require.NoError(t, err)
	requireNoPlaintext(t, b.pool, w.ID, secret, rotated)
	require.Equal(t, [][]byte{rotated, secret}, claimedSecrets(t, s, b, hookKeyring, w.ID))

	// Without a key nothing is created or rotated.
	_, _, err = s.CreateWebhookTarget(t.Context(), tenant, nil, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, _, err = s.RotateWebhookSecret(t.Context(), tenant, nil, w.ID, time.Hour)
	require.ErrorIs(t, err, store.ErrInvalid)

	// A seal copied onto another target does not open there.
	other := createHook(t, s, b.org.ID, store.EventScanCompleted)
	_, err = b.pool.Exec(t.Context(), `UPDATE webhook_targets o SET secret_ciphertext = w.secret_ciphertext,
		secret_wrapped_key = w.secret_wrapped_key, secret_kek_id = w.secret_kek_id
		FROM webhook_targets w WHERE o.id = $1 AND w.id = $2`, other.ID, w.ID)
	require.NoError(t, err)
	var copied secretbox.Sealed
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT secret_ciphertext, secret_wrapped_key, secret_kek_id
		FROM webhook_targets WHERE id = $1`, other.ID).Scan(&copied.Ciphertext, &copied.WrappedKey, &copied.KEKID))
	_, err = hookKeyring.Open(copied, secretbox.WebhookAAD(b.org.ID, other.ID))
	require.ErrorIs(t, err, secretbox.ErrOpen)
	opened, err := hookKeyring.Open(copied, secretbox.WebhookAAD(b.org.ID, w.ID))
	require.NoError(t, err)
	require.Equal(t, rotated, opened)
}

// TestSealWebhookSecretsSealsOldRows: rows written in the shape before
// migration 000027 (plaintext current and previous secret; a deleted
// target's emptied secret; a sealed row the previous release rotated), on
// the expanded schema both releases serve on, are sealed by the step, in
// batches, the plaintext kept for the previous release until the contract
// step, which leaves none; deliveries sign with the same secrets before
// and after.
func TestSealWebhookSecretsSealsOldRows(t *testing.T) {
	t.Parallel()
	s, b, url := expandedStore(t)
	tenant := store.OneOrganization(b.org.ID)
	oldCurrent, oldPrevious := []byte(strings.Repeat("c", 32)), []byte(strings.Repeat("p", 32))
	var plainID, deletedID uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		INSERT INTO webhook_targets (organization_id, url, event_types, secret, previous_secret, previous_secret_expires_at)
		VALUES ($1, 'http://127.0.0.1:9/old', '{task.completed}', $2, $3, now() + interval '1 hour') RETURNING id`,
		b.org.ID, oldCurrent, oldPrevious).Scan(&plainID))
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		INSERT INTO webhook_targets (organization_id, url, event_types, secret, enabled, deleted_at)
		VALUES ($1, 'http://127.0.0.1:9/gone', '{task.completed}', '', false, now()) RETURNING id`, b.org.ID).Scan(&deletedID))
	// A sealed target the previous release rotated: it wrote the new
	// secret in plaintext and moved the plaintext column to previous_secret.
	rotatedByOld, sealedSecret, err := s.CreateWebhookTarget(t.Context(), tenant, hookKeyring, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/rot", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	newPlain := []byte(strings.Repeat("n", 32))
	_, err = b.pool.Exec(t.Context(), previousReleaseRotateSQL, rotatedByOld.ID, newPlain)
	require.NoError(t, err)

	// Old rows deliver before the step, from their plaintext.
	require.Equal(t, [][]byte{oldCurrent, oldPrevious}, claimedSecrets(t, s, b, nil, plainID))
	require.Equal(t, [][]byte{newPlain, sealedSecret}, claimedSecrets(t, s, b, nil, rotatedByOld.ID))
	n, err := s.UnsealedWebhookSecrets(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, n)

	sealed, err := s.SealWebhookSecrets(t.Context(), hookKeyring, 1)
	require.NoError(t, err)
	require.Equal(t, 3, sealed)
	requireSealed(t, b, plainID, true)
	requireSealed(t, b, rotatedByOld.ID, true)
	var gone *[]byte
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce(secret_ciphertext, secret) FROM webhook_targets WHERE id = $1`, deletedID).Scan(&gone))
	require.Nil(t, gone, "a deleted target keeps no secret")
	require.Equal(t, [][]byte{oldCurrent, oldPrevious}, previousReleaseClaimedSecrets(t, s, b, plainID), "the plaintext stays until the contract step")
	require.Equal(t, [][]byte{oldCurrent, oldPrevious}, claimedSecrets(t, s, b, hookKeyring, plainID))
	require.Equal(t, [][]byte{newPlain, sealedSecret}, claimedSecrets(t, s, b, hookKeyring, rotatedByOld.ID))

	again, err := s.SealWebhookSecrets(t.Context(), hookKeyring, 1)
	require.NoError(t, err)
	require.Zero(t, again, "the step is done")
	n, err = s.UnsealedWebhookSecrets(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)

	require.NoError(t, migrations.UpContract(t.Context(), url))
	requireNoPlaintext(t, b.pool, plainID, oldCurrent, oldPrevious)
	requireNoPlaintext(t, b.pool, rotatedByOld.ID, newPlain, sealedSecret)
	require.Equal(t, [][]byte{oldCurrent, oldPrevious}, claimedSecrets(t, s, b, hookKeyring, plainID))
	require.Equal(t, [][]byte{newPlain, sealedSecret}, claimedSecrets(t, s, b, hookKeyring, rotatedByOld.ID))
}

// TestRewrapWebhookSecrets: rotate-kek re-wraps current and previous
// webhook secrets under the new key, after which the old key is not needed.
func TestRewrapWebhookSecrets(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	tenant := store.OneOrganization(b.org.ID)
	oldKey, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	newKey, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	old := secretbox.NewKeyring(oldKey)
	w, secret, err := s.CreateWebhookTarget(t.Context(), tenant, old, b.org.ID,
		store.WebhookTargetParams{URL: "http://127.0.0.1:9/hook", EventTypes: []string{store.EventTaskCompleted}, Enabled: true})
	require.NoError(t, err)
	_, rotated, err := s.RotateWebhookSecret(t.Context(), tenant, old, w.ID, time.Hour)
	require.NoError(t, err)

	n, err := s.RewrapWebhookSecrets(t.Context(), secretbox.NewKeyring(newKey, oldKey), 1)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	sample, err := s.WebhookSecretKeySample(t.Context())
	require.NoError(t, err)
	require.Len(t, sample, 1)
	require.Equal(t, newKey.ID, sample[0].Sealed.KEKID)
	require.Equal(t, [][]byte{rotated, secret}, claimedSecrets(t, s, b, secretbox.NewKeyring(newKey), w.ID))
	n, err = s.RewrapWebhookSecrets(t.Context(), secretbox.NewKeyring(newKey), 1)
	require.NoError(t, err)
	require.Zero(t, n)
}
