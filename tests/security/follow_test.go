package security

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// leaseOne leases the one pending task of the worker's organizations.
func leaseOne(t *testing.T, w *harness.Worker) apiclient.Lease {
	t.Helper()
	one, wait := 1, 5
	res, err := w.Client.AcquireLeasesWithResponse(context.Background(), nil, apiclient.LeaseRequest{MaxTasks: &one, WaitSeconds: &wait})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Len(t, res.JSON200.Leases, 1)
	return res.JSON200.Leases[0]
}

func appendChunk(t *testing.T, w *harness.Worker, l apiclient.Lease, offset int64, data string) int64 {
	t.Helper()
	res, err := w.Client.AppendLogsWithResponse(context.Background(), l.AttemptId,
		&apiclient.AppendLogsParams{LeaseToken: l.LeaseToken}, apiclient.LogChunk{Offset: offset, Data: data})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200.NextOffset
}

// follow reads a task's log in follow mode from offset until it completes
// or ctx ends, and returns what it read.
func follow(ctx context.Context, c *apiclient.ClientWithResponses, task uuid.UUID, offset int) (string, error) {
	var text []byte
	yes := true
	for ctx.Err() == nil {
		res, err := c.GetTaskLogsWithResponse(ctx, task, &apiclient.GetTaskLogsParams{Offset: &offset, Follow: &yes})
		if err != nil {
			return string(text), err
		}
		if res.StatusCode() != http.StatusOK {
			return string(text), &followError{res.StatusCode(), string(res.Body)}
		}
		text = append(text, res.JSON200.Data...)
		offset = int(res.JSON200.NextOffset)
		if res.JSON200.Complete {
			return string(text), nil
		}
	}
	return string(text), nil
}

type followError struct {
	status int
	body   string
}

func (e *followError) Error() string { return strconv.Itoa(e.status) + ": " + e.body }

// readerTokens mints n reader tokens through the API.
func readerTokens(t *testing.T, g *harness.Gateway, n int) []*apiclient.ClientWithResponses {
	t.Helper()
	out := make([]*apiclient.ClientWithResponses, n)
	for i := range out {
		out[i] = g.ControlClient(t, mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "follower", Scopes: scopes(reader)}).Token)
	}
	return out
}

// followOnce sends one follow request from offset.
func followOnce(ctx context.Context, c *apiclient.ClientWithResponses, task uuid.UUID, offset int64) (*apiclient.GetTaskLogsResponse, error) {
	yes, off := true, int(offset)
	return c.GetTaskLogsWithResponse(ctx, task, &apiclient.GetTaskLogsParams{Offset: &off, Follow: &yes})
}

