package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/pki"
)

// The floor scenario: the throughput scenario's workers, load generator
// code (driveWorkers) and parameters against a server on the same TLS 1.3 +
// HTTP/2 + mTLS stack whose handlers do no work: canned answers of the
// gateway's shape and size, no database, no validation (floorserver.go).
// Its rate is what the protocol and the load generator allow on this
// machine; a throughput line's ratio to it says how much of that the
// gateway reaches.
//
// The floor server runs as its own process, as the gateway does (this
// binary, re-executed with floorServeCommand), so the load generator's
// share of the machine is the same and its CPU is read the same way.

// floorProc is a running floor server process.
type floorProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	url  string
	dir  string
}

// startFloorServer writes a server certificate issued by ca, starts the
// floor server process serving tasks tasks (batch per poll at most) and
// waits until it listens.
func startFloorServer(ctx context.Context, ca *pki.CA, c throughputConfig, logf func(string, ...any)) (_ *floorProc, err error) {
	dir, err := os.MkdirTemp("", "gateway-bench-floor-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	srv, err := ca.IssueServer([]string{"127.0.0.1", "localhost"}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	certFile, keyFile, caFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")
	if err := srv.WriteFiles(certFile, keyFile); err != nil {
		return nil, err
	}
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "floor.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(exe, floorServeCommand,
		"-cert", certFile, "-key", keyFile, "-ca", caFile,
		"-tasks", fmt.Sprint(c.tasks), "-batch", fmt.Sprint(c.batch), "-wait", fmt.Sprint(c.wait))
	cmd.Stderr = logFile
	// As the gateway: its own process group, and it dies with the benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start floor server: %w", err)
	}
	p := &floorProc{cmd: cmd, done: make(chan struct{}), dir: dir}
	addr := make(chan string, 1)
	go func() {
		// The first line is the address it listens on; the rest is drained.
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			addr <- strings.TrimPrefix(sc.Text(), "listening ")
		}
		close(addr)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case a, ok := <-addr:
		if ok {
			p.url = "https://" + a
			logf("floor server process %d serving %s", cmd.Process.Pid, p.url)
			return p, nil
		}
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.stop(logf)
	return nil, fmt.Errorf("floor server did not start\nfloor log:\n%s", tailFile(filepath.Join(dir, "floor.log"), 20))
}

// stop ends the floor server (SIGTERM, SIGKILL after 15 s) and removes its
// directory.
func (p *floorProc) stop(logf func(string, ...any)) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		logf("floor server did not stop in 15 s; killing it")
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = os.RemoveAll(p.dir)
}

// floorCounts asks the floor server how many leases it granted and how many
// completions it answered.
func floorCounts(ctx context.Context, w *benchWorker) (floorServerCounts, error) {
	var c floorServerCounts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+floorCountsPath, nil)
	if err != nil {
		return c, err
	}
	res, err := w.client.Do(req)
	if err != nil {
		return c, err
	}
	defer drainClose(res)
	if err := checkStatus(res, http.StatusOK); err != nil {
		return c, err
	}
	_, err = fmt.Fscanf(res.Body, "%d %d", &c.Granted, &c.Completed)
	return c, err
}

