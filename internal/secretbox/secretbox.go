// Package secretbox is the envelope encryption of stored secrets: each
// value is sealed with AES-256-GCM under a data key of its own, and the data
// key is sealed (wrapped) under a key-encryption key (KEK) the gateway reads
// from a file or its environment, never from the database. Beside each
// wrapped key the database keeps the KEK's id, a fingerprint that names the
// key without revealing it, so a wrong KEK is told apart from damaged data.
//
// Both seals take associated data that binds the ciphertext to where it
// belongs (organization, secret id, name, version): a row copied onto
// another secret, or another organization's, does not open.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeySize is the size of a KEK and of a data key: AES-256.
const KeySize = 32

// ErrUnknownKey is a wrapped key whose KEK id is none of the keyring's.
var ErrUnknownKey = errors.New("secretbox: the data key was wrapped by a key-encryption key this gateway does not have")

// ErrOpen is a seal that does not open: a wrong key, damaged data, or
// associated data that does not match.
var ErrOpen = errors.New("secretbox: ciphertext does not open")

// KEK is a key-encryption key with its id.
type KEK struct {
	ID  string
	key []byte
}

// NewKEK makes a KEK of 32 raw bytes.
func NewKEK(key []byte) (KEK, error) {
	if len(key) != KeySize {
		return KEK{}, fmt.Errorf("secretbox: a key-encryption key is %d bytes, got %d", KeySize, len(key))
	}
	return KEK{ID: fingerprint(key), key: append([]byte(nil), key...)}, nil
}

// ParseKEK reads a KEK written as base64 (standard or URL, padded or not)
// or as 64 hex digits, surrounding space ignored: the form of a key file
// and of GATEWAY_SECRETS_KEY.
func ParseKEK(text string) (KEK, error) {
	s := strings.TrimSpace(text)
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return NewKEK(b)
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return NewKEK(b)
		}
	}
	return KEK{}, errors.New("secretbox: a key-encryption key must be 32 bytes written as base64 or 64 hex digits")
}

// ReadKEKFile reads a KEK from a file (see ParseKEK).
func ReadKEKFile(path string) (KEK, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return KEK{}, fmt.Errorf("secretbox: read key file: %w", err)
	}
	k, err := ParseKEK(string(b))
	if err != nil {
		return KEK{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// GenerateKEK makes a random KEK, written as base64 by Encode.
func GenerateKEK() (KEK, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return KEK{}, err
	}
	return NewKEK(b)
}

// Encode writes the key as base64, the form ParseKEK reads.
func (k KEK) Encode() string { return base64.StdEncoding.EncodeToString(k.key) }

// fingerprint names a key without revealing it: an HMAC of a fixed label,
// keyed by the key (so it cannot be used to test guesses of a value).
func fingerprint(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("worker-gateway secrets key-encryption key id v1"))
	return "kek1:" + hex.EncodeToString(m.Sum(nil)[:12])
}

// Keyring is the KEKs a gateway holds: the current one, which wraps every
// new data key, and older ones that still unwrap during a rotation.
type Keyring struct {
	current KEK
	old     []KEK
}

// NewKeyring makes a keyring; old keys only unwrap.
func NewKeyring(current KEK, old ...KEK) *Keyring {
	return &Keyring{current: current, old: old}
}

// CurrentID is the id of the KEK that wraps new data keys.
func (r *Keyring) CurrentID() string { return r.current.ID }

// Has reports whether the keyring holds a KEK with this id.
func (r *Keyring) Has(id string) bool {
	_, ok := r.kek(id)
	return ok
}

func (r *Keyring) kek(id string) (KEK, bool) {
	if r == nil {
		return KEK{}, false
	}
	if r.current.ID == id {
		return r.current, true
	}
	for _, k := range r.old {
		if k.ID == id {
			return k, true
		}
	}
	return KEK{}, false
}

// Sealed is a secret value as the database stores it.
type Sealed struct {
	Ciphertext []byte // nonce ‖ AES-GCM(data key, value, aad)
	WrappedKey []byte // nonce ‖ AES-GCM(KEK, data key, aad)
	KEKID      string
}

// Seal encrypts value under a fresh data key wrapped by the current KEK.
// aad is bound to both seals.
func (r *Keyring) Seal(value, aad []byte) (Sealed, error) {
	dataKey := make([]byte, KeySize)
	if _, err := rand.Read(dataKey); err != nil {
		return Sealed{}, err
	}
	ct, err := seal(dataKey, value, aad)
	if err != nil {
		return Sealed{}, err
	}
	wrapped, err := seal(r.current.key, dataKey, wrapAAD(aad))
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{Ciphertext: ct, WrappedKey: wrapped, KEKID: r.current.ID}, nil
}

// Open decrypts a sealed value with the KEK its id names.
func (r *Keyring) Open(s Sealed, aad []byte) ([]byte, error) {
	dataKey, err := r.unwrap(s, aad)
	if err != nil {
		return nil, err
	}
	return open(dataKey, s.Ciphertext, aad)
}

// CheckUnwrap reports whether the keyring opens the sealed value's data
// key: the start-up check that the gateway holds the right KEK.
func (r *Keyring) CheckUnwrap(s Sealed, aad []byte) error {
	_, err := r.unwrap(s, aad)
	return err
}

// Rewrap wraps a sealed value's data key under the current KEK; the
// value's ciphertext is unchanged.
func (r *Keyring) Rewrap(s Sealed, aad []byte) (Sealed, error) {
	dataKey, err := r.unwrap(s, aad)
	if err != nil {
		return Sealed{}, err
	}
	wrapped, err := seal(r.current.key, dataKey, wrapAAD(aad))
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{Ciphertext: s.Ciphertext, WrappedKey: wrapped, KEKID: r.current.ID}, nil
}

func (r *Keyring) unwrap(s Sealed, aad []byte) ([]byte, error) {
	k, ok := r.kek(s.KEKID)
	if !ok {
		return nil, ErrUnknownKey
	}
	return open(k.key, s.WrappedKey, wrapAAD(aad))
}

// wrapAAD separates the data key's seal from the value's, so neither can be
// presented as the other.
func wrapAAD(aad []byte) []byte { return append([]byte("wrap\x00"), aad...) }

func seal(key, plaintext, aad []byte) ([]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(nonce, nonce, plaintext, aad), nil
}

func open(key, sealed, aad []byte) ([]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < gcm.NonceSize() {
		return nil, ErrOpen
	}
	out, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// AAD is the associated data binding a secret's seals to its organization,
// id, name and version. Lengths prefix the name so no two tuples encode
// alike.
func AAD(organization, secret [16]byte, name string, version int) []byte {
	b := make([]byte, 0, 64+len(name))
	b = append(b, "worker-gateway secret v1\x00"...)
	b = append(b, organization[:]...)
	b = append(b, secret[:]...)
	b = append(b, fmt.Sprintf("%d:%s:%d", len(name), name, version)...)
	return b
}

// WebhookAAD is the associated data binding a webhook target's signing
// secret to its organization and target. Its label differs from AAD's, so
// a task secret's seal never opens as a webhook secret's, nor the reverse.
// It names no slot: a rotation moves the current seal to the previous one
// unchanged.
func WebhookAAD(organization, target [16]byte) []byte {
	b := make([]byte, 0, 64)
	b = append(b, "worker-gateway webhook signing secret v1\x00"...)
	b = append(b, organization[:]...)
	return append(b, target[:]...)
}
