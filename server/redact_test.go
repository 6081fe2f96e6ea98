package server

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
)

// A worker operation with a body and no redaction rule stops the handler
// from being built.
func TestCheckWorkerTextRules(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkWorkerTextRules(workerTextRules))
	for op := range workerTextRules {
		without := maps.Clone(workerTextRules)
		delete(without, op)
		err := checkWorkerTextRules(without)
		require.Error(t, err, op)
		require.Contains(t, err.Error(), op)
	}
}
