package store_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

func asset(typ, value, details string) store.ResultRecord {
	r := store.ResultRecord{Kind: "asset", AssetType: typ, AssetValue: value}
	if details != "" {
		r.Details = json.RawMessage(details)
	}
	return r
}

func sendBatch(t *testing.T, s *store.Store, ref store.AttemptRef, seq int, key string, recs ...store.ResultRecord) store.BatchInfo {
	t.Helper()
	payload, err := json.Marshal(recs)
	require.NoError(t, err)
	var info store.BatchInfo
	_, err = s.AcceptResultBatch(t.Context(), store.AcceptBatchParams{AttemptRef: ref, IdempotencyKey: key, PayloadSHA256: key,
		SequenceNumber: seq, Records: recs, Payload: payload,
		Ack: func(i store.BatchInfo) ([]byte, error) { info = i; return json.Marshal(i) }})
	require.NoError(t, err)
	return info
}

// runJob leases the scan's next job, sends its records in one batch and
// completes it with outcome.
func runJob(t *testing.T, s *store.Store, b *testBundle, outcome store.AttemptStatus, recs ...store.ResultRecord) store.Lease {
	t.Helper()
	l := acquireOne(t, s, b.worker.ID)
	ref := refOf(b.worker.ID, l)
	if len(recs) > 0 {
		sendBatch(t, s, ref, 1, uuid.NewString(), recs...)
	}
	complete(t, s, ref, outcome, false)
	return l
}

func createScan1(t *testing.T, s *store.Store, org uuid.UUID, targets []string, plugins ...string) store.Scan {
	t.Helper()
	p := store.CreateScanParams{OrganizationID: org, Targets: targets}
	for _, name := range plugins {
		p.Plugins = append(p.Plugins, store.ScanPlugin{Name: name})
	}
	scan, _, err := s.CreateScan(t.Context(), store.EveryOrganization(), p)
	require.NoError(t, err)
	return scan
}

