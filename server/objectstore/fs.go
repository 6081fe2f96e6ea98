package objectstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// FS keeps objects as files under one directory. Workers upload through the
// gateway's PUT route, which calls Put.
//
// An object is published by hard-linking a fully written, fsynced temp file
// from the same directory: readers see the whole object or none, and the link
// fails if the key exists, so two uploads to one key cannot both win. Its
// SHA-256 is cached in a sidecar file (key + ".sha256") written after
// publishing; Stat recomputes the digest when the sidecar is missing.
type FS struct {
	root string
}

const (
	fsDirPerm  = 0o750
	fsFilePerm = 0o640
	tempPrefix = ".tmp-"
)

// NewFS returns a store rooted at dir, creating it (0o750) if needed.
func NewFS(dir string) (*FS, error) {
	if dir == "" {
		return nil, errors.New("objectstore: fs directory is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objectstore: fs directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, fsDirPerm); err != nil {
		return nil, fmt.Errorf("objectstore: create fs directory: %w", err)
	}
	return &FS{root: abs}, nil
}

// Dir returns the root directory.
func (s *FS) Dir() string { return s.root }

func (s *FS) Name() string { return "fs" }
func (s *FS) Direct() bool { return false }

func (s *FS) PresignPut(context.Context, string, int64, string, string, time.Duration) (PresignedPut, error) {
	return PresignedPut{}, ErrNotDirect
}

func (s *FS) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// Put streams r to a temp file beside the target, verifying size and
// SHA-256 as it goes, then fsyncs and links it into place. contentType is
// not stored: the upload session row keeps it.
func (s *FS) Put(ctx context.Context, key string, r io.Reader, size int64, sha256Hex, contentType string) (err error) {
	path, err := s.path(key)
	if err != nil {
		return err
	}
	want, err := parseSHA256(sha256Hex)
	if err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("objectstore: negative size %d", size)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, key)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, fsDirPerm); err != nil {
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}
	// A sidecar without its object is stale (a Delete that crashed halfway):
	// drop it so Stat cannot pair it with the new object before ours lands.
	if err := os.Remove(path + sidecarSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}

	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("objectstore: fs put %s: remove temp file: %w", key, rmErr)
		}
	}()
	if err := f.Chmod(fsFilePerm); err != nil {
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}
	if _, err := io.Copy(f, newVerifier(ctx, r, size, want)); err != nil {
		if errors.Is(err, ErrMismatch) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("objectstore: fs put %s: fsync: %w", key, err)
	}
	cerr := f.Close()
	f = nil
	if cerr != nil {
		return fmt.Errorf("objectstore: fs put %s: %w", key, cerr)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		return fmt.Errorf("objectstore: fs put %s: publish: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("objectstore: fs put %s: %w", key, err)
	}
	// The sidecar only caches the digest; if writing it fails, Stat
	// recomputes, so the upload (already published and verified) stands.
	_ = writeFileAtomic(path+sidecarSuffix, []byte(hex.EncodeToString(want)+"\n"))
	return nil
}

// Stat takes the size from the file and the SHA-256 from the sidecar, or
// recomputes it by reading the file when the sidecar is missing or damaged.
func (s *FS) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	path, err := s.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	fi, err := s.statFile(key, path)
	if err != nil {
		return ObjectInfo{}, err
	}
	info := ObjectInfo{Size: fi.Size(), ModTime: fi.ModTime(), SHA256: readSidecar(path)}
	if info.SHA256 != "" {
		return info, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return ObjectInfo{}, s.openErr(key, err)
	}
	defer f.Close()
	n, sum, err := hashStream(ctx, f)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("objectstore: fs stat %s: %w", key, err)
	}
	info.Size, info.SHA256 = n, sum
	return info, nil
}

// Open returns the file; SHA256 is filled only from the sidecar.
func (s *FS) Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	path, err := s.path(key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, ObjectInfo{}, s.openErr(key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, ObjectInfo{}, fmt.Errorf("objectstore: fs open %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, ObjectInfo{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return f, ObjectInfo{Size: fi.Size(), ModTime: fi.ModTime(), SHA256: readSidecar(path)}, nil
}

// Delete removes the sidecar first, so a crash in between leaves an object
// whose digest is recomputed, never a digest describing a missing object.
// Empty directories stay: removing them would race with a concurrent Put.
func (s *FS) Delete(ctx context.Context, key string) error {
	path, err := s.path(key)
	if err != nil {
		return err
	}
	for _, p := range []string{path + sidecarSuffix, path} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("objectstore: fs delete %s: %w", key, err)
		}
	}
	return nil
}

// List walks the directory holding prefix, skipping temp and sidecar files.
func (s *FS) List(ctx context.Context, prefix string, fn func(key string, modTime time.Time) error) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	start := s.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(s.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // the prefix's directory does not exist, or an entry vanished
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != start {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != start && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(key, sidecarSuffix) || !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while we walked
			}
			return err
		}
		if err := fn(key, fi.ModTime()); err != nil {
			return &fnResult{err}
		}
		return nil
	})
	var r *fnResult
	if errors.As(err, &r) {
		return r.err
	}
	if err != nil {
		return fmt.Errorf("objectstore: fs list %q: %w", prefix, err)
	}
	return nil
}

// fnResult carries List's callback error through WalkDir, so List can
// return it unwrapped.
type fnResult struct{ err error }

func (r *fnResult) Error() string { return "objectstore: list callback" }

// RemoveStaleTemp deletes temp files left by uploads that died mid-stream
// (a killed process never runs its cleanup) once they are older than
// olderThan, and returns how many it removed. The orphan sweeper calls it;
// olderThan must exceed the longest upload.
func (s *FS) RemoveStaleTemp(ctx context.Context, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			return nil
		}
		if err := os.Remove(p); err == nil {
			removed++
		}
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("objectstore: fs remove stale temp files: %w", err)
	}
	return removed, nil
}

func (s *FS) statFile(key, path string) (fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, s.openErr(key, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fi, nil
}

func (s *FS) openErr(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fmt.Errorf("objectstore: fs %s: %w", key, err)
}

// readSidecar returns the cached digest, or "" when it is missing or not a
// well-formed SHA-256.
func readSidecar(path string) string {
	b, err := os.ReadFile(path + sidecarSuffix)
	if err != nil {
		return ""
	}
	sum := strings.TrimSpace(string(b))
	if _, err := parseSHA256(sum); err != nil {
		return ""
	}
	return strings.ToLower(sum)
}

// writeFileAtomic writes a small file through a synced temp file and rename.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), tempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(fsFilePerm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// syncDir makes a new directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) /* some filesystems cannot fsync a directory */ {
		return fmt.Errorf("fsync directory: %w", err)
	}
	return nil
}
