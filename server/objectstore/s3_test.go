package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

const testBucket = "artifacts"

type s3Bundle struct {
	srv     *httptest.Server
	backend *s3mem.Backend
	cfg     S3Config
	// worker is a plain HTTP client, as a worker in any language would have.
	worker *http.Client
}

// setupS3 serves an in-process gofakes3 on loopback with the bucket created
// through the fake's backend. gofakes3 checks no signatures or expiry.
func setupS3(t *testing.T, trust bool) (*S3, *s3Bundle) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(testBucket); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	srv := httptest.NewServer(faker.Server())
	t.Cleanup(srv.Close)
	cfg := S3Config{
		Endpoint:            srv.Listener.Addr().String(),
		Region:              "us-east-1",
		Bucket:              testBucket,
		AccessKeyID:         "gateway",
		SecretAccessKey:     "gateway-secret",
		PathStyle:           true,
		TrustStoreChecksums: trust,
	}
	s, err := NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, &s3Bundle{srv: srv, backend: backend, cfg: cfg, worker: srv.Client()}
}

// upload does what a worker does with a PresignedPut.
func (b *s3Bundle) upload(t *testing.T, p PresignedPut, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(p.Method, p.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	resp, err := b.worker.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestNewS3(t *testing.T) {
	t.Parallel()
	_, b := setupS3(t, false)
	ctx := context.Background()

	missing := b.cfg
	missing.Bucket = "no-such-bucket"
	if _, err := NewS3(ctx, missing); err == nil || !strings.Contains(err.Error(), `"no-such-bucket" does not exist`) {
		t.Fatalf("missing bucket: %v", err)
	}
	if ok, _ := b.backend.BucketExists("no-such-bucket"); ok {
		t.Fatal("NewS3 created the bucket")
	}

	// An explicit http:// wins over UseSSL (the gateway's flag defaults to TLS).
	withScheme := b.cfg
	withScheme.Endpoint, withScheme.UseSSL = "http://"+b.cfg.Endpoint, true
	if _, err := NewS3(ctx, withScheme); err != nil {
		t.Fatalf("endpoint with scheme: %v", err)
	}
	for name, mutate := range map[string]func(*S3Config){
		"no bucket":          func(c *S3Config) { c.Bucket = "" },
		"no endpoint":        func(c *S3Config) { c.Endpoint = "" },
		"no credentials":     func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey = "", "" },
		"ftp scheme":         func(c *S3Config) { c.Endpoint = "ftp://" + c.Endpoint },
		"endpoint with path": func(c *S3Config) { c.Endpoint = "http://" + c.Endpoint + "/bucket" },
	} {
		cfg := b.cfg
		mutate(&cfg)
		if _, err := NewS3(ctx, cfg); err == nil {
			t.Errorf("%s: NewS3 succeeded", name)
		}
	}
}

func TestS3PresignedRoundTrip(t *testing.T) {
	t.Parallel()
	s, b := setupS3(t, false)
	ctx := context.Background()
	if !s.Direct() || s.Name() != "s3" {
		t.Fatalf("Name %q Direct %v", s.Name(), s.Direct())
	}
	body := bytes.Repeat([]byte("scan output\n"), 5000)
	key := NewKey("org/0191b3c4-0000-7000-8000-000000000001")

	p, err := s.PresignPut(ctx, key, int64(len(body)), sum(body), "text/plain", 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(body)
	wantHeaders := map[string]string{
		"Content-Type":          "text/plain",
		"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(digest[:]),
	}
	if p.Method != http.MethodPut || !maps(p.Headers, wantHeaders) {
		t.Fatalf("PresignPut = %s %v, want PUT %v", p.Method, p.Headers, wantHeaders)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if got := q.Get("X-Amz-SignedHeaders"); got != "content-length;content-type;host;x-amz-checksum-sha256" {
		t.Errorf("signed headers %q: length, type and checksum must be bound", got)
	}
	if got := q.Get("X-Amz-Expires"); got != "900" {
		t.Errorf("X-Amz-Expires = %q, want 900", got)
	}
	if strings.Contains(p.URL, b.cfg.SecretAccessKey) {
		t.Fatal("the URL leaks the secret key")
	}

	if resp := b.upload(t, p, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("worker PUT: %s", resp.Status)
	}

	info, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(body)) || info.SHA256 != sum(body) || info.ModTime.IsZero() {
		t.Fatalf("Stat = %+v, want size %d sha256 %s", info, len(body), sum(body))
	}

	checkOpenThenDelete(t, s, key, body)
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestS3FakeAcceptsWrongUploads records what gofakes3 does not check, and
// that Stat reveals every such upload anyway: the gateway verifies at
// commit, so a store that checks nothing cannot make it accept wrong bytes.
func TestS3FakeAcceptsWrongUploads(t *testing.T) {
	t.Parallel()
	declared := bytes.Repeat([]byte("A"), 4096)
	tests := []struct {
		name string
		body []byte
		// mangle alters the presigned URL before the worker uses it.
		mangle func(q url.Values)
	}{
		{name: "other bytes, same length", body: bytes.Repeat([]byte("B"), 4096)},
		{name: "longer than signed", body: bytes.Repeat([]byte("A"), 5000)},
		{name: "shorter than signed", body: declared[:100]},
		{name: "forged signature", body: bytes.Repeat([]byte("C"), 4096),
			mangle: func(q url.Values) { q.Set("X-Amz-Signature", strings.Repeat("0", 64)) }},
		{name: "expired long ago", body: bytes.Repeat([]byte("D"), 4096),
			mangle: func(q url.Values) { q.Set("X-Amz-Date", "20010101T000000Z"); q.Set("X-Amz-Expires", "1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, b := setupS3(t, false)
			key := NewKey("org/x")
			p, err := s.PresignPut(ctx, key, int64(len(declared)), sum(declared), "application/octet-stream", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if tt.mangle != nil {
				u, _ := url.Parse(p.URL)
				q := u.Query()
				tt.mangle(q)
				u.RawQuery = q.Encode()
				p.URL = u.String()
			}
			// gofakes3 stores it: it checks neither x-amz-checksum-sha256,
			// nor the signed Content-Length, nor the signature or expiry.
			if resp := b.upload(t, p, tt.body); resp.StatusCode != http.StatusOK {
				t.Fatalf("gofakes3 refused the upload (%s); it has started checking, update the report", resp.Status)
			}
			info, err := s.Stat(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if info.SHA256 != sum(tt.body) || info.Size != int64(len(tt.body)) {
				t.Fatalf("Stat = %+v, want the stored bytes' size %d and sha256 %s", info, len(tt.body), sum(tt.body))
			}
			if info.SHA256 == sum(declared) {
				t.Fatal("Stat reported the declared digest for other bytes")
			}
		})
	}
}

// TestS3FakeEchoesUnverifiedChecksum shows why TrustStoreChecksums is off by
// default: gofakes3 keeps the uploader's x-amz-checksum-sha256 as metadata
// and returns it on HEAD, unverified.
func TestS3FakeEchoesUnverifiedChecksum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setupS3(t, true)
	declared, sent := []byte("declared bytes"), []byte("other bytes!!!")
	key := NewKey("org/x")
	p, err := s.PresignPut(ctx, key, int64(len(declared)), sum(declared), "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resp := b.upload(t, p, sent); resp.StatusCode != http.StatusOK {
		t.Fatalf("worker PUT: %s", resp.Status)
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != sum(declared) {
		t.Fatalf("trusting Stat = %s; gofakes3 no longer echoes the claimed checksum (declared %s, stored %s)",
			info.SHA256, sum(declared), sum(sent))
	}

	untrusting := &S3{client: s.client, bucket: s.bucket}
	info, err = untrusting.Stat(ctx, key)
	if err != nil || info.SHA256 != sum(sent) {
		t.Fatalf("untrusting Stat = %+v, %v; want sha256 %s", info, err, sum(sent))
	}
}

func TestS3Put(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"small", []byte("hello")},
		// Past minio-go's 16 MiB multipart threshold: still one PUT, so
		// one full-object checksum covers it.
		{"17 MiB", bytes.Repeat([]byte("0123456789abcdef"), 17<<16)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := setupS3(t, false)
			key := NewKey("org/x")
			if err := s.Put(ctx, key, bytes.NewReader(tt.body), int64(len(tt.body)), sum(tt.body), "text/plain"); err != nil {
				t.Fatal(err)
			}
			info, err := s.Stat(ctx, key)
			if err != nil || info.Size != int64(len(tt.body)) || info.SHA256 != sum(tt.body) {
				t.Fatalf("Stat = %+v, %v", info, err)
			}
			rc, _, err := s.Open(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, tt.body) {
				t.Fatalf("Open: %d bytes, %v", len(got), err)
			}
			other := []byte("second")
			if err := s.Put(ctx, key, bytes.NewReader(other), int64(len(other)), sum(other), ""); !errors.Is(err, ErrExists) {
				t.Fatalf("second Put: %v, want ErrExists", err)
			}
		})
	}
}

// TestS3PutRejectsWrongBody: gofakes3 verifies nothing, so this shows the
// gateway's own streaming check keeps wrong bodies out of the store.
func TestS3PutRejectsWrongBody(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789abcdef"), 8<<10)
	tests := []struct {
		name    string
		r       io.Reader
		size    int64
		sha     string
		wantErr error
	}{
		{"short", bytes.NewReader(body[:len(body)-1]), int64(len(body)), sum(body), ErrMismatch},
		{"long", bytes.NewReader(append(append([]byte{}, body...), 'x')), int64(len(body)), sum(body), ErrTooLarge},
		{"wrong checksum", bytes.NewReader(body), int64(len(body)), sum(body[1:]), ErrMismatch},
		{"empty with wrong checksum", bytes.NewReader(nil), 0, sum(body), ErrMismatch},
		{"empty but not", bytes.NewReader(body), 0, sum(nil), ErrTooLarge},
		{"reader error", io.MultiReader(bytes.NewReader(body[:100]), errReader{}), int64(len(body)), sum(body), errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, b := setupS3(t, false)
			key := NewKey("org/x")
			if err := s.Put(ctx, key, tt.r, tt.size, tt.sha, ""); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Put: %v, want %v", err, tt.wantErr)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Stat after failed Put: %v, want ErrNotFound", err)
			}
			list, err := b.backend.ListBucket(testBucket, nil, gofakes3.ListBucketPage{})
			if err != nil || len(list.Contents) != 0 {
				t.Fatalf("bucket holds %d objects after a failed Put (%v)", len(list.Contents), err)
			}
			// The session may retry with the right bytes.
			if err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), sum(body), ""); err != nil {
				t.Fatalf("retry: %v", err)
			}
		})
	}
}

