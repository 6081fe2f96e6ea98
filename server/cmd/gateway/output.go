package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// finish turns a response into output: a problem becomes an error, --json
// prints the body as the API sent it (indented), otherwise human writes
// the table or fields.
func (c *ctl) finish(hr *http.Response, body []byte, human func(w io.Writer)) error {
	if hr.StatusCode < 200 || hr.StatusCode > 299 {
		return problemError(hr.StatusCode, hr.Header.Get("X-Request-Id"), body)
	}
	if c.json {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil // 204: nothing to print, the status says it
		}
		var buf bytes.Buffer
		if json.Indent(&buf, body, "", "  ") != nil {
			buf.Reset()
			buf.Write(body)
		}
		buf.WriteByte('\n')
		_, err := c.out.Write(buf.Bytes())
		return err
	}
	human(c.out)
	return nil
}

// morePages tells a human reader how to get the next page.
func (c *ctl) morePages(next *string) {
	if next != nil && *next != "" && !c.json {
		fmt.Fprintf(c.errOut, "more: --cursor %s\n", *next)
	}
}

// Output: tables for lists, "Field: value" blocks for single things.

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

func row(tw io.Writer, cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

func str(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// revokedText is "<when>" or "<when> (<reason>)".
func revokedText(at *time.Time, reason *string) string {
	if reason == nil || *reason == "" {
		return fmtTimePtr(at)
	}
	return fmtTimePtr(at) + " (" + *reason + ")"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func joinIDs(ids []uuid.UUID) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ",")
}

func writeOrgTable(w io.Writer, orgs []apiclient.Organization) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "SCOPE POLICY", "CREATED")
	for _, o := range orgs {
		row(tw, o.Id.String(), o.Name, string(o.ScopePolicy), fmtTime(o.CreatedAt))
	}
	tw.Flush()
}

// workerEnabled is "yes", "no" or, for a revoked worker, "revoked".
func workerEnabled(w apiclient.Worker) string {
	if w.Revoked {
		return "revoked"
	}
	return yesNo(w.Enabled)
}

func writeWorkerTable(w io.Writer, workers []apiclient.Worker) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "TYPE", "ONLINE", "ENABLED", "ACTIVE/CAPACITY", "ORGS")
	for _, wk := range workers {
		row(tw, wk.Id.String(), wk.Name, string(wk.WorkerType), yesNo(wk.Online), workerEnabled(wk),
			fmt.Sprintf("%d/%d", wk.ActiveAttempts, wk.MaxConcurrentTasks), joinIDs(wk.OrganizationIds))
	}
	tw.Flush()
}

func workerFields(wk apiclient.Worker) [][2]string {
	f := [][2]string{
		{"ID", wk.Id.String()},
		{"Name", wk.Name},
		{"Type", string(wk.WorkerType)},
		{"Online", yesNo(wk.Online)},
		{"Last seen", fmtTimePtr(wk.LastSeenAt)},
		{"Enabled", workerEnabled(wk)},
	}
	if wk.Revoked {
		f = append(f, [2]string{"Revoked", revokedText(wk.RevokedAt, wk.RevocationReason)})
	}
	return append(f,
		[2]string{"Active/capacity", fmt.Sprintf("%d/%d", wk.ActiveAttempts, wk.MaxConcurrentTasks)},
		[2]string{"Organizations", joinIDs(wk.OrganizationIds)},
		[2]string{"Capabilities", compactJSON(wk.Capabilities)},
		[2]string{"Labels", labelsText(wk.Labels)},
		[2]string{"Certificate", str(wk.CertificateSubject)},
		[2]string{"Fingerprint", str(wk.CertificateFingerprint)},
		[2]string{"Software", str(wk.SoftwareVersion)},
		[2]string{"Protocol", str(wk.ProtocolVersion)},
		[2]string{"Created", fmtTime(wk.CreatedAt)},
	)
}

