//go:build devstack

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// devLock is the state directory's owner: an flock on <state>/dev.lock,
// held for the life of `gateway dev`. The kernel drops it when the process
// dies however it dies, so a lock that can be taken means nobody else runs
// this directory and whatever PostgreSQL is found there was left behind.
type devLock struct {
	f *os.File
}

// errDevRunning is what a second `gateway dev` on the same state directory
// returns, having touched nothing.
type errDevRunning struct {
	rec  devRecord
	path string
}

func (e errDevRunning) Error() string {
	url := e.rec.URL
	if url == "" {
		url = "(still starting)"
	}
	env := e.rec.EnvFile
	if env == "" {
		env = filepath.Join(filepath.Dir(e.path), "env")
	}
	return fmt.Sprintf("gateway dev is already running (pid %d) at %s; settings in %s (state directory %s)",
		e.rec.PID, url, env, filepath.Dir(e.path))
}

// lockDevState takes the lock of state directory dir, creating the
// directory if needed, or returns errDevRunning when another process holds
// it.
func lockDevState(dir string) (*devLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "dev.lock")
	// No O_TRUNC: opening must not clear the holder's record.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			var rec devRecord
			if b, err := os.ReadFile(path); err == nil {
				_ = json.Unmarshal(b, &rec)
			}
			return nil, errDevRunning{rec: rec, path: path}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &devLock{f: f}
	if err := l.record(devRecord{PID: os.Getpid()}); err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// record replaces the holder's record in the lock file.
func (l *devLock) record(rec devRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err = l.f.WriteAt(append(b, '\n'), 0)
	return err
}

// release clears the record and drops the lock. The file stays: removing it
// would let a third process lock a fresh inode while a second still holds
// the old one.
func (l *devLock) release() {
	_ = l.f.Truncate(0)
	_ = l.f.Close()
}
