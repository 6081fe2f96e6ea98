// Package netfaults proves the gateway's promises under infrastructure
// faults: PostgreSQL crashing and restarting under load, and a worker's
// network path slowed past its lease, reset mid-request or cut off and
// healed (through an in-process toxiproxy on 127.0.0.1). It restarts its
// test binary's own PostgreSQL cluster, so its tests never run in parallel.
//
// The short version runs with every `go test ./...`; FAULTS_LONG=1 runs
// more tasks and more faults.
package netfaults

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/storetest"
	"github.com/worker-gateway/gateway/tests/harness"
)

func TestMain(m *testing.M) { storetest.Main(faultSetup{m}) }

// faultSetup prepares the binary's cluster for crash restarts and removes
// the gateway and worker binaries built for process tests once all ran.
type faultSetup struct{ m *testing.M }

func (s faultSetup) Run() int {
	defer harness.CleanupBinaries()
	if err := durableCommits(); err != nil {
		fmt.Fprintf(os.Stderr, "netfaults: %v\n", err)
		return 1
	}
	return s.m.Run()
}

// durableCommits turns synchronous_commit back on for every new session of
// the test role. Test clusters run with it off for speed, and an immediate
// (crash) restart would then drop commits already acknowledged to clients:
// a loss that production's durable settings cannot have and that these
// tests would rightly report. fsync may stay off: the operating system does
// not crash, only PostgreSQL's processes do.
func durableCommits() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, storetest.Cluster().URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ALTER ROLE CURRENT_USER SET synchronous_commit = on")
	return err
}