// The N+1-th concurrent follow of one token is refused with 429 and
// Retry-After while another token can still follow; past the replica's
// bound every token is refused. Followers that leave free their places.
func TestFollowCapPerTokenAndReplica(t *testing.T) {
	t.Parallel()
	g := harness.Start(t, harness.Options{Config: func(c *server.Config) { c.Limits.MaxFollows = 6 }})
	require.Equal(t, 4, server.DefaultConfig().Limits.FollowsPerToken)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 600})
	l := leaseOne(t, w)
	offset := appendChunk(t, w, l, 0, "started\n")
	tokens := readerTokens(t, g, 3)
	a, b, c := tokens[0], tokens[1], tokens[2]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan *apiclient.GetTaskLogsResponse, 8)
	start := func(client *apiclient.ClientWithResponses) {
		go func() {
			res, err := followOnce(ctx, client, task, offset)
			if err != nil {
				res = nil
			}
			answers <- res
		}()
	}
	waiting := func(n int) func() bool {
		return func() bool { got, _ := g.Server.LogFollowers(); return got == n }
	}
	for range 4 {
		start(a)
	}
	harness.WaitFor(t, 10*time.Second, "4 follows of token a waiting", waiting(4))

	refused := func(client *apiclient.ClientWithResponses, code string) {
		t.Helper()
		res, err := followOnce(ctx, client, task, offset)
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, res.StatusCode(), string(res.Body))
		require.Equal(t, "application/problem+json", res.HTTPResponse.Header.Get("Content-Type"))
		require.Equal(t, code, problemCode(t, res.Body))
		require.NotEmpty(t, res.HTTPResponse.Header.Get("Retry-After"))
	}
	refused(a, "capacity-exceeded")

	for range 2 {
		start(b)
	}
	harness.WaitFor(t, 10*time.Second, "token b follows too", waiting(6))
	refused(c, "too-many-requests") // the replica's bound (6 here)

	// Every admitted follower gets the next chunk, from the one reader.
	_, readers := g.Server.LogFollowers()
	require.Equal(t, 1, readers, "six followers of one attempt share one reader")
	appendChunk(t, w, l, offset, "more\n")
	for range 6 {
		res := <-answers
		require.NotNil(t, res)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, "more\n", res.JSON200.Data)
	}
	harness.WaitFor(t, 10*time.Second, "the reader stops when its followers are gone", func() bool {
		waiting, readers := g.Server.LogFollowers()
		return waiting == 0 && readers == 0
	})

	// Places are given back: a client that leaves frees its place too.
	offset += int64(len("more\n"))
	for range 4 {
		start(a)
	}
	harness.WaitFor(t, 10*time.Second, "token a follows again", waiting(4))
	cancel()
	harness.WaitFor(t, 10*time.Second, "followers whose clients left are gone", func() bool {
		waiting, readers := g.Server.LogFollowers()
		return waiting == 0 && readers == 0
	})
	ctx2 := context.Background()
	res, err := c.GetTaskLogsWithResponse(ctx2, task, &apiclient.GetTaskLogsParams{Follow: ptr(true), WaitSeconds: ptr(0)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
}

func ptr[T any](v T) *T { return &v }

// Twenty followers of one attempt read the database through one shared
// reader: over a window of appends made while all of them wait, the log is
// read exactly once per append and never by a follower's own request.
// Each follower still receives every byte, in order, once, and ends when
// the attempt ends.
func TestFollowTwentyFollowersShareOneReader(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 600})
	l := leaseOne(t, w)
	offset := appendChunk(t, w, l, 0, "started\n")
	want := "started\n"

	// Twenty followers on five tokens (four each, the default cap).
	var clients []*apiclient.ClientWithResponses
	for _, c := range readerTokens(t, g, 5) {
		for range 4 {
			clients = append(clients, c)
		}
	}
	type followed struct {
		text string
		err  error
	}
	results := make(chan followed, len(clients))
	var progress sync.Map // follower index → bytes received so far
	for i, c := range clients {
		go func() {
			var text []byte
			off := 0
			for {
				res, err := followOnce(context.Background(), c, task, int64(off))
				if err == nil && res.StatusCode() != http.StatusOK {
					err = &followError{res.StatusCode(), string(res.Body)}
				}
				if err != nil {
					results <- followed{string(text), err}
					return
				}
				text = append(text, res.JSON200.Data...)
				off = int(res.JSON200.NextOffset)
				progress.Store(i, off)
				if res.JSON200.Complete {
					results <- followed{string(text), nil}
					return
				}
			}
		}()
	}
	allWaitingAt := func(at int64) func() bool {
		return func() bool {
			for i := range clients {
				if got, ok := progress.Load(i); !ok || int64(got.(int)) != at {
					return false
				}
			}
			waiting, readers := g.Server.LogFollowers()
			return waiting == len(clients) && readers == 1
		}
	}
	harness.WaitFor(t, 20*time.Second, "20 followers caught up and waiting", allWaitingAt(offset))

	before := g.Server.Store().LogReads()
	const appends = 10
	for k := range appends {
		chunk := "line " + strconv.Itoa(k) + "\n"
		offset = appendChunk(t, w, l, offset, chunk)
		want += chunk
		harness.WaitFor(t, 20*time.Second, "every follower received chunk "+strconv.Itoa(k), allWaitingAt(offset))
	}
	after := g.Server.Store().LogReads()
	require.Zero(t, after.Direct-before.Direct, "no follower read the log itself")
	require.Equal(t, int64(appends), after.SharedWithData-before.SharedWithData,
		"the shared reader read each appended chunk once for all 20 followers")
	t.Logf("%d appends, 20 followers: %d shared reads (%d with data), %d direct reads",
		appends, after.Shared-before.Shared, after.SharedWithData-before.SharedWithData, after.Direct-before.Direct)

	res, err := w.Client.CompleteAttemptWithResponse(context.Background(), l.AttemptId,
		&apiclient.CompleteAttemptParams{LeaseToken: l.LeaseToken}, apiclient.CompleteRequest{Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	for range clients {
		got := <-results
		require.NoError(t, got.err)
		require.Equal(t, want, got.text, "every byte, in order, once")
	}
	harness.WaitFor(t, 10*time.Second, "the reader stops with its last follower", func() bool {
		waiting, readers := g.Server.LogFollowers()
		return waiting == 0 && readers == 0
	})
}

// TestFollowDatabaseLoadFigure measures, for the record, the transactions
// per second that 20 followers of one attempt cost: first while the log is
// quiet, then while a chunk is appended every 100 ms. It sleeps to measure
// and so runs only when asked:
//
//	FOLLOW_MEASURE=1 go test -count=1 -v -run TestFollowDatabaseLoadFigure ./tests/security/
func TestFollowDatabaseLoadFigure(t *testing.T) {
	if os.Getenv("FOLLOW_MEASURE") == "" {
		t.Skip("a measurement; set FOLLOW_MEASURE=1 to run it")
	}
	g := harness.Start(t)
	org := g.NewOrganization(t, "acme")
	w := g.NewWorker(t, "w1", 1, org)
	task := g.CreateTask(t, org, harness.TaskSpec{LeaseDurationSeconds: 600})
	l := leaseOne(t, w)
	offset := appendChunk(t, w, l, 0, "started\n")
	followers := readerTokens(t, g, 20)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range followers {
		wg.Go(func() { _, _ = follow(ctx, c, task, int(offset)) })
	}
	commits := func() int64 {
		var n int64
		require.NoError(t, g.Pool.QueryRow(context.Background(),
			`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
	const window = 10 * time.Second
	// Let the followers settle, and PostgreSQL publish the setup's
	// statistics: an idle backend flushes its counters up to 10 s late.
	time.Sleep(12 * time.Second)
	before, reads := commits(), g.Server.Store().LogReads()
	time.Sleep(window)
	quiet, readsAfter := commits()-before, g.Server.Store().LogReads()
	t.Logf("20 followers, quiet log: %d commits in %s = %.1f transactions/s (%d shared log reads, %d direct)",
		quiet, window, float64(quiet)/window.Seconds(), readsAfter.Shared-reads.Shared, readsAfter.Direct-reads.Direct)

	before = commits()
	appends := 0
	for deadline := time.Now().Add(window); time.Now().Before(deadline); appends++ {
		offset = appendChunk(t, w, l, offset, "line "+strconv.Itoa(appends)+"\n")
		time.Sleep(100 * time.Millisecond)
	}
	busy := commits() - before
	t.Logf("20 followers, %d appends: %d commits in %s = %.1f transactions/s (%.1f per append, the appends' own included)",
		appends, busy, window, float64(busy)/window.Seconds(), float64(busy)/float64(appends))
	cancel()
	wg.Wait()
}
