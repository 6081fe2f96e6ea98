package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

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

// listCase is a prefix and the keys List must give for it.
type listCase struct {
	prefix string
	want   []string
}

// checkList checks a backend's List over keys, which it holds: the
// prefixes every backend must answer alike, then extra; every key with a
// modification time; and a failing callback's error ending the walk.
func checkList(t *testing.T, s Backend, keys []string, extra ...listCase) {
	t.Helper()
	ctx := context.Background()
	cases := append([]listCase{
		{"", keys},
		{"org1/", []string{"org1/a/x", "org1/a/y", "org1/b/z"}},
		{"org1", []string{"org1/a/x", "org1/a/y", "org1/b/z", "org10/a/x"}},
		{"org1/a", []string{"org1/a/x", "org1/a/y"}},
		{"org3/", nil},
	}, extra...)
	for _, tt := range cases {
		var got []string
		err := s.List(ctx, tt.prefix, func(key string, mod time.Time) error {
			if mod.IsZero() {
				t.Errorf("%s: zero modification time", key)
			}
			got = append(got, key)
			return nil
		})
		if err != nil {
			t.Fatalf("List(%q): %v", tt.prefix, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %v, want %v", tt.prefix, got, tt.want)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := s.List(ctx, "", func(string, time.Time) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("List with a failing callback: err %v after %d calls, want the callback's error after 1", err, calls)
	}
}

// checkOpenThenDelete checks that key, which s holds, opens to body, then
// that Delete removes it (and deleting it again is no error). It returns
// what Open said of the object.
func checkOpenThenDelete(t *testing.T, s Backend, key string, body []byte) ObjectInfo {
	t.Helper()
	ctx := context.Background()
	rc, oinfo, err := s.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) || oinfo.Size != int64(len(body)) {
		t.Fatalf("Open: %d bytes, info %+v, %v", len(got), oinfo, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Open(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
	return oinfo
}
