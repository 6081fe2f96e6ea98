package main

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/workerclient/workerclienttest"
)

// The scanner plugins are driven directly, on tasks built by
// workerclienttest whose Recorder keeps what they emit, log and upload,
// against loopback addresses only.

// newCall is the Call a worker would build for a scanner_plugin task with
// this input, targets and assets (see callFor), and the Recorder of its task.
func newCall(t *testing.T, input string, targets []string, assets []Asset) (*Call, *workerclienttest.Recorder) {
	t.Helper()
	payload := map[string]any{"plugin": "echo", "targets": targets, "assets": assets}
	if input != "" {
		require.True(t, json.Valid([]byte(input)), input)
		payload["input"] = json.RawMessage(input)
	}
	task, rec := workerclienttest.NewTask(t, workerclienttest.TaskOptions{Type: "scanner_plugin", Payload: payload})
	_, c, err := callFor(task, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	c.Plugin = "" // the tests name the plugin they run when it matters
	return c, rec
}

// call is newCall for tests that do not look at what was emitted.
func call(t *testing.T, input string, targets []string, assets []Asset) *Call {
	t.Helper()
	c, _ := newCall(t, input, targets, assets)
	return c
}

// failingCall is a call whose Emit fails with err.
func failingCall(t *testing.T, err error, input string, targets []string, assets []Asset) *Call {
	t.Helper()
	c, rec := newCall(t, input, targets, assets)
	rec.FailEmit(err)
	return c
}

// record is an emitted record, flattened for assertions.
type record struct {
	Kind       string
	Type       string
	Value      string
	ExternalID string
	Severity   string
	Details    map[string]any
}

// records returns what rec kept, flattened, by kind, type, value and
// external id: the assets and threats, without the certificate a url's
// details name or the certificate assets (see certificates), and without
// edges (see edges).
func records(rec *workerclienttest.Recorder) []record {
	var rs []record
	for _, rr := range rec.Records() {
		if rr.Kind == "edge" || rr.Asset != nil && rr.Asset.Type == "certificate" {
			continue
		}
		r := record{Kind: string(rr.Kind)}
		if rr.Asset != nil {
			r.Type, r.Value = rr.Asset.Type, rr.Asset.Value
		}
		if rr.ExternalId != nil {
			r.ExternalID = *rr.ExternalId
		}
		if rr.Severity != nil {
			r.Severity = string(*rr.Severity)
		}
		if rr.Details != nil {
			if err := json.Unmarshal(*rr.Details, &r.Details); err != nil {
				panic(err)
			}
			delete(r.Details, "certificate")
		}
		rs = append(rs, r)
	}
	slices.SortStableFunc(rs, func(a, b record) int {
		return strings.Compare(a.Kind+"\x00"+a.Type+"\x00"+a.Value+"\x00"+a.ExternalID,
			b.Kind+"\x00"+b.Type+"\x00"+b.Value+"\x00"+b.ExternalID)
	})
	return rs
}

// edges returns the edge records rec kept, as "type:value relation
// type:value", sorted.
func edges(rec *workerclienttest.Recorder) []string {
	var es []string
	for _, rr := range rec.Records() {
		if rr.Kind == "edge" {
			es = append(es, rr.Asset.Type+":"+rr.Asset.Value+" "+string(*rr.Relation)+" "+rr.Target.Type+":"+rr.Target.Value)
		}
	}
	slices.Sort(es)
	return es
}