func TestScanScope(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	other := createOrg(t, s, "other")

	// No scope configured: scans go anywhere, as before scopes.
	createScan1(t, s, b.org.ID, []string{"anything.example.net"}, "echo")

	for _, e := range []store.ScopeTargetParams{
		{Kind: store.ScopeDomain, Value: "*.Example.COM."},
		{Kind: store.ScopeDomain, Value: "exact.org"},
		{Kind: store.ScopeCIDR, Value: "10.1.2.3/16"},
		{Kind: store.ScopeIP, Value: "192.0.2.7"},
		{Kind: store.ScopeURLPrefix, Value: "https://apps.net/app"},
	} {
		_, created, err := s.AddScopeTarget(ctx, every, b.org.ID, e)
		require.NoError(t, err)
		require.True(t, created)
	}
	again, created, err := s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "example.com", IncludeSubdomains: true})
	require.NoError(t, err)
	require.False(t, created, "the same entry is not added twice")
	require.Equal(t, "example.com", again.Value)
	_, _, err = s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeCIDR, Value: "nonsense"})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, _, err = s.AddScopeTarget(ctx, store.OneOrganization(other.ID), b.org.ID, store.ScopeTargetParams{Kind: store.ScopeIP, Value: "1.1.1.1"})
	require.ErrorIs(t, err, store.ErrNotFound)

	entries, enforced, _, err := s.ListScopeTargets(ctx, store.OneOrganization(b.org.ID), b.org.ID, nil, 100)
	require.NoError(t, err)
	require.True(t, enforced)
	require.Len(t, entries, 5)
	_, _, _, err = s.ListScopeTargets(ctx, store.OneOrganization(other.ID), b.org.ID, nil, 100)
	require.ErrorIs(t, err, store.ErrNotFound)

	inScope := []string{"example.com", "a.b.example.com", "exact.org", "10.1.200.1", "10.1.0.0/24", "192.0.2.7:443",
		"https://www.example.com/x", "https://apps.net/app/login", "https://apps.net/app"}
	createScan1(t, s, b.org.ID, inScope, "echo")

	outside := []string{"a.exact.org", "10.2.0.1", "10.0.0.0/8", "https://apps.net/application", "apps.net", "example.com.evil.net"}
	_, _, err = s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID,
		Targets: append([]string{"www.example.com"}, outside...), Plugins: []store.ScanPlugin{{Name: "echo"}}})
	require.ErrorIs(t, err, store.ErrOutOfScope)
	var oos *store.OutOfScopeError
	require.ErrorAs(t, err, &oos)
	require.Equal(t, outside, oos.Targets)

	// What plugin inputs and scanner tasks name is held to the scope too.
	_, _, err = s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID, Targets: []string{"example.com"},
		Plugins: []store.ScanPlugin{{Name: "tcp-connect", Input: json.RawMessage(`{"addresses": ["10.1.0.1:22", "10.9.0.1:22"]}`)},
			{Name: "http-probe", Input: json.RawMessage(`{"urls": ["https://evil.net/"]}`)}}})
	require.ErrorAs(t, err, &oos)
	require.Equal(t, []string{"10.9.0.1:22", "https://evil.net/"}, oos.Targets)
	_, _, err = s.CreateTask(ctx, every, store.CreateTaskParams{OrganizationID: b.org.ID, TaskType: "scanner_plugin",
		Payload: json.RawMessage(`{"plugin": "tcp-connect", "targets": ["example.com", "evil.net"], "input": {"host": "exact.org"}}`)})
	require.ErrorAs(t, err, &oos)
	require.Equal(t, []string{"evil.net"}, oos.Targets)
	createTask(t, s, b.org.ID, store.CreateTaskParams{TaskType: "scanner_plugin",
		Payload: json.RawMessage(`{"plugin": "tcp-connect", "targets": ["example.com"], "input": {"ports": [22]}}`)})
	createTask(t, s, b.org.ID, store.CreateTaskParams{TaskType: "ai", Payload: json.RawMessage(`{"targets": ["evil.net"]}`)})

	// Removing every entry does not open the scope: nothing may be scanned.
	for _, e := range entries {
		_, err := s.RemoveScopeTarget(ctx, store.OneOrganization(other.ID), b.org.ID, e.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.RemoveScopeTarget(ctx, every, b.org.ID, e.ID)
		require.NoError(t, err)
	}
	_, _, err = s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID, Targets: []string{"example.com"},
		Plugins: []store.ScanPlugin{{Name: "echo"}}})
	require.ErrorIs(t, err, store.ErrOutOfScope)
	// The other organization never had a scope.
	createScan1(t, s, other.ID, []string{"example.com"}, "echo")
}