func assignmentFields(a apiclient.Assignment) [][2]string {
	f := [][2]string{
		{"Organization", a.OrganizationId.String()},
		{"Worker", a.WorkerId.String()},
		{"Enabled", yesNo(a.Enabled)},
		{"Assigned", fmtTime(a.AssignedAt)},
	}
	if a.Revoked {
		f = append(f, [2]string{"Revoked", revokedText(a.RevokedAt, a.RevocationReason)})
	}
	if a.CancelledAttempts != nil {
		f = append(f, [2]string{"Cancelled attempts", fmt.Sprint(*a.CancelledAttempts)})
	}
	return f
}

// tokenStatus is "active", "revoked" or "expired" (as of now).
func tokenStatus(t apiclient.ApiToken, now time.Time) string {
	switch {
	case t.Revoked:
		return "revoked"
	case t.ExpiresAt != nil && !t.ExpiresAt.After(now):
		return "expired"
	}
	return "active"
}

func writeTokenTable(w io.Writer, tokens []apiclient.ApiToken) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "SCOPES", "ORG", "STATUS", "EXPIRES", "LAST USED", "CREATED")
	now := time.Now()
	for _, t := range tokens {
		scopes := make([]string, len(t.Scopes))
		for i, s := range t.Scopes {
			scopes[i] = string(s)
		}
		org := "-"
		if t.OrganizationId != nil {
			org = t.OrganizationId.String()
		}
		row(tw, t.Id.String(), t.Name, strings.Join(scopes, ","), org, tokenStatus(t, now),
			fmtTimePtr(t.ExpiresAt), fmtTimePtr(t.LastUsedAt), fmtTime(t.CreatedAt))
	}
	tw.Flush()
}

func pendingReason(p *apiclient.PendingReason) string {
	if p == nil || *p == "" {
		return "-"
	}
	return string(*p)
}

func writeTaskTable(w io.Writer, tasks []apiclient.Task) {
	tw := newTable(w)
	row(tw, "ID", "STATE", "TYPE", "ATTEMPTS", "PENDING REASON", "CREATED")
	for _, t := range tasks {
		row(tw, t.Id.String(), string(t.State), string(t.TaskType),
			fmt.Sprintf("%d/%d", t.AttemptCount, t.MaxAttempts), pendingReason(t.PendingReason), fmtTime(t.CreatedAt))
	}
	tw.Flush()
}

func writeTaskDetail(w io.Writer, t apiclient.TaskDetail) {
	f := [][2]string{
		{"ID", t.Id.String()},
		{"Organization", t.OrganizationId.String()},
		{"Type", string(t.TaskType)},
		{"State", string(t.State)},
		{"Pending reason", pendingReason(t.PendingReason)},
		{"Attempts", fmt.Sprintf("%d/%d", t.AttemptCount, t.MaxAttempts)},
		{"Priority", fmt.Sprint(t.Priority)},
		{"Available", fmtTime(t.AvailableAt)},
	}
	if t.LastErrorCode != nil || t.LastError != nil {
		f = append(f, [2]string{"Last error", str(t.LastErrorCode) + ": " + str(t.LastError)})
	}
	if t.ScanId != nil {
		f = append(f, [2]string{"Scan", t.ScanId.String()})
	}
	f = append(f,
		[2]string{"Payload", compactJSON(t.Payload)},
		[2]string{"Requires", compactJSON(t.RequiredCapabilities)},
	)
	if t.LabelSelector != nil {
		f = append(f, [2]string{"Selector", selectorText(*t.LabelSelector)})
	}
	if t.PinnedWorkerId != nil {
		f = append(f, [2]string{"Pinned to", t.PinnedWorkerId.String()})
	}
	f = append(f,
		[2]string{"Created", fmtTime(t.CreatedAt)},
		[2]string{"Updated", fmtTime(t.UpdatedAt)},
		[2]string{"Completed", fmtTimePtr(t.CompletedAt)},
	)
	writeFields(w, f)
	if len(t.Attempts) == 0 {
		return
	}
	attempts := slices.Clone(t.Attempts)
	slices.SortFunc(attempts, func(a, b apiclient.Attempt) int { return a.AttemptNumber - b.AttemptNumber })
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "#", "ATTEMPT", "WORKER", "STATUS", "STARTED", "FINISHED", "ERROR")
	for _, a := range attempts {
		errText := "-"
		if a.ErrorCode != nil || a.ErrorMessage != nil {
			errText = str(a.ErrorCode) + ": " + str(a.ErrorMessage)
		}
		row(tw, fmt.Sprint(a.AttemptNumber), a.Id.String(), a.WorkerId.String(), string(a.Status),
			fmtTime(a.StartedAt), fmtTimePtr(a.FinishedAt), errText)
	}
	tw.Flush()
}

