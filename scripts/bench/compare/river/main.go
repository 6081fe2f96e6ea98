// Command river drains no-op jobs with River (github.com/riverqueue/river),
// the Go job queue on PostgreSQL, so that the gateway's benchmark can set
// River's throughput next to its own on the same PostgreSQL
// (go run ./scripts/bench -scenario throughput -compare river).
//
// It is its own Go module, so River never enters the gateway's go.mod.
//
// Given a database, it migrates River's schema into it (rivermigrate),
// empties river_job, inserts -jobs no-op jobs in batches (InsertManyFast),
// then starts a River client with a worker that does nothing and waits
// until every job is completed. River's settings default to those of its
// own benchmark (`river bench`): 2000 workers, 2 ms fetch cooldown, 20 ms
// fetch poll interval, pgx's default pool; River always completes jobs
// through its batch completer.
//
// Standard output gets two JSON lines: {"event":"inserted",…} once the jobs
// exist, and {"event":"done",…} with jobs, seconds and jobs_per_sec once
// the last completion was persisted. The time is counted from the client's
// start to the last completion event, which River emits after the
// completer wrote the job's completed state. With -wait-start the command
// reads a line from standard input between the two, so a parent process
// can take its CPU readings of PostgreSQL exactly around the work.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is the job: its worker returns at once.
type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

type settings struct {
	databaseURL       string
	jobs              int
	workers           int
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
	maxConns          int
	insertBatch       int
	waitStart         bool
	timeLimit         time.Duration
}

// inserted and done are the two lines written to standard output.
type inserted struct {
	Event         string  `json:"event"`
	Jobs          int     `json:"jobs"`
	InsertSeconds float64 `json:"insert_seconds"`
}

type done struct {
	Event               string  `json:"event"`
	Jobs                int     `json:"jobs"`
	Completed           int     `json:"completed"`
	Failed              int     `json:"failed"`
	Seconds             float64 `json:"seconds"`
	JobsPerSec          float64 `json:"jobs_per_sec"`
	Workers             int     `json:"workers"`
	FetchCooldownMs     float64 `json:"fetch_cooldown_ms"`
	FetchPollIntervalMs float64 `json:"fetch_poll_interval_ms"`
	MaxConns            int32   `json:"max_conns"`
	RiverVersion        string  `json:"river_version"`
}

// riverVersion is the River release this module requires (go.mod).
const riverVersion = "v0.51.2"

func main() {
	var s settings
	flag.StringVar(&s.databaseURL, "database-url", "", "PostgreSQL URL of the database River uses (its schema is migrated into it and river_job is emptied)")
	flag.IntVar(&s.jobs, "jobs", 100000, "no-op jobs to insert and drain")
	flag.IntVar(&s.workers, "workers", 2000, "MaxWorkers of the default queue (river bench: 2000)")
	flag.DurationVar(&s.fetchCooldown, "fetch-cooldown", 2*time.Millisecond, "River's FetchCooldown (river bench: 2ms)")
	flag.DurationVar(&s.fetchPollInterval, "fetch-poll-interval", 20*time.Millisecond, "River's FetchPollInterval (river bench: 20ms)")
	flag.IntVar(&s.maxConns, "max-conns", 0, "pgx pool size; 0 = pgx's default, max(4, CPUs), as river bench")
	flag.IntVar(&s.insertBatch, "insert-batch", 5000, "jobs per InsertManyFast call")
	flag.BoolVar(&s.waitStart, "wait-start", false, "after inserting, wait for a line on standard input before starting the client")
	flag.DurationVar(&s.timeLimit, "time-limit", 10*time.Minute, "give up after this long")
	flag.Parse()
	if s.databaseURL == "" || s.jobs < 1 || s.workers < 1 || s.insertBatch < 1 || s.maxConns < 0 {
		fmt.Fprintln(os.Stderr, "river: -database-url is required; -jobs, -workers, -insert-batch ≥ 1; -max-conns ≥ 0")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelLimit := context.WithTimeout(ctx, s.timeLimit)
	defer cancelLimit()
	if err := run(ctx, s); err != nil {
		fmt.Fprintf(os.Stderr, "river: %v\n", err)
		cancelLimit()
		os.Exit(1)
	}
}

func run(ctx context.Context, s settings) error {
	cfg, err := pgxpool.ParseConfig(s.databaseURL)
	if err != nil {
		return err
	}
	if s.maxConns > 0 {
		cfg.MaxConns = int32(s.maxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)

	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// A run starts from an empty table, as river bench does.
	if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return err
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     s.fetchCooldown,
		FetchPollInterval: s.fetchPollInterval,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.workers}},
		Workers:           workers,
	})
	if err != nil {
		return err
	}

	t0 := time.Now()
	batch := make([]river.InsertManyParams, 0, s.insertBatch)
	for i := range s.jobs {
		batch = append(batch, river.InsertManyParams{Args: noopArgs{Num: i}})
		if len(batch) == cap(batch) || i == s.jobs-1 {
			if _, err := client.InsertManyFast(ctx, batch); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			batch = batch[:0]
		}
	}
	if err := emit(inserted{Event: "inserted", Jobs: s.jobs, InsertSeconds: time.Since(t0).Seconds()}); err != nil {
		return err
	}
	if s.waitStart {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the start line: %w", err)
		}
	}

	// Completions are counted from the client's events, which come after
	// the completer persisted the job's state. The channel holds every
	// job's event, so none is dropped should this loop fall behind.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: s.jobs + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("start client: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			fmt.Fprintf(os.Stderr, "river: stop client: %v\n", err)
		}
	}()

	var completed, failed int
	var last time.Time
	for completed+failed < s.jobs {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %d of %d jobs completed", ctx.Err(), completed, s.jobs)
		case ev, ok := <-events:
			if !ok {
				return errors.New("the client's event channel closed")
			}
			last = time.Now()
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				failed++
			}
		}
	}
	secs := last.Sub(start).Seconds()
	if err := emit(done{
		Event: "done", Jobs: s.jobs, Completed: completed, Failed: failed,
		Seconds: secs, JobsPerSec: float64(completed) / secs,
		Workers: s.workers, FetchCooldownMs: ms(s.fetchCooldown), FetchPollIntervalMs: ms(s.fetchPollInterval),
		MaxConns: pool.Config().MaxConns, RiverVersion: riverVersion,
	}); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d jobs failed or were cancelled", failed)
	}
	return nil
}

func emit(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", b)
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