func TestOutOfScopeRecordsAreKeptNotIngested(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	_, _, err := s.AddScopeTarget(ctx, store.EveryOrganization(), b.org.ID, store.ScopeTargetParams{Kind: store.ScopeCIDR, Value: "127.0.0.0/8"})
	require.NoError(t, err)
	scan := createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "tcp-connect")
	l := acquireOne(t, s, b.worker.ID)
	ref := refOf(b.worker.ID, l)
	info := sendBatch(t, s, ref, 1, "k1",
		asset("port", "127.0.0.1:22", ""),
		asset("port", "10.9.9.9:22", ""),
		store.ResultRecord{Kind: "edge", AssetType: "ip", AssetValue: "127.0.0.1", Relation: "has_port", TargetType: "port", TargetValue: "127.0.0.1:22"},
		store.ResultRecord{Kind: "edge", AssetType: "ip", AssetValue: "10.9.9.9", Relation: "has_port", TargetType: "port", TargetValue: "10.9.9.9:22"},
		store.ResultRecord{Kind: "threat", AssetType: "ip", AssetValue: "10.9.9.9", Title: "outside"},
	)
	require.Equal(t, 1, info.Assets)
	require.Equal(t, 1, info.Edges)
	require.Equal(t, 3, info.OutOfScope)
	complete(t, s, ref, store.AttemptSucceeded, false)

	var assets, threats, edges int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM assets WHERE organization_id = $1 AND normalized_value LIKE '10.%'),
		(SELECT count(*) FROM threats WHERE organization_id = $1), (SELECT count(*) FROM asset_edges WHERE organization_id = $1)`,
		b.org.ID).Scan(&assets, &threats, &edges))
	require.Zero(t, assets, "an out-of-scope record never becomes an asset")
	require.Zero(t, threats)
	require.Equal(t, 1, edges)

	batches, _, err := s.ListTaskResults(ctx, store.EveryOrganization(), l.Task.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	var stored []map[string]any
	require.NoError(t, json.Unmarshal(batches[0].Records, &stored))
	var flagged []int
	for i, r := range stored {
		if r["out_of_scope"] == true {
			flagged = append(flagged, i)
		}
	}
	require.Equal(t, []int{1, 3, 4}, flagged, "out-of-scope records are kept, flagged")

	got, err := s.GetScan(ctx, store.EveryOrganization(), scan.ID)
	require.NoError(t, err)
	var output struct {
		Records     map[string]int `json:"records"`
		ArtifactIDs []uuid.UUID    `json:"artifact_ids"`
	}
	require.NoError(t, json.Unmarshal(got.Jobs[0].Output, &output))
	require.Equal(t, map[string]int{"asset": 2, "edge": 2, "threat": 1, "out_of_scope": 3}, output.Records)
	require.Empty(t, output.ArtifactIDs)
}

func TestScanChanges(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	targets := []string{"127.0.0.1"}
	cert := func(fp string) string { return `{"status": 200, "certificate": {"sha256": "` + fp + `"}}` }

	first := createScan1(t, s, b.org.ID, targets, "tcp-connect", "http-probe")
	runJob(t, s, b, store.AttemptSucceeded,
		asset("ip", "127.0.0.1", ""), asset("port", "127.0.0.1:22", ""), asset("port", "127.0.0.1:443", ""))
	runJob(t, s, b, store.AttemptSucceeded,
		asset("url", "https://127.0.0.1/", cert("aa")), asset("url", "http://127.0.0.1:8080/", `{"status": 200}`))
	require.Equal(t, "completed", scanState(t, s, first.ID))
	changes, _, err := s.ListScanChanges(ctx, every, first.ID, store.ChangeFilter{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, changes, "the first scan of a scope is the baseline")

	// A scan of other targets is compared with nothing.
	createScan1(t, s, b.org.ID, []string{"127.0.0.2"}, "tcp-connect", "http-probe")
	runJob(t, s, b, store.AttemptSucceeded, asset("port", "127.0.0.2:22", ""))
	runJob(t, s, b, store.AttemptSucceeded)

	second := createScan1(t, s, b.org.ID, targets, "tcp-connect", "http-probe")
	// The first job's batch is sent twice (a retried batch), and its
	// first attempt fails after sending it: the second attempt sends the
	// same records again.
	l := acquireOne(t, s, b.worker.ID)
	ref := refOf(b.worker.ID, l)
	portRecs := []store.ResultRecord{asset("ip", "127.0.0.1", ""), asset("port", "127.0.0.1:22", ""), asset("port", "127.0.0.1:8443", "")}
	sendBatch(t, s, ref, 1, "batch-1", portRecs...)
	sendBatch(t, s, ref, 1, "batch-1", portRecs...)
	complete(t, s, ref, store.AttemptFailed, true)
	exec(t, b.pool, `UPDATE worker_tasks SET available_at = now() WHERE id = $1`, l.Task.ID)
	exec(t, b.pool, `UPDATE worker_task_queue SET available_at = now() WHERE task_id = $1`, l.Task.ID)
	l2 := acquireOne(t, s, b.worker.ID)
	require.Equal(t, l.Task.ID, l2.Task.ID)
	ref2 := refOf(b.worker.ID, l2)
	sendBatch(t, s, ref2, 1, "batch-2", portRecs...)
	complete(t, s, ref2, store.AttemptSucceeded, false)
	runJob(t, s, b, store.AttemptSucceeded,
		asset("url", "https://127.0.0.1/", `{"status": 503, "certificate": {"sha256": "bb"}}`),
		asset("url", "http://127.0.0.1:8080/", `{"status": 200}`),
		asset("url", "https://127.0.0.1:8443/", `{"status": 200}`))
	require.Equal(t, "completed", scanState(t, s, second.ID))

	changes, _, err = s.ListScanChanges(ctx, every, second.ID, store.ChangeFilter{Limit: 100})
	require.NoError(t, err)
	got := map[string][]string{}
	for _, c := range changes {
		require.Equal(t, first.ID, *c.PreviousScanID)
		got[c.Kind] = append(got[c.Kind], c.AssetValue)
	}
	for _, v := range got {
		slices.Sort(v)
	}
	require.Equal(t, map[string][]string{
		store.ChangePortOpened:         {"127.0.0.1:8443"},
		store.ChangePortClosed:         {"127.0.0.1:443"},
		store.ChangeAssetAppeared:      {"https://127.0.0.1:8443/"},
		store.ChangeHTTPStatusChanged:  {"https://127.0.0.1/"},
		store.ChangeCertificateChanged: {"https://127.0.0.1/"},
	}, got)

	// Filters and paging.
	opened, _, err := s.ListScanChanges(ctx, every, second.ID, store.ChangeFilter{Kinds: []string{store.ChangePortOpened, store.ChangePortClosed}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, opened, 2)
	_, _, err = s.ListScanChanges(ctx, every, second.ID, store.ChangeFilter{Kinds: []string{"nope"}, Limit: 100})
	require.ErrorIs(t, err, store.ErrInvalid)
	var paged []store.AssetChange
	var cursor *store.Cursor
	for {
		page, next, err := s.ListExposureChanges(ctx, store.OneOrganization(b.org.ID), b.org.ID, store.ChangeFilter{After: cursor, Limit: 2})
		require.NoError(t, err)
		paged = append(paged, page...)
		if next == nil {
			break
		}
		cursor = next
	}
	require.Len(t, paged, len(changes))
	future := time.Now().Add(time.Hour)
	none, _, err := s.ListExposureChanges(ctx, every, b.org.ID, store.ChangeFilter{Since: &future, Limit: 100})
	require.NoError(t, err)
	require.Empty(t, none)

	// Another organization sees none of it.
	other := createOrg(t, s, "other")
	_, _, err = s.ListScanChanges(ctx, store.OneOrganization(other.ID), second.ID, store.ChangeFilter{Limit: 100})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, err = s.ListExposureChanges(ctx, store.OneOrganization(other.ID), b.org.ID, store.ChangeFilter{Limit: 100})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func scanState(t *testing.T, s *store.Store, id uuid.UUID) string {
	t.Helper()
	scan, err := s.GetScan(t.Context(), store.EveryOrganization(), id)
	require.NoError(t, err)
	return scan.State
}

func TestRedriveReopensFinishedScan(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()

	// While a later job runs, an earlier failed job cannot be redriven: one
	// job at a time.
	busy := createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "fail", "tcp-connect")
	failed := runJob(t, s, b, store.AttemptFailed)
	running := acquireOne(t, s, b.worker.ID)
	_, err := s.RetryTask(ctx, every, failed.Task.ID)
	require.ErrorIs(t, err, store.ErrScanBusy)
	complete(t, s, refOf(b.worker.ID, running), store.AttemptSucceeded, false)
	require.Equal(t, "completed", scanState(t, s, busy.ID))

	// Finished: the redrive reopens the scan, which completes again when
	// the job ends; its history is recomputed, not duplicated.
	task, err := s.RetryTask(ctx, every, failed.Task.ID)
	require.NoError(t, err)
	require.Equal(t, store.TaskState("pending"), task.State)
	require.Equal(t, "running", scanState(t, s, busy.ID))
	again := acquireOne(t, s, b.worker.ID)
	require.Equal(t, failed.Task.ID, again.Task.ID)
	_, err = s.RetryTask(ctx, every, running.Task.ID)
	require.ErrorIs(t, err, store.ErrTaskNotRetryable, "a completed task is not redriven")
	complete(t, s, refOf(b.worker.ID, again), store.AttemptSucceeded, false)
	require.Equal(t, "completed", scanState(t, s, busy.ID))
	var inFlight int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE scan_id = $1 AND state NOT IN ('completed', 'failed_terminal', 'cancelled')`,
		busy.ID).Scan(&inFlight))
	require.Zero(t, inFlight)

	// A cancelled scan stays cancelled.
	cancelled := createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "echo")
	got, err := s.CancelScan(ctx, every, cancelled.ID)
	require.NoError(t, err)
	_, err = s.RetryTask(ctx, every, got.Jobs[0].Task.ID)
	require.ErrorIs(t, err, store.ErrScanFinished)
}

