package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/worker-gateway/gateway/workerclient"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Call is one run of a plugin: the task, its decoded input, the scan's
// targets and the assets it found so far, where to send results, the
// attempt's log and a logger that names the attempt.
type Call struct {
	Task    *workerclient.LeasedTask
	Plugin  string
	Input   json.RawMessage
	Targets []string
	Assets  []Asset
	// Emit sends result records: the task's LeasedTask.Emit in a worker,
	// a recorder in tests.
	Emit Emitter
	// Upload stores an artifact of the attempt: the task's
	// LeasedTask.UploadArtifact in a worker.
	Upload Uploader
	// Out is the attempt's log as the gateway keeps it, for the task's
	// owner to read (LeasedTask.Log); nil discards. Log is the worker's
	// own log.
	Out io.Writer
	Log *slog.Logger
}

// Printf writes a line to the attempt's log (Out).
func (c *Call) Printf(format string, args ...any) {
	if c.Out == nil {
		return
	}
	line := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	_, _ = io.WriteString(c.Out, line)
}

// Emitter sends result records (see workerclient.LeasedTask.Emit).
type Emitter func(ctx context.Context, records ...apiclient.ResultRecord) error

// Uploader stores an artifact (see workerclient.LeasedTask.UploadArtifact).
type Uploader func(ctx context.Context, name, contentType string, r io.Reader) (*apiclient.File, error)

