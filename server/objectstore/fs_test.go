package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestFS(t *testing.T) *FS {
	t.Helper()
	s, err := NewFS(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// files lists every regular file under the store's root, relative, so tests
// can prove nothing (object, sidecar or temp file) was left behind.
func files(t *testing.T, s *FS) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(s.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(s.Dir(), p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNewFSCreatesDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	if _, err := NewFS(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		t.Fatalf("dir not created: %v", err)
	}
	if perm := fi.Mode().Perm(); perm&^0o750 != 0 {
		t.Fatalf("dir mode %o, want at most 0750", perm)
	}
	if _, err := NewFS(""); err == nil {
		t.Fatal("NewFS(\"\") succeeded")
	}
}

func TestFSRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"one byte", []byte{0}},
		{"text", []byte("hello artifact\n")},
		{"100 KiB", bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 25<<10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newTestFS(t)
			key := NewKey("org/0191b3c4-0000-7000-8000-000000000001")
			before := time.Now().Add(-time.Second)
			if err := s.Put(ctx, key, bytes.NewReader(tt.body), int64(len(tt.body)), sum(tt.body), "application/octet-stream"); err != nil {
				t.Fatal(err)
			}

			info, err := s.Stat(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != int64(len(tt.body)) || info.SHA256 != sum(tt.body) || info.ModTime.Before(before) {
				t.Fatalf("Stat = %+v, want size %d sha256 %s", info, len(tt.body), sum(tt.body))
			}

			fi, err := os.Stat(filepath.Join(s.Dir(), filepath.FromSlash(key)))
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o640 {
				t.Fatalf("object mode %o, want 0640", perm)
			}

			if oinfo := checkOpenThenDelete(t, s, key, tt.body); oinfo.SHA256 != info.SHA256 {
				t.Fatalf("Open's info %+v, want sha256 %s", oinfo, info.SHA256)
			}
			if left := files(t, s); len(left) != 0 {
				t.Fatalf("files left after Delete: %v", left)
			}
		})
	}
}

func TestFSPutRejectsWrongBody(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	tests := []struct {
		name    string
		r       io.Reader
		size    int64
		sha     string
		wantErr error
	}{
		{"short", bytes.NewReader(body[:len(body)-1]), int64(len(body)), sum(body), ErrMismatch},
		{"empty but declared", bytes.NewReader(nil), 10, sum(body[:10]), ErrMismatch},
		{"long", bytes.NewReader(append(append([]byte{}, body...), 'x')), int64(len(body)), sum(body), ErrTooLarge},
		{"much longer", io.MultiReader(bytes.NewReader(body), bytes.NewReader(body)), int64(len(body)), sum(body), ErrTooLarge},
		{"wrong checksum", bytes.NewReader(body), int64(len(body)), sum(body[1:]), ErrMismatch},
		{"flipped last byte", bytes.NewReader(append(append([]byte{}, body[:len(body)-1]...), 'X')), int64(len(body)), sum(body), ErrMismatch},
		{"reader error", io.MultiReader(bytes.NewReader(body[:100]), errReader{}), int64(len(body)), sum(body), errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newTestFS(t)
			key := NewKey("org/x")
			err := s.Put(ctx, key, tt.r, tt.size, tt.sha, "")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Put: %v, want %v", err, tt.wantErr)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Stat after failed Put: %v, want ErrNotFound", err)
			}
			if left := files(t, s); len(left) != 0 {
				t.Fatalf("files left after failed Put: %v", left)
			}
			// The session may retry with the right bytes.
			if err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), sum(body), ""); err != nil {
				t.Fatalf("retry after failed Put: %v", err)
			}
		})
	}
}

var errBoom = errors.New("boom")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBoom }

func TestFSPutBadArguments(t *testing.T) {
	t.Parallel()
	s := newTestFS(t)
	ctx := context.Background()
	for _, tt := range []struct{ name, sha string }{{"not hex", strings.Repeat("z", 64)}, {"short", "abcd"}, {"empty", ""}} {
		if err := s.Put(ctx, "org/k", bytes.NewReader(nil), 0, tt.sha, ""); err == nil {
			t.Errorf("%s sha256 %q accepted", tt.name, tt.sha)
		}
	}
	if err := s.Put(ctx, "org/k", bytes.NewReader(nil), -1, sum(nil), ""); err == nil {
		t.Error("negative size accepted")
	}
	if left := files(t, s); len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
}