func TestS3BadArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setupS3(t, false)
	for _, tt := range badKeys {
		if _, err := s.PresignPut(ctx, tt.key, 0, sum(nil), "", time.Minute); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: PresignPut: %v, want ErrBadKey", tt.name, err)
		}
		if err := s.Put(ctx, tt.key, bytes.NewReader(nil), 0, sum(nil), ""); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: Put: %v, want ErrBadKey", tt.name, err)
		}
		if _, err := s.Stat(ctx, tt.key); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: Stat: %v, want ErrBadKey", tt.name, err)
		}
		if err := s.Delete(ctx, tt.key); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: Delete: %v, want ErrBadKey", tt.name, err)
		}
	}
	for name, call := range map[string]func() error{
		"bad sha256":       func() error { _, err := s.PresignPut(ctx, "org/k", 1, "xyz", "", time.Minute); return err },
		"negative size":    func() error { _, err := s.PresignPut(ctx, "org/k", -1, sum(nil), "", time.Minute); return err },
		"over 5 GiB":       func() error { _, err := s.PresignPut(ctx, "org/k", 5<<30+1, sum(nil), "", time.Minute); return err },
		"ttl over 7 days":  func() error { _, err := s.PresignPut(ctx, "org/k", 1, sum(nil), "", 8*24*time.Hour); return err },
		"put over 5 GiB":   func() error { return s.Put(ctx, "org/k", bytes.NewReader(nil), 5<<30+1, sum(nil), "") },
		"put bad checksum": func() error { return s.Put(ctx, "org/k", bytes.NewReader(nil), 0, "", "") },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestS3List(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setupS3(t, false)
	keys := []string{"org1/a/x", "org1/a/y", "org1/b/z", "org10/a/x", "org2/q"}
	for _, k := range keys {
		if err := s.Put(ctx, k, strings.NewReader(k), int64(len(k)), sum([]byte(k)), ""); err != nil {
			t.Fatal(err)
		}
	}
	checkList(t, s, keys)
}
