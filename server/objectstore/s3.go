package objectstore

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config locates a bucket in an S3-compatible store.
type S3Config struct {
	// Endpoint is host[:port] ("s3.eu-west-1.amazonaws.com",
	// "minio.internal:9000"), reached with TLS when UseSSL is set. A URL
	// ("http://minio.internal:9000") is accepted too: its scheme then
	// decides TLS, whatever UseSSL says.
	Endpoint string
	// Region; leave empty to ask the store (one extra request per bucket).
	Region string
	Bucket string
	// The gateway's credentials. Workers never see them: they get presigned
	// URLs.
	AccessKeyID, SecretAccessKey string
	UseSSL                       bool
	// PathStyle addresses the bucket as endpoint/bucket/key (MinIO, most
	// self-hosted stores); otherwise the client picks, virtual-host style for
	// AWS.
	PathStyle bool
	// TrustStoreChecksums lets Stat take the SHA-256 from the store's
	// x-amz-checksum-sha256 instead of reading the whole object. Set it only
	// for stores that verify that header on PUT (AWS S3, MinIO); others keep
	// whatever value the uploader sent (gofakes3 does), and trusting them
	// would let a worker commit bytes that do not match their digest.
	TrustStoreChecksums bool
}

// S3 keeps objects in one bucket of an S3-compatible store. Workers upload
// with presigned PUTs bound to the exact length and SHA-256.
type S3 struct {
	client *minio.Client
	bucket string
	trust  bool
}

// maxS3PutSize is the largest single PUT S3 accepts. Presigned uploads and
// Put both use one PUT, so the whole object is covered by one
// x-amz-checksum-sha256 (multipart uploads only get composite checksums).
const maxS3PutSize = 5 << 30

// NewS3 connects to the store and checks that the bucket exists; it never
// creates buckets.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("objectstore: s3 bucket is empty")
	}
	host, secure, err := s3Endpoint(cfg.Endpoint, cfg.UseSSL)
	if err != nil {
		return nil, err
	}
	if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, errors.New("objectstore: s3 access key id and secret access key are required (presigned URLs are signed with them)")
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		// Needed to send our own x-amz-checksum-sha256 with PutObject;
		// no trailers are sent when a checksum is given up front.
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, fmt.Errorf("objectstore: s3 client for %s: %w", host, err)
	}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("objectstore: s3 check bucket %q at %s: %w", cfg.Bucket, host, err)
	}
	if !ok {
		return nil, fmt.Errorf("objectstore: s3 bucket %q does not exist at %s; create it first", cfg.Bucket, host)
	}
	return &S3{client: client, bucket: cfg.Bucket, trust: cfg.TrustStoreChecksums}, nil
}

func s3Endpoint(endpoint string, useSSL bool) (host string, secure bool, err error) {
	if endpoint == "" {
		return "", false, errors.New("objectstore: s3 endpoint is empty")
	}
	if !strings.Contains(endpoint, "://") {
		return endpoint, useSSL, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, fmt.Errorf("objectstore: s3 endpoint %q: %w", endpoint, err)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", false, fmt.Errorf("objectstore: s3 endpoint %q must be host[:port] or scheme://host[:port]", endpoint)
	}
	// An explicit scheme is the operator's word on TLS and outranks UseSSL.
	switch u.Scheme {
	case "https":
		return u.Host, true, nil
	case "http":
		return u.Host, false, nil
	}
	return "", false, fmt.Errorf("objectstore: s3 endpoint %q: scheme must be http or https", endpoint)
}

func (s *S3) Name() string { return "s3" }
func (s *S3) Direct() bool { return true }

