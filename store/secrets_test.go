package store_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/store"
)

func newKeyring(t *testing.T, old ...secretbox.KEK) (*secretbox.Keyring, secretbox.KEK) {
	t.Helper()
	k, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	return secretbox.NewKeyring(k, old...), k
}

// TestRewrapSecrets: RewrapSecrets moves every data key to the current key, leaves values
// unchanged, and refuses a key it cannot open.
func TestRewrapSecrets(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	oldRing, oldKey := newKeyring(t)
	for _, name := range []string{"A", "B", "C"} {
		_, err := s.CreateSecret(ctx, store.EveryOrganization(), oldRing, b.org.ID, store.SecretParams{Name: name, Value: []byte("value-" + name)})
		require.NoError(t, err)
	}
	newRing, newKey := newKeyring(t, oldKey)
	n, err := s.RewrapSecrets(ctx, newRing, 2)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = s.RewrapSecrets(ctx, newRing, 2)
	require.NoError(t, err)
	require.Zero(t, n, "a second run has nothing left")

	refs := []store.SecretRef{{OrganizationID: b.org.ID, Name: "A"}, {OrganizationID: b.org.ID, Name: "B"}, {OrganizationID: b.org.ID, Name: "C"}}
	sealed, err := s.SealedSecrets(ctx, refs)
	require.NoError(t, err)
	require.Len(t, sealed, 3)
	onlyNew := secretbox.NewKeyring(newKey)
	for _, ss := range sealed {
		require.Equal(t, newKey.ID, ss.Sealed.KEKID)
		v, err := onlyNew.Open(ss.Sealed, ss.AAD())
		require.NoError(t, err)
		require.Equal(t, "value-"+ss.Name, string(v))
	}

	// A keyring without the key in use cannot rotate.
	strangerRing, _ := newKeyring(t)
	_, err = s.RewrapSecrets(ctx, strangerRing, 10)
	require.ErrorIs(t, err, secretbox.ErrUnknownKey)
}

// A row copied onto another secret does not open: the seal is bound to
// its organization, id, name and version.
func TestSecretRowsCannotBeSwapped(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	ring, _ := newKeyring(t)
	other := createOrg(t, s, "org-b")
	_, err := s.CreateSecret(ctx, store.EveryOrganization(), ring, b.org.ID, store.SecretParams{Name: "MINE", Value: []byte("mine")})
	require.NoError(t, err)
	_, err = s.CreateSecret(ctx, store.EveryOrganization(), ring, other.ID, store.SecretParams{Name: "THEIRS", Value: []byte("theirs")})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE secrets t SET ciphertext = o.ciphertext, wrapped_key = o.wrapped_key
		FROM secrets o WHERE t.name = 'MINE' AND o.name = 'THEIRS'`)
	require.NoError(t, err)
	sealed, err := s.SealedSecrets(ctx, []store.SecretRef{{OrganizationID: b.org.ID, Name: "MINE"}})
	require.NoError(t, err)
	require.Len(t, sealed, 1)
	_, err = ring.Open(sealed[0].Sealed, sealed[0].AAD())
	require.ErrorIs(t, err, secretbox.ErrOpen)
}

// Worker labels are read from workers.labels (migration 000019 of the
// worker-labels feature adds it; the test adds it if missing, so it holds
// on either schema), as an object or a list of key=value; a worker never
// labelled has none.
func TestWorkerLabels(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	ctx := t.Context()
	labels, err := s.WorkerLabels(ctx, b.worker.ID)
	require.NoError(t, err)
	require.Empty(t, labels)

	_, err = b.pool.Exec(ctx, `UPDATE workers SET labels = '{"zone": "eu", "gpu": "yes"}' WHERE id = $1`, b.worker.ID)
	require.NoError(t, err)
	labels, err = s.WorkerLabels(ctx, b.worker.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "eu", "gpu": "yes"}, labels)
	require.True(t, store.Secret{WorkerLabels: map[string]string{"zone": "eu"}}.SecretAllowed("scanner_plugin", labels))
	require.False(t, store.Secret{WorkerLabels: map[string]string{"zone": "us"}}.SecretAllowed("scanner_plugin", labels))

	labels, err = s.WorkerLabels(ctx, uuid.New())
	require.NoError(t, err)
	require.Empty(t, labels, "a worker that does not exist has no labels")
}
