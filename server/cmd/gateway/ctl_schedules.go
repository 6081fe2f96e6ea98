package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Schedules.

func schedulesList(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id")
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, _ []string) error {
		params := &apiclient.ListSchedulesParams{}
		params.Limit, params.Cursor = p.params()
		var err error
		if params.OrganizationId, err = optionalID("organization", *org); err != nil {
			return err
		}
		res, err := c.api.ListSchedulesWithResponse(ctx, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeScheduleTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func schedulesGet(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("schedule", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.GetScheduleWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScheduleDetail(w, *res.JSON200) })
}

func schedulesCreate(fs *flagSet) ctlRun {
	org := fs.String("org", "", "organization id (required)")
	name := fs.String("name", "", "the schedule's name (required)")
	cron := fs.String("cron", "", "five cron fields, or @daily and the like, in --time-zone")
	interval := fs.Int("interval", 0, "a fixed period in seconds, instead of --cron")
	zone := fs.String("time-zone", "", "IANA time zone of --cron (default UTC)")
	overlap := fs.String("overlap", "", "while the previous run is active: skip (default), allow or queue_one")
	catchUp := fs.String("catch-up", "", "slots missed while no gateway ran: once (default) or skip")
	def := fs.String("definition", "", `what each fire creates, as the API takes it: JSON or @FILE (required), e.g. {"kind": "scan", "scan": {"targets": ["localhost"], "plugins": [{"name": "dns-resolve"}]}}`)
	return func(ctx context.Context, c *ctl, _ []string) error {
		orgID, err := optionalID("organization", *org)
		if err != nil {
			return err
		}
		if orgID == nil || *name == "" || *def == "" || (*cron == "") == (*interval == 0) {
			return usageError{"schedules create needs --org, --name, --definition and one of --cron and --interval"}
		}
		req := apiclient.CreateScheduleRequest{OrganizationId: *orgID, Name: *name}
		data := []byte(*def)
		if file, ok := strings.CutPrefix(*def, "@"); ok {
			if data, err = os.ReadFile(file); err != nil {
				return err
			}
		}
		if err := json.Unmarshal(data, &req.Definition); err != nil {
			return usageError{fmt.Sprintf("--definition: %v", err)}
		}
		if *cron != "" {
			req.Timing.Cron = cron
		}
		if *interval != 0 {
			req.Timing.IntervalSeconds = interval
		}
		if *zone != "" {
			req.Timing.TimeZone = zone
		}
		if *overlap != "" {
			req.Timing.Overlap = (*apiclient.ScheduleOverlap)(overlap)
		}
		if *catchUp != "" {
			req.Timing.CatchUp = (*apiclient.ScheduleCatchUp)(catchUp)
		}
		res, err := c.api.CreateScheduleWithResponse(ctx, req)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScheduleDetail(w, *res.JSON201) })
	}
}

func schedulesPause(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("schedule", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.PauseScheduleWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScheduleTable(w, []apiclient.Schedule{*res.JSON200}) })
}

func schedulesResume(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("schedule", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.ResumeScheduleWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeScheduleTable(w, []apiclient.Schedule{*res.JSON200}) })
}

func schedulesDelete(ctx context.Context, c *ctl, args []string) error {
	id, err := parseID("schedule", args[0])
	if err != nil {
		return err
	}
	res, err := c.api.DeleteScheduleWithResponse(ctx, id)
	if err != nil {
		return err
	}
	return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { fmt.Fprintln(w, "deleted", id) })
}

func schedulesRun(fs *flagSet) ctlRun {
	key := fs.String("idempotency-key", "", "repeating a run with the same key returns the same run")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("schedule", args[0])
		if err != nil {
			return err
		}
		params := &apiclient.RunScheduleParams{}
		if *key != "" {
			params.IdempotencyKey = key
		}
		res, err := c.api.RunScheduleWithResponse(ctx, id, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			f := res.JSON201
			if f == nil {
				f = res.JSON200
			}
			writeFireTable(w, []apiclient.ScheduleFire{*f})
		})
	}
}

func schedulesFires(fs *flagSet) ctlRun {
	p := pageFlags(fs)
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("schedule", args[0])
		if err != nil {
			return err
		}
		params := &apiclient.ListScheduleFiresParams{}
		params.Limit, params.Cursor = p.params()
		res, err := c.api.ListScheduleFiresWithResponse(ctx, id, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			writeFireTable(w, res.JSON200.Items)
			c.morePages(res.JSON200.NextCursor)
		})
	}
}

func schedulesNext(fs *flagSet) ctlRun {
	count := fs.Int("count", 10, "how many fire times (at most 1000)")
	return func(ctx context.Context, c *ctl, args []string) error {
		id, err := parseID("schedule", args[0])
		if err != nil {
			return err
		}
		res, err := c.api.ListScheduleNextWithResponse(ctx, id, &apiclient.ListScheduleNextParams{Count: count})
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) {
			tw := newTable(w)
			row(tw, "SLOT", "FIRES AT")
			for _, s := range res.JSON200.Items {
				row(tw, fmtTime(s.SlotAt), fmtTime(s.FireAt))
			}
			tw.Flush()
		})
	}
}

// scheduleWhen is a schedule's timing in one word: its cron or interval.
func scheduleWhen(t apiclient.ScheduleTiming) string {
	zone := "UTC"
	if t.TimeZone != nil {
		zone = *t.TimeZone
	}
	switch {
	case t.Cron != nil:
		return *t.Cron + " " + zone
	case t.IntervalSeconds != nil:
		return fmt.Sprintf("every %ds", *t.IntervalSeconds)
	}
	return "-"
}

func writeScheduleTable(w io.Writer, list []apiclient.Schedule) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "VERSION", "ENABLED", "KIND", "WHEN", "NEXT FIRE")
	for _, s := range list {
		row(tw, s.Id.String(), s.Name, fmt.Sprint(s.Version), fmt.Sprint(s.Enabled), string(s.Definition.Kind),
			scheduleWhen(s.Timing), fmtTimePtr(s.NextFireAt))
	}
	tw.Flush()
}

func writeScheduleDetail(w io.Writer, s apiclient.Schedule) {
	def, _ := json.Marshal(s.Definition)
	writeFields(w, [][2]string{
		{"ID", s.Id.String()},
		{"Organization", s.OrganizationId.String()},
		{"Name", s.Name},
		{"Version", fmt.Sprint(s.Version)},
		{"Enabled", fmt.Sprint(s.Enabled)},
		{"When", scheduleWhen(s.Timing)},
		{"Next slot", fmtTimePtr(s.NextSlotAt)},
		{"Next fire", fmtTimePtr(s.NextFireAt)},
		{"Last slot", fmtTimePtr(s.LastSlotAt)},
		{"Definition", string(def)},
		{"Created", fmtTime(s.CreatedAt)},
		{"Updated", fmtTime(s.UpdatedAt)},
	})
}

func writeFireTable(w io.Writer, fires []apiclient.ScheduleFire) {
	tw := newTable(w)
	row(tw, "SLOT", "TRIGGER", "VERSION", "OUTCOME", "REASON", "RUN", "STATE")
	for _, f := range fires {
		run := "-"
		if f.TaskId != nil {
			run = "task " + f.TaskId.String()
		} else if f.ScanId != nil {
			run = "scan " + f.ScanId.String()
		}
		reason := "-"
		if f.SkipReason != nil {
			reason = string(*f.SkipReason)
		}
		row(tw, fmtTime(f.SlotAt), string(f.Trigger), fmt.Sprint(f.Version), string(f.Outcome), reason, run, str(f.RunState))
	}
	tw.Flush()
}
