// Package objectstore keeps artifact bytes: on the gateway's local disk (fs,
// the default) or in any S3-compatible store (s3). The gateway holds the
// storage credentials; workers only ever get a URL.
package objectstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Size int64
	// SHA256 is the lowercase hex digest of the content. Open leaves it
	// empty when the backend cannot know it without reading the object.
	SHA256  string
	ModTime time.Time
}

// PresignedPut is how a worker uploads directly to the store.
type PresignedPut struct {
	Method string
	URL    string
	// Headers are the ones the worker must send verbatim; Content-Length is
	// signed too but set by the HTTP client from the body.
	Headers map[string]string
}

var (
	ErrNotFound = errors.New("objectstore: object not found")
	// ErrMismatch is wrapped with the details: which size or digest arrived.
	ErrMismatch = errors.New("objectstore: object does not match its declared size or checksum")
	// ErrTooLarge means the body ran past its declared size. It is also an
	// ErrMismatch, so callers that only care that the upload was wrong can
	// test for that alone.
	ErrTooLarge = fmt.Errorf("objectstore: body longer than its declared size (%w)", ErrMismatch)
	// ErrExists refuses a second upload to a key: one upload per session.
	ErrExists = errors.New("objectstore: object already exists")
	ErrBadKey = errors.New("objectstore: invalid object key")
	// ErrNotDirect is what PresignPut answers on a backend that receives
	// uploads through the gateway.
	ErrNotDirect = errors.New("objectstore: backend does not presign uploads; upload through the gateway")
)

// Backend stores artifact objects under slash-separated keys.
type Backend interface {
	// Name is "fs" or "s3".
	Name() string
	// Direct reports whether workers upload straight to the store
	// (PresignPut) or through the gateway's PUT route (Put).
	Direct() bool
	// PresignPut returns a presigned PUT bound to key, the exact content
	// length, the content type and x-amz-checksum-sha256. Backends that are
	// not Direct return ErrNotDirect.
	PresignPut(ctx context.Context, key string, size int64, sha256Hex, contentType string, ttl time.Duration) (PresignedPut, error)
	// Put streams r into key, verifying as it goes that r holds exactly size
	// bytes with SHA-256 sha256Hex. On any mismatch (ErrMismatch,
	// ErrTooLarge) or error nothing is left under key. An existing key is
	// never overwritten (ErrExists).
	Put(ctx context.Context, key string, r io.Reader, size int64, sha256Hex, contentType string) error
	// Stat returns the size and SHA-256 of a stored object, or ErrNotFound.
	// The digest describes the stored bytes, never what an uploader claimed.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Open streams an object for download, or returns ErrNotFound.
	Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for each object key starting with prefix (a plain string
	// prefix, as in S3) with its modification time, and stops at the first
	// error fn returns, returning it unwrapped.
	List(ctx context.Context, prefix string, fn func(key string, modTime time.Time) error) error
}

var (
	_ Backend = (*FS)(nil)
	_ Backend = (*S3)(nil)
)

// NewKey returns prefix + "/" + 32 random bytes in unpadded base64url: an
// object key nobody can guess.
func NewKey(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it crashes the program instead.
	r := base64.RawURLEncoding.EncodeToString(b[:])
	if prefix == "" {
		return r
	}
	return strings.TrimSuffix(prefix, "/") + "/" + r
}

// maxKeyLen is S3's limit; fs keeps the same so keys move between backends.
const maxKeyLen = 1024

// sidecarSuffix names the fs digest file next to an object. Keys may not end
// with it, and no key segment may start with "." (temp files do).
const sidecarSuffix = ".sha256"

// checkKey accepts relative slash paths whose segments are non-empty, not
// "." or "..", and do not start with "." — the same rules on every backend,
// so a key never escapes the fs root nor collides with a temp or sidecar file.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrBadKey)
	}
	if strings.HasSuffix(key, sidecarSuffix) {
		return fmt.Errorf("%w: %q ends with %q", ErrBadKey, key, sidecarSuffix)
	}
	return checkPath(key)
}

// checkPrefix accepts what List takes: "", or a key prefix, optionally with
// a trailing slash and a partial last segment.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return checkPath(strings.TrimSuffix(prefix, "/"))
}

func checkPath(p string) error {
	if len(p) > maxKeyLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrBadKey, maxKeyLen)
	}
	if strings.ContainsRune(p, '\\') {
		return fmt.Errorf("%w: %q contains a backslash", ErrBadKey, p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %q contains a control character", ErrBadKey, p)
		}
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: %q is absolute", ErrBadKey, p)
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q has an empty segment", ErrBadKey, p)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrBadKey, p, seg)
		case strings.HasPrefix(seg, "."):
			return fmt.Errorf("%w: %q has a segment starting with a dot", ErrBadKey, p)
		}
	}
	return nil
}

// parseSHA256 decodes a 64-digit hex SHA-256.
func parseSHA256(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("objectstore: sha256 must be 64 hex digits, got %q", s)
	}
	return b, nil
}

// verifier streams a body while proving it is exactly size bytes with the
// wanted SHA-256. It holds back the final bytes until the whole body is
// proven: a consumer (a file copy, or an HTTP request to S3) never receives
// a complete body that is wrong, so a store that checks nothing still never
// publishes one.
type verifier struct {
	ctx  context.Context
	r    io.Reader
	size int64
	want []byte
	h    hash.Hash
	n    int64
	// mu guards the state: an HTTP transport may still be reading the body
	// on its own goroutine when the caller inspects the outcome.
	mu   sync.Mutex
	err  error // sticky
	done bool  // all size bytes delivered and proven
}

// outcome reports whether the whole body was delivered and proven, or why not.
func (v *verifier) outcome() (done bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.done, v.err
}

func newVerifier(ctx context.Context, r io.Reader, size int64, want []byte) *verifier {
	return &verifier{ctx: ctx, r: r, size: size, want: want, h: sha256.New()}
}

func (v *verifier) Read(p []byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil {
		return 0, v.err
	}
	if v.done {
		return 0, io.EOF
	}
	if err := v.ctx.Err(); err != nil {
		v.err = err
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	if v.n < v.size {
		if rem := v.size - v.n; int64(len(p)) > rem {
			p = p[:rem]
		}
		var err error
		n, err = v.r.Read(p)
		v.n += int64(n)
		v.h.Write(p[:n])
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			v.err = fmt.Errorf("objectstore: reading body: %w", err)
			return 0, v.err
		case err != nil && v.n < v.size:
			v.err = fmt.Errorf("%w: body ended after %d of %d bytes", ErrMismatch, v.n, v.size)
			return 0, v.err
		case v.n < v.size:
			return n, nil
		}
	}
	// Every declared byte is in; p[:n] is held until the rest is proven.
	if err := v.finish(); err != nil {
		v.err = err
		return 0, err
	}
	v.done = true
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (v *verifier) finish() error {
	var one [1]byte
	m, err := io.ReadFull(v.r, one[:])
	if m > 0 {
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, v.size)
	}
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("objectstore: reading body: %w", err)
	}
	if got := v.h.Sum(nil); !bytes.Equal(got, v.want) {
		return fmt.Errorf("%w: sha256 is %x, declared %x", ErrMismatch, got, v.want)
	}
	return nil
}

// hashStream returns the size and lowercase hex SHA-256 of r.
func hashStream(ctx context.Context, r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, r})
	if err != nil {
		return n, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
