//go:build devstack

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	pid := "pid " + strconv.Itoa(e.rec.PID)
	if e.rec.PID == 0 {
		pid = "pid unknown"
	}
	url := e.rec.URL
	if url == "" {
		url = "(still starting)"
	}
	env := e.rec.EnvFile
	if env == "" {
		env = filepath.Join(filepath.Dir(e.path), "env")
	}
	return fmt.Sprintf("gateway dev is already running (%s) at %s; settings in %s (state directory %s)",
		pid, url, env, filepath.Dir(e.path))
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
				// The first value: see record.
				_ = json.NewDecoder(bytes.NewReader(b)).Decode(&rec)
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

// record replaces the holder's record in the lock file. Written before the
// truncation, so that a reader always finds a whole record first.
func (l *devLock) record(rec devRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return err
	}
	return l.f.Truncate(int64(len(b)))
}

// release clears the record and drops the lock. The file stays: removing it
// would let a third process lock a fresh inode while a second still holds
// the old one.
func (l *devLock) release() {
	_ = l.f.Truncate(0)
	_ = l.f.Close()
}
