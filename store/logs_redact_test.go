package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/internal/redact"
	"github.com/worker-gateway/gateway/store"
)

// A value cut by a chunk's end is stored redacted whole: each chunk is taken
// whole, the held beginning is named on the attempt's row (never its bytes)
// and redacted with the rest; a retry of a taken chunk changes nothing.
func TestAppendRedactedLogAcrossChunks(t *testing.T) {
	t.Parallel()
	s, b := setupStore(t)
	createTask(t, s, b.org.ID, store.CreateTaskParams{})
	l := acquireOne(t, s, b.worker.ID)
	ref := refOf(b.worker.ID, l)
	const value = "a-secret-Value-42"
	// A redactor per chunk, as each request builds its own.
	redactor := func() store.LogRedactor {
		return redact.New([]redact.Secret{{Name: "A_SECRET", Version: 1, Value: value}})
	}
	const limit = 1 << 20

	chunks := []string{"login ", "a-secr", "et-Val", "ue-42 ok\n", "a-se", "cond line\n"}
	offset := int64(0)
	for i, c := range chunks {
		res, err := s.AppendRedactedLog(t.Context(), ref, offset, []byte(c), redactor(), limit)
		require.NoError(t, err)
		require.Equal(t, offset+int64(len(c)), res.NextOffset, "chunk %d is taken whole", i)
		offset = res.NextOffset
		var carry *string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT log_redact_carry FROM worker_task_attempts WHERE id = $1`, ref.AttemptID).Scan(&carry))
		if carry != nil {
			require.NotContains(t, *carry, "secr", "the carry names the held bytes, never holds them")
		}
	}
	// A retry of a chunk taken before is accepted by its offsets.
	res, err := s.AppendRedactedLog(t.Context(), ref, 6, []byte("a-secr"), redactor(), limit)
	require.NoError(t, err)
	require.Equal(t, offset, res.NextOffset)

	log, err := s.ReadTaskLog(t.Context(), store.EveryOrganization(), l.Task.ID, 0, 0, limit)
	require.NoError(t, err)
	require.Equal(t, "login [REDACTED:A_SECRET] ok\na-second line\n", string(log.Data))
}
