package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// stats prints the operators' overview (GET /v1/stats), as the console's
// overview shows it.
func stats(fs *flagSet) ctlRun {
	leaseWindow := fs.Int("lease-window", 0, "seconds to count leases over (default 60)")
	failureWindow := fs.Int("failure-window", 0, "seconds to count failed attempts over (default 900)")
	return func(ctx context.Context, c *ctl, _ []string) error {
		params := &apiclient.GetStatsParams{}
		if *leaseWindow != 0 {
			params.LeaseWindowSeconds = leaseWindow
		}
		if *failureWindow != 0 {
			params.FailureWindowSeconds = failureWindow
		}
		res, err := c.api.GetStatsWithResponse(ctx, params)
		if err != nil {
			return err
		}
		return c.finish(res.HTTPResponse, res.Body, func(w io.Writer) { writeStats(w, *res.JSON200) })
	}
}

func writeStats(w io.Writer, st apiclient.Stats) {
	writeFields(w, [][2]string{
		{"Workers online", fmt.Sprintf("%d of %d", st.Workers.Online, st.Workers.Total)},
		{"Capacity", fmt.Sprintf("%d (%d leases held)", st.Workers.Capacity, st.Workers.ActiveAttempts)},
		{"Leases", fmt.Sprintf("%.2f/s (%d in the last %d s)", st.Leases.PerSecond, st.Leases.Count, st.Leases.WindowSeconds)},
		{"Failures", fmt.Sprintf("%d in the last %d s", st.Failures.Count, st.Failures.WindowSeconds)},
	})
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "ORGANIZATION", "STATE", "TASKS")
	for _, d := range st.Queue {
		row(tw, d.OrganizationId.String(), string(d.State), fmt.Sprint(d.Count))
	}
	tw.Flush()
	if len(st.Failures.Recent) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "FAILED", "TASK", "ATTEMPT", "STATUS", "CODE", "ERROR")
	for _, f := range st.Failures.Recent {
		row(tw, fmtTimePtr(f.FinishedAt), f.TaskId.String(), fmt.Sprint(f.AttemptNumber), string(f.Status),
			str(f.ErrorCode), oneLine(str(f.ErrorMessage), 60))
	}
	tw.Flush()
}

// oneLine keeps a table row on one line: the text up to its first line
// break, cut to at most n runes.
func oneLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
