package secretbox_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/secretbox"
)

func newKEK(t *testing.T) secretbox.KEK {
	t.Helper()
	k, err := secretbox.GenerateKEK()
	require.NoError(t, err)
	return k
}

var (
	orgA    = [16]byte{1}
	orgB    = [16]byte{2}
	secret1 = [16]byte{3}
	secret2 = [16]byte{4}
)

func TestSealOpens(t *testing.T) {
	t.Parallel()
	ring := secretbox.NewKeyring(newKEK(t))
	aad := secretbox.AAD(orgA, secret1, "TOKEN", 1)
	s, err := ring.Seal([]byte("hunter2-value"), aad)
	require.NoError(t, err)
	require.Equal(t, ring.CurrentID(), s.KEKID)
	require.NotContains(t, string(s.Ciphertext), "hunter2")
	require.NotContains(t, string(s.WrappedKey), "hunter2")
	got, err := ring.Open(s, aad)
	require.NoError(t, err)
	require.Equal(t, "hunter2-value", string(got))
}

// A sealed row moved to another organization, secret, name or version
// does not open.
func TestSealBoundToPlace(t *testing.T) {
	t.Parallel()
	ring := secretbox.NewKeyring(newKEK(t))
	s, err := ring.Seal([]byte("value"), secretbox.AAD(orgA, secret1, "TOKEN", 1))
	require.NoError(t, err)
	for _, other := range [][]byte{
		secretbox.AAD(orgB, secret1, "TOKEN", 1),
		secretbox.AAD(orgA, secret2, "TOKEN", 1),
		secretbox.AAD(orgA, secret1, "TOKEN2", 1),
		secretbox.AAD(orgA, secret1, "TOKEN", 2),
	} {
		_, err := ring.Open(s, other)
		require.ErrorIs(t, err, secretbox.ErrOpen)
	}
}

func TestWrongKey(t *testing.T) {
	t.Parallel()
	aad := secretbox.AAD(orgA, secret1, "TOKEN", 1)
	s, err := secretbox.NewKeyring(newKEK(t)).Seal([]byte("value"), aad)
	require.NoError(t, err)

	_, err = secretbox.NewKeyring(newKEK(t)).Open(s, aad)
	require.ErrorIs(t, err, secretbox.ErrUnknownKey)

	// A key presented under the stored id (a forged id) still does not open.
	s.KEKID = secretbox.NewKeyring(newKEK(t)).CurrentID()
	other := newKEK(t)
	s.KEKID = other.ID
	_, err = secretbox.NewKeyring(other).Open(s, aad)
	require.ErrorIs(t, err, secretbox.ErrOpen)
}

// Rotation: the new key wraps, the old still opens until re-wrapped, and
// the value's ciphertext is unchanged by a re-wrap.
func TestRewrap(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newKEK(t), newKEK(t)
	aad := secretbox.AAD(orgA, secret1, "TOKEN", 3)
	s, err := secretbox.NewKeyring(oldKey).Seal([]byte("value"), aad)
	require.NoError(t, err)

	rotating := secretbox.NewKeyring(newKey, oldKey)
	got, err := rotating.Open(s, aad)
	require.NoError(t, err)
	require.Equal(t, "value", string(got))

	re, err := rotating.Rewrap(s, aad)
	require.NoError(t, err)
	require.Equal(t, newKey.ID, re.KEKID)
	require.True(t, bytes.Equal(s.Ciphertext, re.Ciphertext))

	got, err = secretbox.NewKeyring(newKey).Open(re, aad)
	require.NoError(t, err)
	require.Equal(t, "value", string(got))
	_, err = secretbox.NewKeyring(oldKey).Open(re, aad)
	require.True(t, errors.Is(err, secretbox.ErrUnknownKey))
	require.NoError(t, secretbox.NewKeyring(newKey).CheckUnwrap(re, aad))
}

func TestParseKEK(t *testing.T) {
	t.Parallel()
	k := newKEK(t)
	parsed, err := secretbox.ParseKEK("  " + k.Encode() + "\n")
	require.NoError(t, err)
	require.Equal(t, k.ID, parsed.ID)

	file := filepath.Join(t.TempDir(), "kek")
	require.NoError(t, os.WriteFile(file, []byte(k.Encode()+"\n"), 0o600))
	fromFile, err := secretbox.ReadKEKFile(file)
	require.NoError(t, err)
	require.Equal(t, k.ID, fromFile.ID)

	hex64 := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	_, err = secretbox.ParseKEK(hex64)
	require.NoError(t, err)
	for _, bad := range []string{"", "c2hvcnQ=", "not base64 at all!"} {
		_, err := secretbox.ParseKEK(bad)
		require.Error(t, err, bad)
	}
	// The id names the key without containing it.
	require.NotContains(t, k.ID, k.Encode())
}