func TestFSPutContextCanceled(t *testing.T) {
	t.Parallel()
	s := newTestFS(t)
	ctx, cancel := context.WithCancel(context.Background())
	body := bytes.Repeat([]byte("x"), 1<<20)
	r := &cancelAfter{r: bytes.NewReader(body), n: 64 << 10, cancel: cancel}
	err := s.Put(ctx, "org/k", r, int64(len(body)), sum(body), "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: %v, want context.Canceled", err)
	}
	if left := files(t, s); len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
}

// cancelAfter cancels its context once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestFSPutRefusesExistingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	first, second := []byte("first"), []byte("second upload")
	if err := s.Put(ctx, "org/k", bytes.NewReader(first), int64(len(first)), sum(first), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "org/k", bytes.NewReader(second), int64(len(second)), sum(second), ""); !errors.Is(err, ErrExists) {
		t.Fatalf("second Put: %v, want ErrExists", err)
	}
	info, err := s.Stat(ctx, "org/k")
	if err != nil || info.SHA256 != sum(first) {
		t.Fatalf("first object changed: %+v, %v", info, err)
	}
	if got := files(t, s); !slices.Equal(got, []string{"org/k", "org/k.sha256"}) {
		t.Fatalf("files = %v", got)
	}
}

// TestFSConcurrentPutsOneWinner races uploads to one key: the link that
// publishes refuses to replace, so exactly one wins whatever the timing.
func TestFSConcurrentPutsOneWinner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			body := bytes.Repeat([]byte{byte(i)}, 64<<10)
			errs[i] = s.Put(ctx, "org/race", bytes.NewReader(body), int64(len(body)), sum(body), "")
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if won >= 0 {
				t.Fatalf("uploads %d and %d both won", won, i)
			}
			won = i
		case !errors.Is(err, ErrExists):
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no upload won")
	}
	info, err := s.Stat(ctx, "org/race")
	if err != nil || info.SHA256 != sum(bytes.Repeat([]byte{byte(won)}, 64<<10)) {
		t.Fatalf("stored object is not the winner's: %+v, %v", info, err)
	}
	for _, f := range files(t, s) {
		if strings.Contains(f, tempPrefix) {
			t.Fatalf("temp file left: %s", f)
		}
	}
}

func TestFSBadKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	for _, tt := range badKeys {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Put(ctx, tt.key, bytes.NewReader(nil), 0, sum(nil), ""); !errors.Is(err, ErrBadKey) {
				t.Errorf("Put: %v, want ErrBadKey", err)
			}
			if _, err := s.Stat(ctx, tt.key); !errors.Is(err, ErrBadKey) {
				t.Errorf("Stat: %v, want ErrBadKey", err)
			}
			if _, _, err := s.Open(ctx, tt.key); !errors.Is(err, ErrBadKey) {
				t.Errorf("Open: %v, want ErrBadKey", err)
			}
			if err := s.Delete(ctx, tt.key); !errors.Is(err, ErrBadKey) {
				t.Errorf("Delete: %v, want ErrBadKey", err)
			}
		})
	}
	if left := files(t, s); len(left) != 0 {
		t.Fatalf("files written for bad keys: %v", left)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(s.Dir()), "etc")); err == nil {
		t.Fatal("a bad key escaped the root")
	}
}

func TestFSStatRecomputesWithoutSidecar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	body := []byte("sidecar-less")
	if err := s.Put(ctx, "org/k", bytes.NewReader(body), int64(len(body)), sum(body), ""); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(s.Dir(), "org", "k"+sidecarSuffix)
	for _, damage := range []func() error{
		func() error { return os.Remove(side) },
		func() error { return os.WriteFile(side, []byte("not a digest"), 0o640) },
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		info, err := s.Stat(ctx, "org/k")
		if err != nil || info.SHA256 != sum(body) || info.Size != int64(len(body)) {
			t.Fatalf("Stat = %+v, %v; want recomputed %s", info, err, sum(body))
		}
	}
}

func TestFSStatMissingObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	body := []byte("x")
	if err := s.Put(ctx, "org/file", bytes.NewReader(body), 1, sum(body), ""); err != nil {
		t.Fatal(err)
	}
	// "org/file/below" runs through a file: ENOTDIR, still "not found".
	for _, key := range []string{"org/none", "none/at/all", "org/file/below", "org"} {
		if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat(%q): %v, want ErrNotFound", key, err)
		}
	}
}

func TestFSList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	keys := []string{"org1/a/x", "org1/a/y", "org1/b/z", "org10/a/x", "org2/q"}
	for _, k := range keys {
		if err := s.Put(ctx, k, bytes.NewReader([]byte(k)), int64(len(k)), sum([]byte(k)), ""); err != nil {
			t.Fatal(err)
		}
	}
	// A dead upload's temp file must not look like a key.
	if err := os.WriteFile(filepath.Join(s.Dir(), "org1", "a", tempPrefix+"123"), []byte("junk"), 0o640); err != nil {
		t.Fatal(err)
	}

	checkList(t, s, keys, listCase{"org1/a/x", []string{"org1/a/x"}}, listCase{"org3/deeper/", nil})
	if err := s.List(ctx, "../", func(string, time.Time) error { return nil }); !errors.Is(err, ErrBadKey) {
		t.Fatalf("List(\"../\"): %v, want ErrBadKey", err)
	}
}

func TestFSRemoveStaleTemp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFS(t)
	body := []byte("kept")
	if err := s.Put(ctx, "org/k", bytes.NewReader(body), int64(len(body)), sum(body), ""); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(s.Dir(), "org", tempPrefix+"old")
	fresh := filepath.Join(s.Dir(), "org", tempPrefix+"fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	n, err := s.RemoveStaleTemp(ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("RemoveStaleTemp = %d, %v; want 1", n, err)
	}
	got := files(t, s)
	want := []string{"org/" + tempPrefix + "fresh", "org/k", "org/k.sha256"}
	if !slices.Equal(got, want) {
		t.Fatalf("files = %v, want %v", got, want)
	}
}

func TestFSPresignPutNotDirect(t *testing.T) {
	t.Parallel()
	s := newTestFS(t)
	if s.Direct() || s.Name() != "fs" {
		t.Fatalf("Name %q Direct %v", s.Name(), s.Direct())
	}
	if _, err := s.PresignPut(context.Background(), "org/k", 1, sum([]byte("x")), "", time.Minute); !errors.Is(err, ErrNotDirect) {
		t.Fatalf("PresignPut: %v, want ErrNotDirect", err)
	}
}

// genBlock is the 1 MiB pattern genReader repeats, made once so that making
// it is not counted against the memory bound.
var genBlock = func() []byte {
	b := make([]byte, 1<<20)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}()

// genReader yields n bytes of a repeating pseudo-random pattern without
// holding them.
type genReader struct{ n, off int64 }

func newGenReader(n int64) *genReader { return &genReader{n: n} }

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	if rem := g.n - g.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n := copy(p, genBlock[g.off%int64(len(genBlock)):])
	g.off += int64(n)
	return n, nil
}

// TestFSPutStreamsLargeBody is a memory bound, not a timing assertion: a
// 64 MiB upload must not be held in memory. It runs without t.Parallel so
// no other test allocates while it measures.
func TestFSPutStreamsLargeBody(t *testing.T) {
	const size = 64 << 20
	const bound = 16 << 20
	h := sha256.New()
	if _, err := io.Copy(h, newGenReader(size)); err != nil {
		t.Fatal(err)
	}
	want := hex.EncodeToString(h.Sum(nil))
	s := newTestFS(t)
	ctx := context.Background()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := s.Put(ctx, "org/big", newGenReader(size), size, want, ""); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	t.Logf("heap %+d KiB, allocated %d KiB", (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>10, (after.TotalAlloc-before.TotalAlloc)>>10)

	if growth := int64(after.HeapAlloc) - int64(before.HeapAlloc); growth > bound {
		t.Errorf("heap grew by %d MiB during a %d MiB Put, want < %d MiB", growth>>20, size>>20, bound>>20)
	}
	// TotalAlloc only grows, so a GC during Put cannot hide a buffered body.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > bound {
		t.Errorf("Put allocated %d MiB for a %d MiB body, want < %d MiB", allocated>>20, size>>20, bound>>20)
	}
	info, err := s.Stat(ctx, "org/big")
	if err != nil || info.Size != size || info.SHA256 != want {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
}