// Asset is an asset an earlier job of the scan found, as the scan passes it
// in the payload.
type Asset struct {
	Type    string          `json:"type"`
	Value   string          `json:"value"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Plugin runs one scanner_plugin task. Its error decides the attempt's
// outcome (see workerclient.Permanent and workerclient.Retryable).
type Plugin func(ctx context.Context, c *Call) error

// plugins is the registry of what this worker can run; its names are the
// "plugins" capability the worker advertises.
var plugins = map[string]Plugin{
	"echo":        echoPlugin,
	"sleep":       sleepPlugin,
	"fail":        failPlugin,
	"dns-resolve": dnsResolvePlugin,
	"tcp-connect": tcpConnectPlugin,
	"http-probe":  httpProbePlugin,
}

func pluginNames() []string {
	names := make([]string, 0, len(plugins))
	for name := range plugins {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// scannerPayload is the payload of a scanner_plugin task. A scan adds its
// targets and the assets its earlier jobs found.
type scannerPayload struct {
	Plugin  string          `json:"plugin"`
	Input   json.RawMessage `json:"input"`
	Targets []string        `json:"targets"`
	Assets  []Asset         `json:"assets"`
}

// scanners are the plugins that scan: each of their jobs also uploads a
// report.json summarising the records it emitted.
var scanners = map[string]bool{"dns-resolve": true, "tcp-connect": true, "http-probe": true}

// handle is the worker's Handler: it dispatches scanner_plugin tasks to the
// registered plugin.
func handle(log *slog.Logger) workerclient.Handler {
	return func(ctx context.Context, task *workerclient.LeasedTask) error {
		run, c, err := callFor(task, log)
		if err != nil {
			return err
		}
		if !scanners[c.Plugin] {
			return run(ctx, c)
		}
		return runScanner(ctx, run, c)
	}
}

// callFor decodes a task into the plugin to run and its Call.
func callFor(task *workerclient.LeasedTask, log *slog.Logger) (Plugin, *Call, error) {
	if task.Type != string(apiclient.TaskTypeScannerPlugin) {
		return nil, nil, workerclient.Permanent("unsupported-task-type", fmt.Sprintf("this worker does not run %q tasks", task.Type))
	}
	var p scannerPayload
	if err := json.Unmarshal(task.Payload, &p); err != nil {
		return nil, nil, workerclient.Permanent("bad-payload", "payload is not {plugin, input, targets, assets}: "+err.Error())
	}
	run, ok := plugins[p.Plugin]
	if !ok {
		return nil, nil, workerclient.Permanent("unknown-plugin", fmt.Sprintf("no plugin %q (have %v)", p.Plugin, pluginNames()))
	}
	return run, &Call{
		Task:    task,
		Plugin:  p.Plugin,
		Input:   p.Input,
		Targets: p.Targets,
		Assets:  p.Assets,
		Emit:    task.Emit,
		Upload:  task.UploadArtifact,
		Out:     task.Log(),
		Log:     log.With("attempt_id", task.AttemptID, "task_id", task.ID, "plugin", p.Plugin),
	}, nil
}

// decodeInput decodes the call's input into v; a missing input decodes as
// {}. Unknown fields are ignored: a scan enriches its jobs' input.
func decodeInput(c *Call, v any) error {
	if len(c.Input) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.Input, v); err != nil {
		return workerclient.Permanent("bad-input", "plugin input: "+err.Error())
	}
	return nil
}

// echoPlugin logs its input and succeeds.
func echoPlugin(_ context.Context, c *Call) error {
	c.Log.Info("echo", "input", c.Input)
	return nil
}

// sleepPlugin sleeps input.seconds, or until its context is done.
func sleepPlugin(ctx context.Context, c *Call) error {
	var in struct {
		Seconds float64 `json:"seconds"`
	}
	if err := decodeInput(c, &in); err != nil {
		return err
	}
	if in.Seconds < 0 {
		return workerclient.Permanent("bad-input", "seconds must not be negative")
	}
	t := time.NewTimer(time.Duration(in.Seconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// failPlugin fails with input.code and input.message, retryable when
// input.retryable is true: a way for tests to exercise failure paths.
func failPlugin(_ context.Context, c *Call) error {
	var in struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	}
	if err := decodeInput(c, &in); err != nil {
		return err
	}
	if in.Code == "" {
		in.Code = "plugin-failed"
	}
	return &workerclient.TaskError{Code: in.Code, Message: in.Message, Retryable: in.Retryable}
}

// ---- helpers of the scanner plugins ----

// assetRecord is an asset record; details are plain JSON values.
func assetRecord(typ, value string, details map[string]any) apiclient.ResultRecord {
	return apiclient.ResultRecord{
		Kind:    apiclient.ResultRecordKindAsset,
		Asset:   &apiclient.AssetRef{Type: typ, Value: value},
		Details: jsonObject(details),
	}
}

// threatRecord is a threat record on an asset.
func threatRecord(asset apiclient.AssetRef, externalID, title string, severity apiclient.Severity,
	details map[string]any) apiclient.ResultRecord {
	return apiclient.ResultRecord{
		Kind:       apiclient.ResultRecordKindThreat,
		Asset:      &asset,
		ExternalId: &externalID,
		Title:      &title,
		Severity:   &severity,
		Details:    jsonObject(details),
	}
}

// edgeRecord relates asset from to asset to (see the contract's
// EdgeRelation).
func edgeRecord(fromType, fromValue string, relation apiclient.EdgeRelation, toType, toValue string) apiclient.ResultRecord {
	return apiclient.ResultRecord{
		Kind:     apiclient.ResultRecordKindEdge,
		Asset:    &apiclient.AssetRef{Type: fromType, Value: fromValue},
		Target:   &apiclient.AssetRef{Type: toType, Value: toValue},
		Relation: &relation,
	}
}

// hostType is the asset type of a host: ip for an address, else hostname.
func hostType(host string) string {
	if _, err := netip.ParseAddr(host); err == nil {
		return "ip"
	}
	return "hostname"
}

// jsonObject encodes details, nil for none. The plugins put only strings,
// numbers and slices of them in details, which always encode.
func jsonObject(details map[string]any) *apiclient.JSONObject {
	if details == nil {
		return nil
	}
	raw, err := json.Marshal(details)
	if err != nil {
		panic(fmt.Sprintf("details do not encode: %v", err))
	}
	obj := apiclient.JSONObject(raw)
	return &obj
}

// assetValues returns the values of the assets of type typ, in order,
// without repeats.
func assetValues(assets []Asset, typ string) []string {
	var vs []string
	for _, a := range assets {
		if a.Type == typ && a.Value != "" && !slices.Contains(vs, a.Value) {
			vs = append(vs, a.Value)
		}
	}
	return vs
}

// ipAssetAddresses returns the values of the scan's ip assets, in order,
// without repeats, and refuses one that is not a literal IP address: the
// gateway approves an ip asset as the address it reads, and a name or a
// numeric form ("vm", "127.1", "2130706433") that a resolver would turn into
// another address must not reach a dial.
func ipAssetAddresses(assets []Asset) ([]string, error) {
	vs := assetValues(assets, "ip")
	for _, v := range vs {
		if _, err := netip.ParseAddr(v); err != nil {
			return nil, workerclient.Permanent("bad-input", fmt.Sprintf("ip asset %q is not an IP address", v))
		}
	}
	return vs, nil
}

// hostOf is the host a target names: a URL's host, a host:port's host, an
// IPv6 address without brackets, or the target itself.
func hostOf(target string) string {
	t := strings.TrimSpace(target)
	if strings.Contains(t, "://") {
		if u, err := url.Parse(t); err == nil && u.Hostname() != "" {
			return u.Hostname()
		}
	}
	if h, _, err := net.SplitHostPort(t); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(t, "["), "]")
}

// timeoutInput is a plugin's per-operation timeout: timeout_ms, or def when
// absent; at most a minute.
func timeoutInput(ms int, def time.Duration) (time.Duration, error) {
	switch {
	case ms == 0:
		return def, nil
	case ms < 0 || ms > 60_000:
		return 0, workerclient.Permanent("bad-input", fmt.Sprintf("timeout_ms %d is outside 1..60000", ms))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// forEach runs fn on every item, at most limit at a time. It stops starting
// new items once ctx is done or fn failed, and returns fn's first error, or
// ctx's error when ctx ended first: a scan cut short must not look complete.
func forEach[T any](ctx context.Context, items []T, limit int, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, max(limit, 1))
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() {
			first = err
			cancel(err)
		})
	}
loop:
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, it); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
