package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestParseSelector(t *testing.T) {
	s, err := parseSelector(`zone=eu, tier in (gpu, tpu),env==prod, legacy notin (yes), team!=ops, gpu, !spot`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "eu", "env": "prod"}, *s.MatchLabels)
	require.Equal(t, []apiclient.LabelRequirement{
		{Key: "tier", Operator: apiclient.LabelIn, Values: &[]string{"gpu", "tpu"}},
		{Key: "legacy", Operator: apiclient.LabelNotIn, Values: &[]string{"yes"}},
		{Key: "team", Operator: apiclient.LabelNotIn, Values: &[]string{"ops"}},
		{Key: "gpu", Operator: apiclient.LabelExists},
		{Key: "spot", Operator: apiclient.LabelDoesNotExist},
	}, *s.MatchExpressions)
	require.Equal(t, `env=prod,zone=eu,tier in (gpu,tpu),legacy notin (yes),team notin (ops),gpu,!spot`, selectorText(*s),
		"shown in the syntax it is read in")

	s, err = parseSelector(`{"match_labels": {"zone": "eu"}}`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"zone": "eu"}, *s.MatchLabels)
	s, err = parseSelector("")
	require.NoError(t, err)
	require.Nil(t, s)
	for _, bad := range []string{"a,,b", "tier between (1,2)", "tier in gpu)", "{nope"} {
		_, err := parseSelector(bad)
		require.Error(t, err, bad)
	}

	changes, err := parseLabelChanges([]string{"zone=eu", "empty=", "legacy-"})
	require.NoError(t, err)
	require.Equal(t, apiclient.LabelChanges{"zone": ptr("eu"), "empty": ptr(""), "legacy": nil}, changes)
	for _, bad := range []string{"=x", "-", "novalue"} {
		_, err := parseLabelChanges([]string{bad})
		require.Error(t, err, bad)
	}
}

// TestCtlLabels: an operator labels a worker with `ctl workers label` and
// creates tasks with --selector and --pin.
func TestCtlLabels(t *testing.T) {
	g := harness.Start(t)
	c := newAdminCtl(t, g)
	ctl, ok := c.run, c.ok
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w", 2, org)
	id := w.ID.String()

	require.Regexp(t, `Labels:\s+tier=gpu,zone=eu\n`, ok("workers", "label", id, "zone=eu", "tier=gpu"))
	require.Regexp(t, `Labels:\s+zone=eu-west\n`, ok("workers", "label", id, "tier-", "zone=eu-west"))
	require.Regexp(t, `Labels:\s+zone=eu-west\n`, ok("workers", "get", id))
	_, errOut, code := ctl("workers", "label", id)
	require.Equal(t, 2, code, "at least one change")
	require.Contains(t, errOut, "usage: gateway ctl workers label ID KEY=VALUE...")
	_, errOut, code = ctl("workers", "label", id, "Zone=eu")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "invalid label key")

	var task apiclient.Task
	require.NoError(t, json.Unmarshal([]byte(ok("tasks", "create", "--org", org.String(), "--payload", `{"plugin": "echo"}`,
		"--selector", "zone in (eu-west,eu-north),!spot", "--pin", id, "--json")), &task))
	require.Equal(t, w.ID, *task.PinnedWorkerId)
	require.Len(t, *task.LabelSelector.MatchExpressions, 2)
	out := ok("tasks", "get", task.Id.String())
	require.Regexp(t, `Selector:\s+!spot,zone in \(eu-north,eu-west\)`, out, "as stored: canonical")
	require.Regexp(t, `Pinned to:\s+`+id, out)
	require.Regexp(t, `Pending reason:\s+pinned_worker_unavailable`, out, "the worker never polled")
}
