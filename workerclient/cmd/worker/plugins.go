package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/worker-gateway/gateway/workerclient"
)

// Call is one run of a plugin: the task, its decoded input and a logger that
// names the attempt.
type Call struct {
	Task  *workerclient.LeasedTask
	Input json.RawMessage
	Log   *slog.Logger
}

// Plugin runs one scanner_plugin task. Its error decides the attempt's
// outcome (see workerclient.Permanent and workerclient.Retryable).
type Plugin func(ctx context.Context, c *Call) error

// plugins is the registry of what this worker can run; its names are the
// "plugins" capability the worker advertises.
var plugins = map[string]Plugin{
	"echo":  echoPlugin,
	"sleep": sleepPlugin,
	"fail":  failPlugin,
}

func pluginNames() []string {
	names := make([]string, 0, len(plugins))
	for name := range plugins {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// scannerPayload is the payload of a scanner_plugin task.
type scannerPayload struct {
	Plugin string          `json:"plugin"`
	Input  json.RawMessage `json:"input"`
}

// handle is the worker's Handler: it dispatches scanner_plugin tasks to the
// registered plugin.
func handle(log *slog.Logger) workerclient.Handler {
	return func(ctx context.Context, task *workerclient.LeasedTask) error {
		if task.Type != string(workerclient.TaskTypeScannerPlugin) {
			return workerclient.Permanent("unsupported-task-type", fmt.Sprintf("this worker does not run %q tasks", task.Type))
		}
		var p scannerPayload
		if err := json.Unmarshal(task.Payload, &p); err != nil {
			return workerclient.Permanent("bad-payload", "payload is not {plugin, input}: "+err.Error())
		}
		run, ok := plugins[p.Plugin]
		if !ok {
			return workerclient.Permanent("unknown-plugin", fmt.Sprintf("no plugin %q (have %v)", p.Plugin, pluginNames()))
		}
		c := &Call{
			Task:  task,
			Input: p.Input,
			Log:   log.With("attempt_id", task.AttemptID, "task_id", task.ID, "plugin", p.Plugin),
		}
		return run(ctx, c)
	}
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