// PresignPut signs Content-Length, Content-Type and x-amz-checksum-sha256
// into the URL: a store that checks signatures refuses any other length or
// type, and one that verifies checksums refuses other bytes. Stat still
// reads the truth, because not every S3-compatible store does both.
func (s *S3) PresignPut(ctx context.Context, key string, size int64, sha256Hex, contentType string, ttl time.Duration) (PresignedPut, error) {
	if err := checkKey(key); err != nil {
		return PresignedPut{}, err
	}
	want, err := parseSHA256(sha256Hex)
	if err != nil {
		return PresignedPut{}, err
	}
	if err := checkS3Size(size); err != nil {
		return PresignedPut{}, err
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	sum := base64.StdEncoding.EncodeToString(want)
	signed := http.Header{}
	signed.Set("Content-Length", strconv.FormatInt(size, 10))
	signed.Set("Content-Type", contentType)
	signed.Set("X-Amz-Checksum-Sha256", sum)
	u, err := s.client.PresignHeader(ctx, http.MethodPut, s.bucket, key, ttl, nil, signed)
	if err != nil {
		return PresignedPut{}, fmt.Errorf("objectstore: s3 presign %s: %w", key, err)
	}
	return PresignedPut{
		Method: http.MethodPut,
		URL:    u.String(),
		Headers: map[string]string{
			"Content-Type":          contentType,
			"x-amz-checksum-sha256": sum,
		},
	}, nil
}

func checkS3Size(size int64) error {
	if size < 0 {
		return fmt.Errorf("objectstore: negative size %d", size)
	}
	if size > maxS3PutSize {
		return fmt.Errorf("objectstore: %d bytes is more than one S3 PUT takes (%d)", size, int64(maxS3PutSize))
	}
	return nil
}

// Put sends one PUT with x-amz-checksum-sha256 and If-None-Match: *. The body
// passes through a verifier that withholds its last bytes unless the whole
// body is right, so even a store that checks neither checksum nor length
// never receives a complete wrong body.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, sha256Hex, contentType string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	want, err := parseSHA256(sha256Hex)
	if err != nil {
		return err
	}
	if err := checkS3Size(size); err != nil {
		return err
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	// Conditional PUTs are recent in S3 and not universal among compatible
	// stores; the HEAD keeps the common case right where they are ignored.
	if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, key)
	} else if !isNotFound(err) {
		return fmt.Errorf("objectstore: s3 put %s: %w", key, err)
	}

	v := newVerifier(ctx, r, size, want)
	var body io.Reader = v
	if size == 0 {
		// An empty body may never be read by the HTTP client; prove it first.
		if _, err := v.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			return err
		}
		body = bytes.NewReader(nil)
	}
	opts := minio.PutObjectOptions{
		ContentType:      contentType,
		DisableMultipart: true,
		UserMetadata:     map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(want)},
	}
	// Over plain HTTP minio-go signs the body in aws-chunked encoding, which
	// for an empty body goes out as Transfer-Encoding: chunked with no
	// Content-Length, and S3 answers MissingContentLength. Nothing to sign.
	opts.DisableContentSha256 = size == 0
	opts.SetMatchETagExcept("*")
	_, err = s.client.PutObject(ctx, s.bucket, key, body, size, opts)
	done, verr := v.outcome()
	if verr != nil {
		// The store cannot have the object: its last bytes were withheld.
		return verr
	}
	if err != nil {
		if isPreconditionFailed(err) {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		return fmt.Errorf("objectstore: s3 put %s: %w", key, err)
	}
	if !done {
		// The client finished without reading the whole body; what the
		// store holds is unproven, so it goes.
		if derr := s.Delete(context.WithoutCancel(ctx), key); derr != nil {
			return fmt.Errorf("%w: upload of %s ended early, and removing it failed: %w", ErrMismatch, key, derr)
		}
		return fmt.Errorf("%w: upload of %s ended early", ErrMismatch, key)
	}
	return nil
}

// Stat uses the store's own SHA-256 when TrustStoreChecksums is set and the
// store reports a full-object one; otherwise it reads the object and hashes
// it.
func (s *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	if s.trust {
		oi, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{Checksum: true})
		if err != nil {
			return ObjectInfo{}, s.err("stat", key, err)
		}
		if sum, ok := storedSHA256(oi); ok {
			return ObjectInfo{Size: oi.Size, SHA256: sum, ModTime: oi.LastModified}, nil
		}
	}
	// Reading first lets the GET answer for existence and metadata too;
	// asking Stat first would cost a HEAD.
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s.err("stat", key, err)
	}
	defer obj.Close()
	n, sum, err := hashStream(ctx, obj)
	if err != nil {
		return ObjectInfo{}, s.err("stat", key, err)
	}
	oi, err := obj.Stat()
	if err != nil {
		return ObjectInfo{}, s.err("stat", key, err)
	}
	return ObjectInfo{Size: n, SHA256: sum, ModTime: oi.LastModified}, nil
}

// Open streams the object; SHA256 is filled only when TrustStoreChecksums
// is set and the store reports one.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, ObjectInfo{}, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{Checksum: s.trust})
	if err != nil {
		return nil, ObjectInfo{}, s.err("open", key, err)
	}
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, ObjectInfo{}, s.err("open", key, err)
	}
	info := ObjectInfo{Size: oi.Size, ModTime: oi.LastModified}
	if s.trust {
		info.SHA256, _ = storedSHA256(oi)
	}
	return obj, info, nil
}

func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("objectstore: s3 delete %s: %w", key, err)
	}
	return nil
}

func (s *S3) List(ctx context.Context, prefix string, fn func(key string, modTime time.Time) error) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("objectstore: s3 list %q: %w", prefix, oi.Err)
		}
		if err := fn(oi.Key, oi.LastModified); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (s *S3) err(op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fmt.Errorf("objectstore: s3 %s %s: %w", op, key, err)
}

// storedSHA256 returns the store's full-object SHA-256 as hex. Composite
// (multipart) checksums are digests of part digests and do not count.
func storedSHA256(oi minio.ObjectInfo) (string, bool) {
	if oi.ChecksumSHA256 == "" || strings.EqualFold(oi.ChecksumMode, "COMPOSITE") {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(oi.ChecksumSHA256)
	if err != nil || len(b) != 32 {
		return "", false
	}
	return hex.EncodeToString(b), true
}

func isNotFound(err error) bool {
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		return false
	}
	return er.Code == "NoSuchKey" || (er.StatusCode == http.StatusNotFound && er.Code != "NoSuchBucket")
}

func isPreconditionFailed(err error) bool {
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		return false
	}
	// 409 ConditionalRequestConflict: AWS's answer to a concurrent
	// conditional PUT of the same key.
	return er.StatusCode == http.StatusPreconditionFailed || er.Code == "PreconditionFailed" ||
		er.Code == "ConditionalRequestConflict"
}