func TestThreatExclusions(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	other := createOrg(t, s, "other")

	_, err := s.CreateThreatExclusion(ctx, every, b.org.ID, store.ThreatExclusionParams{Reason: "nothing to match"})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.CreateThreatExclusion(ctx, every, b.org.ID, store.ThreatExclusionParams{ExternalID: ptrTo("x")})
	require.ErrorIs(t, err, store.ErrInvalid, "a reason is required")
	_, err = s.CreateThreatExclusion(ctx, store.OneOrganization(other.ID), b.org.ID, store.ThreatExclusionParams{ExternalID: ptrTo("x"), Reason: "r"})
	require.ErrorIs(t, err, store.ErrNotFound)

	byID, err := s.CreateThreatExclusion(ctx, every, b.org.ID, store.ThreatExclusionParams{
		ExternalID: ptrTo("tls-certificate-self-signed"), AssetPattern: ptrTo("https://*.internal/*"), Reason: "internal CA"})
	require.NoError(t, err)
	past := time.Now().Add(-time.Minute)
	_, err = s.CreateThreatExclusion(ctx, every, b.org.ID, store.ThreatExclusionParams{Severity: ptrTo("info"), Reason: "expired", ExpiresAt: &past})
	require.NoError(t, err)

	score := 5.3
	createScan1(t, s, b.org.ID, []string{"a.internal"}, "http-probe")
	runJob(t, s, b, store.AttemptSucceeded,
		store.ResultRecord{Kind: "threat", AssetType: "url", AssetValue: "https://a.internal/", ExternalID: "tls-certificate-self-signed", Title: "Self-signed", Severity: "medium"},
		store.ResultRecord{Kind: "threat", AssetType: "url", AssetValue: "https://a.public/", ExternalID: "tls-certificate-self-signed", Title: "Self-signed", Severity: "medium",
			Vulnerability: &store.Vulnerability{CVEIDs: []string{"CVE-2020-0001"}, CWEIDs: []string{"CWE-295"}, CVSSScore: &score,
				CVSSVector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:L/I:L/A:N", References: []string{"https://example.org/"}, Remediation: "Use a trusted CA."}},
		store.ResultRecord{Kind: "threat", AssetType: "url", AssetValue: "https://a.internal/", Title: "Just info", Severity: "info"},
	)

	visible, _, err := s.ListThreats(ctx, every, b.org.ID, false, nil, 100)
	require.NoError(t, err)
	require.Len(t, visible, 2, "the excluded threat is hidden; the expired exclusion hides nothing")
	for _, th := range visible {
		require.Nil(t, th.ExclusionID)
		if th.AssetValue == "https://a.public/" {
			require.NotNil(t, th.Vulnerability)
			require.Equal(t, []string{"CVE-2020-0001"}, th.Vulnerability.CVEIDs)
			require.InDelta(t, 5.3, *th.Vulnerability.CVSSScore, 0.001)
			require.Equal(t, "Use a trusted CA.", th.Vulnerability.Remediation)
		}
	}
	all, _, err := s.ListThreats(ctx, every, b.org.ID, true, nil, 100)
	require.NoError(t, err)
	require.Len(t, all, 3)
	var hidden store.Threat
	for _, th := range all {
		if th.ExclusionID != nil {
			hidden = th
		}
	}
	require.Equal(t, byID.ID, *hidden.ExclusionID)
	require.Equal(t, 1, hidden.Detections, "an excluded detection is still recorded")
	var flagged bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT excluded FROM threat_detections WHERE threat_id = $1`, hidden.ID).Scan(&flagged))
	require.True(t, flagged)

	list, _, err := s.ListThreatExclusions(ctx, store.OneOrganization(b.org.ID), b.org.ID, nil, 100)
	require.NoError(t, err)
	require.Len(t, list, 2)
	_, _, err = s.ListThreatExclusions(ctx, store.OneOrganization(other.ID), b.org.ID, nil, 100)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.DeleteThreatExclusion(ctx, store.OneOrganization(other.ID), b.org.ID, byID.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.DeleteThreatExclusion(ctx, every, b.org.ID, byID.ID)
	require.NoError(t, err)
	visible, _, err = s.ListThreats(ctx, every, b.org.ID, false, nil, 100)
	require.NoError(t, err)
	require.Len(t, visible, 3, "deleting the exclusion shows its threats again")
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT excluded FROM threat_detections WHERE threat_id = $1`, hidden.ID).Scan(&flagged))
	require.True(t, flagged, "the detection stays flagged")
}

