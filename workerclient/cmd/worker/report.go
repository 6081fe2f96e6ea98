package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Every scanner job ends by uploading report.json, an artifact of its
// attempt that summarises the records the job emitted.

const (
	reportName        = "report.json"
	reportContentType = "application/json"
)

// Report is the content of report.json.
type Report struct {
	Plugin    string     `json:"plugin"`
	TaskID    uuid.UUID  `json:"task_id"`
	AttemptID uuid.UUID  `json:"attempt_id"`
	ScanID    *uuid.UUID `json:"scan_id,omitempty"`
	ScanJobID *uuid.UUID `json:"scan_job_id,omitempty"`
	// Records is how many records the job emitted: ByKind counts them by
	// kind (asset, threat, data), ByType by kind and then asset type.
	Records int                       `json:"records"`
	ByKind  map[string]int            `json:"by_kind"`
	ByType  map[string]map[string]int `json:"by_type"`
	// Severities counts the threats by severity.
	Severities map[string]int `json:"threat_severities"`
}

// tally counts the records an Emitter delivered.
type tally struct {
	mu     sync.Mutex
	report Report
}

func newTally(c *Call) *tally {
	r := Report{
		Plugin: c.Plugin, ByKind: map[string]int{}, ByType: map[string]map[string]int{}, Severities: map[string]int{},
	}
	if t := c.Task; t != nil {
		r.TaskID, r.AttemptID, r.ScanID, r.ScanJobID = t.ID, t.AttemptID, t.ScanID, t.ScanJobID
	}
	return &tally{report: r}
}

// wrap counts what emit accepted.
func (t *tally) wrap(emit Emitter) Emitter {
	return func(ctx context.Context, records ...apiclient.ResultRecord) error {
		if err := emit(ctx, records...); err != nil {
			return err
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, r := range records {
			kind := string(r.Kind)
			t.report.Records++
			t.report.ByKind[kind]++
			if r.Asset != nil {
				if t.report.ByType[kind] == nil {
					t.report.ByType[kind] = map[string]int{}
				}
				t.report.ByType[kind][r.Asset.Type]++
			}
			if r.Kind == apiclient.ResultRecordKindThreat && r.Severity != nil {
				t.report.Severities[string(*r.Severity)]++
			}
		}
		return nil
	}
}

func (t *tally) snapshot() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.report
	r.ByKind, r.Severities = cloneCounts(r.ByKind), cloneCounts(r.Severities)
	r.ByType = make(map[string]map[string]int, len(t.report.ByType))
	for k, v := range t.report.ByType {
		r.ByType[k] = cloneCounts(v)
	}
	return r
}

func cloneCounts(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// runScanner runs a scanner plugin, counting what it emits, and uploads its
// report once it succeeded. A report that cannot be uploaded is logged, and
// does not fail a scan whose results were delivered, unless the attempt
// itself is over (cancelled, lease lost).
func runScanner(ctx context.Context, run Plugin, c *Call) error {
	t := newTally(c)
	c.Emit = t.wrap(c.Emit)
	if err := run(ctx, c); err != nil {
		c.Printf("%s failed: %v", c.Plugin, err)
		return err
	}
	report := t.snapshot()
	c.Printf("%s done: %d records emitted", c.Plugin, report.Records)
	if c.Upload == nil {
		return nil
	}
	body, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	file, err := c.Upload(ctx, reportName, reportContentType, bytes.NewReader(append(body, '\n')))
	switch {
	case err == nil:
		c.Log.Info("report uploaded", "file_id", file.Id, "records", report.Records)
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(err, workerclient.ErrLeaseLost):
		return err
	}
	c.Log.Warn("report could not be uploaded", "error", err)
	c.Printf("%s could not be uploaded: %v", reportName, err)
	return nil
}
