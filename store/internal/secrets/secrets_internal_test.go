package secrets

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSecretAllowedForWorker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		limit  map[string]string
		labels map[string]string
		want   bool
	}{
		{"no selector, no labels", nil, nil, true},
		{"no selector, labels", nil, map[string]string{"zone": "eu"}, true},
		{"selector, no labels", map[string]string{"zone": "eu"}, map[string]string{}, false},
		{"selector met", map[string]string{"zone": "eu"}, map[string]string{"zone": "eu", "gpu": "yes"}, true},
		{"other value", map[string]string{"zone": "eu"}, map[string]string{"zone": "us"}, false},
		{"every key needed", map[string]string{"zone": "eu", "gpu": "yes"}, map[string]string{"zone": "eu"}, false},
		{"empty value is a value", map[string]string{"zone": ""}, map[string]string{}, false},
	} {
		require.Equal(t, c.want, allowedForWorker(c.limit, c.labels), c.name)
	}
}

func TestSecretAllowedTaskTypes(t *testing.T) {
	t.Parallel()
	require.True(t, Secret{}.SecretAllowed("ai", nil))
	require.True(t, Secret{TaskTypes: []string{"ai"}}.SecretAllowed("ai", nil))
	require.False(t, Secret{TaskTypes: []string{"ai"}}.SecretAllowed("scanner_plugin", nil))
	require.False(t, Secret{TaskTypes: []string{}}.SecretAllowed("ai", nil))
	require.False(t, Secret{WorkerLabels: map[string]string{"zone": "eu"}}.SecretAllowed("ai", nil))
}