func TestAssetEdgesAndVulnerabilitiesAreIdempotent(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	createScan1(t, s, b.org.ID, []string{"localhost"}, "dns-resolve")
	l := acquireOne(t, s, b.worker.ID)
	ref := refOf(b.worker.ID, l)
	score := 9.8
	recs := []store.ResultRecord{
		{Kind: "edge", AssetType: "hostname", AssetValue: "LOCALHOST.", Relation: "resolves_to", TargetType: "ip", TargetValue: "127.0.0.1"},
		{Kind: "edge", AssetType: "hostname", AssetValue: "localhost", Relation: "resolves_to", TargetType: "ip", TargetValue: "127.0.0.1"},
		{Kind: "threat", AssetType: "hostname", AssetValue: "localhost", ExternalID: "CVE-1", Title: "t", Vulnerability: &store.Vulnerability{CVSSScore: &score}},
	}
	sendBatch(t, s, ref, 1, "a", recs...)
	sendBatch(t, s, ref, 2, "b", recs...)
	complete(t, s, ref, store.AttemptSucceeded, false)
	var edges, vulns, assets int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM asset_edges WHERE organization_id = $1),
		(SELECT count(*) FROM vulnerability_details v JOIN threats t ON t.id = v.threat_id WHERE t.organization_id = $1),
		(SELECT count(*) FROM assets WHERE organization_id = $1)`, b.org.ID).Scan(&edges, &vulns, &assets))
	require.Equal(t, 1, edges)
	require.Equal(t, 1, vulns)
	require.Equal(t, 2, assets)

	list, _, err := s.ListAssetEdges(ctx, store.OneOrganization(b.org.ID), b.org.ID, nil, nil, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	e := list[0]
	require.Equal(t, "hostname resolves_to ip:127.0.0.1", e.From.Type+" "+e.Relation+" "+e.To.Type+":"+e.To.Value)
	byAsset, _, err := s.ListAssetEdges(ctx, store.EveryOrganization(), b.org.ID, &e.To.ID, nil, 10)
	require.NoError(t, err)
	require.Len(t, byAsset, 1)
	other := createOrg(t, s, "other")
	_, _, err = s.ListAssetEdges(ctx, store.OneOrganization(other.ID), b.org.ID, nil, nil, 10)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestScanAssetTargets(t *testing.T) {
	s, b := setupStore(t)
	ctx := t.Context()
	every := store.EveryOrganization()
	createScan1(t, s, b.org.ID, []string{"127.0.0.1"}, "dns-resolve")
	runJob(t, s, b, store.AttemptSucceeded, asset("hostname", "svc.example.com", ""), asset("ip", "127.0.0.1", ""))
	assets, _, err := s.ListAssets(ctx, every, b.org.ID, nil, 10)
	require.NoError(t, err)
	ids := map[string]uuid.UUID{}
	for _, a := range assets {
		ids[a.Value] = a.ID
	}

	scan, _, err := s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID, Targets: []string{"10.0.0.1"},
		AssetTargets: []uuid.UUID{ids["svc.example.com"]}, Plugins: []store.ScanPlugin{{Name: "echo"}}})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids["svc.example.com"]}, scan.AssetTargets)
	l := acquireOne(t, s, b.worker.ID)
	var payload struct {
		Targets []string `json:"targets"`
	}
	require.NoError(t, json.Unmarshal(l.Task.Payload, &payload))
	require.Equal(t, []string{"10.0.0.1", "svc.example.com"}, payload.Targets, "an asset target's value joins the targets")
	complete(t, s, refOf(b.worker.ID, l), store.AttemptSucceeded, false)

	other := createOrg(t, s, "other")
	_, _, err = s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: other.ID, AssetTargets: []uuid.UUID{ids["127.0.0.1"]},
		Plugins: []store.ScanPlugin{{Name: "echo"}}})
	require.ErrorIs(t, err, store.ErrInvalid, "another organization's asset is no target")

	_, _, err = s.AddScopeTarget(ctx, every, b.org.ID, store.ScopeTargetParams{Kind: store.ScopeCIDR, Value: "127.0.0.0/8"})
	require.NoError(t, err)
	_, _, err = s.CreateScan(ctx, every, store.CreateScanParams{OrganizationID: b.org.ID,
		AssetTargets: []uuid.UUID{ids["127.0.0.1"], ids["svc.example.com"]}, Plugins: []store.ScanPlugin{{Name: "echo"}}})
	var oos *store.OutOfScopeError
	require.ErrorAs(t, err, &oos)
	require.Equal(t, []string{"svc.example.com"}, oos.Targets, "asset targets are held to scope too")
}

// A scheduled scan whose targets left the scope is skipped (error): it
// does not block the schedules claimed with it, and does not fire again.
func TestScheduledScanOutOfScopeIsSkipped(t *testing.T) {
	s, b := setupStore(t)
	t0 := scheduleOrigin()
	out := minutely(t0, store.OverlapAllow, store.CatchUpOnce)
	out.Definition = store.ScheduleDefinition{Kind: store.ScheduleScan, Scan: &store.ScheduledScan{
		Targets: []string{"out.example"}, Plugins: []store.ScheduledPlugin{{Name: "echo"}}}}
	// Created before the organization had a scope: out of it since.
	bad := createSchedule(t, s, b.org.ID, out)
	good := createSchedule(t, s, b.org.ID, minutely(t0, store.OverlapAllow, store.CatchUpOnce))
	_, _, err := s.AddScopeTarget(t.Context(), store.EveryOrganization(), b.org.ID, store.ScopeTargetParams{Kind: store.ScopeDomain, Value: "in.example"})
	require.NoError(t, err)

	fireAt(t, s, t0.Add(time.Second))
	require.Equal(t, []string{"0s skipped/error"}, summaries(t0, history(t, s, bad.ID)))
	require.Equal(t, []string{"0s created"}, summaries(t0, history(t, s, good.ID)))
	_, _, err = s.RunScheduleNow(t.Context(), store.EveryOrganization(), bad.ID, store.RunScheduleParams{})
	require.ErrorIs(t, err, store.ErrOutOfScope, "a manual run is refused as the API refuses the scan")
}
