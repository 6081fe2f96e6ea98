package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// The scanner plugins are driven directly, with a recorder in place of
// LeasedTask.Emit, against loopback addresses only.

// record is an emitted record, flattened for assertions.
type record struct {
	Kind       string
	Type       string
	Value      string
	ExternalID string
	Severity   string
	Details    map[string]any
}

// recorder is an Emitter that keeps what it is given; it fails with err when
// set.
type recorder struct {
	mu      sync.Mutex
	records []record
	calls   int
	err     error
	out     lockedBuffer // the attempt's log
}

func (r *recorder) emit(_ context.Context, recs ...apiclient.ResultRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.err != nil {
		return r.err
	}
	for _, rr := range recs {
		rec := record{Kind: string(rr.Kind)}
		if rr.Asset != nil {
			rec.Type, rec.Value = rr.Asset.Type, rr.Asset.Value
		}
		if rr.ExternalId != nil {
			rec.ExternalID = *rr.ExternalId
		}
		if rr.Severity != nil {
			rec.Severity = string(*rr.Severity)
		}
		if rr.Details != nil {
			if err := json.Unmarshal(*rr.Details, &rec.Details); err != nil {
				panic(err)
			}
		}
		r.records = append(r.records, rec)
	}
	return nil
}

// sorted returns the records by kind, type, value and external id.
func (r *recorder) sorted() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := slices.Clone(r.records)
	slices.SortStableFunc(rs, func(a, b record) int {
		return strings.Compare(a.Kind+"\x00"+a.Type+"\x00"+a.Value+"\x00"+a.ExternalID,
			b.Kind+"\x00"+b.Type+"\x00"+b.Value+"\x00"+b.ExternalID)
	})
	return rs
}

func newCall(t *testing.T, input string, targets []string, assets []Asset, rec *recorder) *Call {
	t.Helper()
	if input != "" {
		require.True(t, json.Valid([]byte(input)), input)
	}
	return &Call{
		Task:    &workerclient.LeasedTask{Type: "scanner_plugin"},
		Input:   json.RawMessage(input),
		Targets: targets,
		Assets:  assets,
		Emit:    rec.emit,
		Out:     &rec.out,
		Log:     slog.New(slog.DiscardHandler),
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
