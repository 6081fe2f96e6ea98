package store_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// New tasks and attempts get time-ordered ids (UUID version 7, migration
// 000014): the database's clock in the first 48 bits, so ids made later
// sort after earlier ones from one millisecond to the next.
func TestNewTasksAndAttemptsGetTimeOrderedIDs(t *testing.T) {
	s, b := setupStore(t)
	// The first 48 bits: milliseconds since the epoch.
	msOf := func(id uuid.UUID) int64 {
		return int64(binary.BigEndian.Uint64(append([]byte{0, 0}, id[:6]...)))
	}
	var before time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&before))

	first := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	require.Eventually(t, func() bool {
		var ahead bool
		require.NoError(t, b.pool.QueryRow(context.Background(),
			"SELECT clock_timestamp() > $1::timestamptz + interval '2 ms'", before).Scan(&ahead))
		return ahead
	}, 5*time.Second, time.Millisecond)
	second := createTask(t, s, b.org.ID, store.CreateTaskParams{})
	lease := acquireOne(t, s, b.worker.ID)

	for _, id := range []uuid.UUID{first.ID, second.ID, lease.AttemptID} {
		require.Equal(t, uuid.Version(7), id.Version(), id.String())
		require.Equal(t, uuid.RFC4122, id.Variant(), id.String())
		require.InDelta(t, before.UnixMilli(), msOf(id), float64(time.Minute.Milliseconds()), id.String())
	}
	require.Less(t, msOf(first.ID), msOf(second.ID))
	require.Less(t, first.ID.String(), second.ID.String())
}
