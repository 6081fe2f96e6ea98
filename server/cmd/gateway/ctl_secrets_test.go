package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Values come from standard input or a file and never appear in the
// command's output; a secret is named by id or by name with --org.
func TestCtlSecrets(t *testing.T) {
	g := harness.Start(t)
	ctl := newAdminCtl(t, g)
	ok := func(stdin string, args ...string) string {
		t.Helper()
		secretInput = strings.NewReader(stdin)
		return ctl.ok(args...)
	}
	org := g.NewOrganization(t, "acme").String()

	var sec apiclient.Secret
	out := ok("from-stdin-value\n", "secrets", "create", "--org", org, "--name", "DEPLOY_KEY", "--task-types", "ai", "--json")
	require.NotContains(t, out, "from-stdin-value")
	require.NoError(t, json.Unmarshal([]byte(out), &sec))
	require.Equal(t, "DEPLOY_KEY", sec.Name)
	require.Equal(t, []apiclient.TaskType{"ai"}, *sec.TaskTypes)
	require.Regexp(t, sec.Id.String()+`\s+`+org+`\s+DEPLOY_KEY\s+1\s+ai`, ok("", "secrets", "list", "--org", org))

	file := filepath.Join(t.TempDir(), "value")
	require.NoError(t, os.WriteFile(file, []byte("from-file-value\n"), 0o600))
	out = ok("", "secrets", "replace", "DEPLOY_KEY", "--org", org, "--from-file", file, "--worker-labels", "zone=eu")
	require.Regexp(t, `DEPLOY_KEY\s+2\s+zone=eu`, out)
	require.NotContains(t, out, "from-file-value")

	// The stored value is the file's, without its trailing newline.
	sealed, err := g.Store.SealedSecrets(context.Background(), []store.SecretRef{{OrganizationID: sec.OrganizationId, Name: "DEPLOY_KEY"}})
	require.NoError(t, err)
	require.Len(t, sealed, 1)
	value, err := secretbox.NewKeyring(harness.SecretsKey(t)).Open(sealed[0].Sealed, sealed[0].AAD())
	require.NoError(t, err)
	require.Equal(t, "from-file-value", string(value))

	_, errOut, code := ctl.run("secrets", "create", "--org", org, "--name", "EMPTY")
	require.Equal(t, 2, code, errOut)

	require.Contains(t, ok("", "secrets", "delete", sec.Id.String()), "DEPLOY_KEY")
	require.NotContains(t, ok("", "secrets", "list", "--org", org), "DEPLOY_KEY")
}