// writeFields writes "Field:  value" lines, values aligned.
func writeFields(w io.Writer, fields [][2]string) {
	tw := newTable(w)
	for _, f := range fields {
		row(tw, f[0]+":", f[1])
	}
	tw.Flush()
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

func writeOrgWorkerTable(w io.Writer, items []apiclient.OrganizationWorker) {
	tw := newTable(w)
	row(tw, "WORKER", "NAME", "TYPE", "ONLINE", "ASSIGNMENT", "ELIGIBLE", "REASON")
	for _, it := range items {
		row(tw, it.Worker.Id.String(), it.Worker.Name, string(it.Worker.WorkerType), yesNo(it.Worker.Online),
			map[bool]string{true: "enabled", false: "disabled"}[it.AssignmentEnabled], yesNo(it.Eligible), string(it.Reason))
	}
	tw.Flush()
}

func writeAssetTable(w io.Writer, assets []apiclient.Asset) {
	tw := newTable(w)
	row(tw, "ID", "TYPE", "VALUE", "FIRST SEEN", "LAST SEEN")
	for _, a := range assets {
		row(tw, a.Id.String(), a.Type, a.Value, fmtTime(a.FirstSeenAt), fmtTime(a.LastSeenAt))
	}
	tw.Flush()
}

func writeThreatTable(w io.Writer, threats []apiclient.Threat) {
	tw := newTable(w)
	row(tw, "ID", "SEVERITY", "TITLE", "ASSET", "DETECTIONS", "CREATED")
	for _, t := range threats {
		row(tw, t.Id.String(), string(t.Severity), t.Title, t.Asset.Type+":"+t.Asset.Value, fmt.Sprint(t.Detections), fmtTime(t.CreatedAt))
	}
	tw.Flush()
}

func writeGrantTable(w io.Writer, grants []apiclient.WorkerGrant) {
	tw := newTable(w)
	row(tw, "WORKER", "ORGANIZATION", "GRANTED")
	for _, g := range grants {
		row(tw, g.WorkerId.String(), g.OrganizationId.String(), fmtTime(g.GrantedAt))
	}
	tw.Flush()
}

func writeResultTable(w io.Writer, batches []apiclient.StoredResultBatch) {
	tw := newTable(w)
	row(tw, "SEQ", "BATCH", "ATTEMPT", "RECORDS", "KINDS", "RECEIVED")
	for _, b := range batches {
		kinds := map[string]int{}
		var order []string
		for _, r := range b.Records {
			if kinds[string(r.Kind)] == 0 {
				order = append(order, string(r.Kind))
			}
			kinds[string(r.Kind)]++
		}
		parts := make([]string, len(order))
		for i, k := range order {
			parts[i] = fmt.Sprintf("%s×%d", k, kinds[k])
		}
		attempt := "-"
		if b.AttemptNumber != nil {
			attempt = fmt.Sprint(*b.AttemptNumber)
		}
		row(tw, fmt.Sprint(b.SequenceNumber), b.BatchId.String(), attempt, fmt.Sprint(len(b.Records)),
			strings.Join(parts, ","), fmtTime(b.ReceivedAt))
	}
	tw.Flush()
}

func writeFileTable(w io.Writer, files []apiclient.File) {
	tw := newTable(w)
	row(tw, "ID", "NAME", "TYPE", "BYTES", "SHA256", "CREATED")
	for _, f := range files {
		row(tw, f.Id.String(), f.Name, f.ContentType, fmt.Sprint(f.SizeBytes), f.Sha256, fmtTime(f.CreatedAt))
	}
	tw.Flush()
}

func writeScanTable(w io.Writer, scans []apiclient.Scan) {
	tw := newTable(w)
	// No jobs column: lists leave them out (scans get shows them).
	row(tw, "ID", "STATE", "ORGANIZATION", "TARGETS", "CREATED", "COMPLETED")
	for _, s := range scans {
		row(tw, s.Id.String(), string(s.State), s.OrganizationId.String(), strings.Join(s.Targets, ","),
			fmtTime(s.CreatedAt), fmtTimePtr(s.CompletedAt))
	}
	tw.Flush()
}

func writeScanDetail(w io.Writer, s apiclient.Scan) {
	writeFields(w, [][2]string{
		{"ID", s.Id.String()},
		{"Organization", s.OrganizationId.String()},
		{"State", string(s.State)},
		{"Targets", strings.Join(s.Targets, ", ")},
		{"Created", fmtTime(s.CreatedAt)},
		{"Completed", fmtTimePtr(s.CompletedAt)},
	})
	if len(s.Jobs) == 0 {
		return
	}
	jobs := slices.Clone(s.Jobs)
	slices.SortFunc(jobs, func(a, b apiclient.ScanJob) int { return a.Position - b.Position })
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "#", "PLUGIN", "STATE", "TASK", "ERROR")
	for _, j := range jobs {
		task := "-"
		if j.Task != nil {
			task = j.Task.Id.String()
		}
		row(tw, fmt.Sprint(j.Position), j.PluginName, string(j.State), task, str(j.Error))
	}
	tw.Flush()
}

