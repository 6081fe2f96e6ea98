package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// badKeys are refused by every backend.
var badKeys = []struct{ name, key string }{
	{"empty", ""},
	{"absolute", "/etc/passwd"},
	{"dotdot", "org/../../etc/passwd"},
	{"only dotdot", ".."},
	{"dot segment", "org/./x"},
	{"empty segment", "org//x"},
	{"trailing slash", "org/x/"},
	{"backslash", `org\x`},
	{"windows traversal", `org\..\x`},
	{"hidden segment", "org/.tmp-123"},
	{"sidecar name", "org/x.sha256"},
	{"nul byte", "org/x\x00y"},
	{"newline", "org/x\ny"},
	{"too long", strings.Repeat("a", 1025)},
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	a, b := NewKey("org/0191b3c4-0000-7000-8000-000000000000"), NewKey("org/0191b3c4-0000-7000-8000-000000000000/")
	for _, k := range []string{a, b} {
		if err := checkKey(k); err != nil {
			t.Fatalf("NewKey made an invalid key %q: %v", k, err)
		}
		rest, ok := strings.CutPrefix(k, "org/0191b3c4-0000-7000-8000-000000000000/")
		if !ok {
			t.Fatalf("key %q lost its prefix", k)
		}
		raw, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil || len(raw) != 32 {
			t.Fatalf("random part %q: %d bytes, %v; want 32 bytes of base64url", rest, len(raw), err)
		}
	}
	if a == b {
		t.Fatal("two keys are equal")
	}
	if k := NewKey(""); strings.Contains(k, "/") || checkKey(k) != nil {
		t.Fatalf("NewKey(\"\") = %q", k)
	}
}

func TestErrTooLargeIsMismatch(t *testing.T) {
	t.Parallel()
	if !errors.Is(ErrTooLarge, ErrMismatch) {
		t.Fatal("ErrTooLarge should also be an ErrMismatch")
	}
}

// TestVerifierWithholdsLastBytes checks the property the s3 Put relies on: a
// consumer never receives all declared bytes of a wrong body.
func TestVerifierWithholdsLastBytes(t *testing.T) {
	t.Parallel()
	good := bytes.Repeat([]byte("artifact "), 10000)
	tests := []struct {
		name    string
		body    []byte
		wantErr error
	}{
		{"exact", good, nil},
		{"wrong checksum", append(append([]byte{}, good[:len(good)-1]...), 'X'), ErrMismatch},
		{"short", good[:len(good)-1], ErrMismatch},
		{"long", append(append([]byte{}, good...), '!'), ErrTooLarge},
	}
	want, _ := hex.DecodeString(sum(good))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newVerifier(context.Background(), oneByteAtATime{bytes.NewReader(tt.body)}, int64(len(good)), want)
			got, err := io.ReadAll(v)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				if !bytes.Equal(got, good) {
					t.Fatal("body changed in transit")
				}
				return
			}
			if len(got) >= len(good) {
				t.Fatalf("consumer got %d of %d declared bytes of a wrong body", len(got), len(good))
			}
		})
	}
}

type oneByteAtATime struct{ r io.Reader }

func (o oneByteAtATime) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}