// runFloor drives the floor server with the throughput scenario's workers
// and parameters. ca signs the server's and the workers' certificates (the
// stack's CA when there is a stack, else a new one).
func runFloor(ctx context.Context, ca *pki.CA, c throughputConfig, logf func(string, ...any)) (*Result, error) {
	r := &Result{Scenario: "floor", Tasks: c.tasks, Workers: c.workers, Batch: c.batch, CompleteMany: c.completeMany, Next: c.next}
	if ca == nil {
		var err error
		if ca, err = pki.NewCA("worker-gateway bench floor CA"); err != nil {
			return r, err
		}
	}
	fp, err := startFloorServer(ctx, ca, c, logf)
	if err != nil {
		return r, err
	}
	defer fp.stop(logf)
	pid := fp.cmd.Process.Pid

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	workers := make([]*benchWorker, 0, c.workers)
	defer func() {
		for _, w := range workers {
			w.close()
		}
	}()
	for i := range c.workers {
		name := fmt.Sprintf("bench-floor-%d", i)
		issued, err := ca.IssueClient(name, 24*time.Hour)
		if err != nil {
			return r, err
		}
		cert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
		if err != nil {
			return r, err
		}
		workers = append(workers, newBenchWorker(fp.url, uuid.New(), name, roots, cert, false))
	}
	if err := warmAll(ctx, workers); err != nil {
		return r, err
	}

	sh := newTPShared(c.tasks)
	before := readProcessCPU([]int{pid})
	logf("floor: %d workers draining, batch %d", c.workers, c.batch)
	stats := driveWorkers(ctx, "floor", workers, c, sh, logf)
	after := readProcessCPU([]int{pid})
	done := sh.completed.Load()
	summarizeDrain(r, stats, sh)
	p := usageBetween(before, after, sh.wall())
	r.FloorServerCPUCores = p.gatewayCores()
	r.FloorServerCPUMsPerTask = msPer(p.gatewayCPU, p.haveGW, int(done))
	r.LoadgenCPUCores, r.MachineCPUCores, r.StealCPUCores = p.loadgenCores(), p.machineCores(), p.stealCores()
	if mb, err := peakRSSMB(pid); err == nil {
		r.FloorServerRSSMB = ptr(round(mb, 1))
	}
	r.HTTPErrors, _ = sh.errors.snapshot()
	r.errorText = sh.errors.String()

	counts, err := floorCounts(context.WithoutCancel(ctx), workers[0])
	if err != nil {
		return r, fmt.Errorf("floor server counts: %w", err)
	}
	v := floorVerification{Tasks: c.tasks, Granted: counts.Granted, Answered: counts.Completed, Completed: int(done), Duplicates: r.ClientDuplicates}
	v.ok = v.Granted == c.tasks && v.Answered == c.tasks && v.Completed == c.tasks && v.Duplicates == 0
	r.Verification, r.Verified = v, v.ok
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s after %d of %d tasks", stopReason(ctx), done, c.tasks)
	}
	return r, nil
}

// floorVerification is what the floor server and the workers counted.
type floorVerification struct {
	Tasks      int `json:"tasks"`
	Granted    int `json:"granted"`
	Answered   int `json:"completions_answered"`
	Completed  int `json:"completed"`
	Duplicates int `json:"client_duplicates"`
	ok         bool
}

func (v floorVerification) String() string {
	return fmt.Sprintf("%s: %d tasks, the server granted %d leases and answered %d completions, the workers completed %d, %d more than once",
		verdictOf(v.ok), v.Tasks, v.Granted, v.Answered, v.Completed, v.Duplicates)
}

// applyFloor states a throughput result's ratios to the floor of the same
// run: tasks/s ÷ the floor's, and gateway CPU per task ÷ the floor
// server's.
func applyFloor(r, floor *Result) {
	if floor == nil || floor.Error != "" || !floor.Verified {
		return
	}
	r.FloorTasksPerSec = floor.TasksPerSec
	r.FloorRatio = ratio(r.TasksPerSec, floor.TasksPerSec)
	r.FloorCPURatio = ratio(r.GatewayCPUMsPerTask, floor.FloorServerCPUMsPerTask)
}

// floorText is what a throughput line says of the floor ("0.31× floor
// (9800 tasks/s)"), or "" when there is none.
func floorText(r *Result) string {
	if r.FloorRatio == nil || r.FloorTasksPerSec == nil {
		return ""
	}
	return fmt.Sprintf("%.2f× floor (%g tasks/s)", *r.FloorRatio, *r.FloorTasksPerSec)
}

// withFloor is floorText after a dash, for the end of a throughput line.
func withFloor(r *Result) string {
	if t := floorText(r); t != "" {
		return " — " + t
	}
	return ""
}

// completionsOf says how a throughput or floor run completed its leases.
func completionsOf(r *Result) string {
	how := "one completion per call"
	if r.CompleteMany {
		how = "completions batched per poll"
	}
	if r.Next {
		how += ", next leases with completions"
	}
	return how
}