func writeAuditTable(w io.Writer, events []apiclient.AuditEvent) {
	tw := newTable(w)
	row(tw, "ID", "TIME", "ACTION", "ACTOR", "TARGET", "ORGANIZATION")
	for _, e := range events {
		org := "-"
		if e.OrganizationId != nil {
			org = e.OrganizationId.String()
		}
		target := str(e.TargetType)
		if e.TargetId != nil {
			target += ":" + *e.TargetId
		}
		row(tw, fmt.Sprint(e.Id), fmtTime(e.OccurredAt), e.Action, string(e.ActorType)+":"+str(e.ActorId), target, org)
	}
	tw.Flush()
}

// workerStateDir is the state directory the printed worker commands use.
const workerStateDir = "./worker-state"

// writeWorkerCommands prints the commands that start the reference worker
// with a fresh enrollment token against the gateway ctl talks to, and that
// check it afterwards. The token goes in the environment, as the worker's
// documentation advises: other users of a machine can read command lines.
func (c *ctl) writeWorkerCommands(w io.Writer, token string) {
	args := []string{"-gateway", shellWord(strings.TrimRight(c.url, "/"))}
	if c.ca != "" {
		ca := c.ca
		if abs, err := filepath.Abs(ca); err == nil {
			ca = abs
		}
		args = append(args, "-ca", shellWord(ca))
	}
	args = append(args, "-state-dir", workerStateDir)
	worker := shellWord(workerBinary())
	fmt.Fprintf(w, "\nStart the reference worker with it (it enrolls once, then keeps its identity in %s):\n", workerStateDir)
	fmt.Fprintf(w, "  WORKER_ENROLLMENT_TOKEN=%s %s %s\n", shellWord(token), worker, strings.Join(args, " "))
	fmt.Fprintf(w, "Once it has enrolled, check that the gateway accepts it:\n")
	fmt.Fprintf(w, "  %s -check %s\n", worker, strings.Join(args, " "))
}

// workerBinary is the reference worker next to this binary (make run puts
// both in .dev/bin), else "worker" from PATH.
func workerBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return "worker"
	}
	bin := filepath.Join(filepath.Dir(exe), "worker")
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "worker"
	}
	// A bare name would be looked up on PATH.
	if short := shortPath(bin); strings.Contains(short, "/") {
		return short
	}
	return "./worker"
}

// shortPath is path relative to the working directory when it lies under
// it, as a person would type it.
func shortPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return path
	}
	return rel
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
