package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/server/api"
)

// floorServeCommand, as the first argument, makes this binary the floor
// server (floor.go starts it).
const floorServeCommand = "floor-serve"

// floorCountsPath answers "GRANTED COMPLETED": the leases the floor server
// granted and the completions it answered.
const floorCountsPath = "/floor/counts"

// floorServerCounts is what floorCountsPath answers.
type floorServerCounts struct {
	Granted, Completed int
}

// floorServeMain runs the floor server: it prints "listening ADDR" on
// stdout once it accepts connections and serves until SIGTERM.
func floorServeMain(args []string) int {
	fs := flag.NewFlagSet(floorServeCommand, flag.ContinueOnError)
	certFile := fs.String("cert", "", "server certificate (PEM)")
	keyFile := fs.String("key", "", "server key (PEM)")
	caFile := fs.String("ca", "", "CA the client certificates must chain to (PEM)")
	tasks := fs.Int("tasks", 0, "leases to grant in all")
	batch := fs.Int("batch", 1, "leases per poll at most")
	wait := fs.Int("wait", 1, "seconds an empty poll waits")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := log.New(os.Stderr, "floor-serve: ", log.LstdFlags)
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		logger.Print(err)
		return 1
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		logger.Print(err)
		return 1
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		logger.Printf("%s holds no PEM certificate", *caFile)
		return 1
	}
	f, err := newFloorServer(*tasks, *batch, time.Duration(*wait)*time.Second, time.Now())
	if err != nil {
		logger.Print(err)
		return 1
	}
	tc := floorTLSConfig(cert, roots)
	srv := newFloorHTTPServer(f.routes(), tc, logger)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logger.Print(err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, tc)) }()
	fmt.Printf("listening %s\n", ln.Addr())
	select {
	case err := <-errc:
		logger.Print(err)
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.Print(err)
	}
	return 0
}

// floorTLSConfig is the gateway's own TLS configuration (server.TLSConfig:
// TLS 1.3, h2 and http/1.1), with the client certificate required and
// verified against the CA that issued the workers'. The gateway only
// requests one and identifies the worker by its fingerprint; the
// connections are opened before the measured window, so the handshake's
// difference does not enter the figures.
func floorTLSConfig(cert tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	tc := server.TLSConfig(cert)
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	tc.ClientCAs = clientCAs
	return tc
}

// newFloorHTTPServer has the timeouts of the gateway's server with its
// default configuration.
func newFloorHTTPServer(h http.Handler, tc *tls.Config, logger *log.Logger) *http.Server {
	return server.HTTPServer(h, tc, server.DefaultConfig(), logger)
}

// floorServer answers the worker routes the throughput scenario uses with
// canned answers: no database, no validation. It grants tasks leases in
// all, then lets polls wait out their wait_seconds empty, as the gateway
// does with nothing left to lease.
type floorServer struct {
	tasks     int64
	batch     int
	wait      time.Duration
	granted   atomic.Int64
	completed atomic.Int64
	// next numbers the leases: attempt and task ids and lease tokens are
	// made from it, unique within the process.
	next atomic.Uint64
	// idBase is the random part of every id and token.
	idBase [16]byte
	// requests numbers the answers' X-Request-Id, different on each as
	// the gateway's (HPACK cannot index it away).
	requests atomic.Uint64

	lease, completeOne, completeItem floorTemplate
}

// Slots of the templates: the values a canned answer gets per lease.
const (
	slotAttemptID = iota
	slotLeaseToken
	slotTaskID
)

// Stand-ins the templates are cut at: encoded like the values they stand
// for, and nowhere else in an answer.
var (
	sentinelAttempt = uuid.MustParse("aaaaaaaa-aaaa-4aaa-aaaa-aaaaaaaaaaaa")
	sentinelTask    = uuid.MustParse("cccccccc-cccc-4ccc-8ccc-cccccccccccc")
	sentinelToken   = string(bytes.Repeat([]byte("b"), 64)) // 256 bits in hex, as the gateway's
)

func newFloorServer(tasks, batch int, wait time.Duration, now time.Time) (*floorServer, error) {
	f := &floorServer{tasks: int64(tasks), batch: max(1, batch), wait: wait}
	_, _ = rand.Read(f.idBase[:])
	// What the gateway answers for a no-op task of the throughput scenario
	// (the same fields, and the same sizes: 455 bytes for one lease, 201
	// for a completion): lease_duration_seconds 30 (the default), heartbeat
	// a third of it, max_attempts 3, timestamps with microseconds as
	// PostgreSQL keeps them (the last digit not 0, which JSON would drop).
	expires := now.UTC().Add(30 * time.Second).Truncate(time.Microsecond)
	if expires.Nanosecond()%10000 == 0 {
		expires = expires.Add(time.Microsecond)
	}
	org := uuid.New()
	var err error
	f.lease, err = newFloorTemplate(api.Lease{
		AttemptId:                sentinelAttempt,
		LeaseToken:               sentinelToken,
		LeaseExpiresAt:           expires,
		LeaseTtlSeconds:          30,
		HeartbeatIntervalSeconds: 10,
		Task: api.TaskSnapshot{
			Id:             sentinelTask,
			TaskType:       api.TaskTypeScannerPlugin,
			OrganizationId: org,
			Payload:        api.JSONObject(`{"plugin":"echo"}`), // the tasks insertTasks creates
			AttemptNumber:  1,
			MaxAttempts:    3,
		},
	})
	if err != nil {
		return nil, err
	}
	result := api.CompleteResponse{
		AttemptId:     sentinelAttempt,
		TaskId:        sentinelTask,
		AttemptStatus: api.AttemptStatusSucceeded,
		TaskState:     api.TaskStateCompleted,
		FinishedAt:    expires.Add(-29 * time.Second),
	}
	if f.completeOne, err = newFloorTemplate(result); err != nil {
		return nil, err
	}
	f.completeItem, err = newFloorTemplate(api.CompletionAnswer{AttemptId: sentinelAttempt, Status: http.StatusOK, Result: &result})
	return f, err
}

// routes are the floor server's: the three worker calls of the throughput
// scenario, the health checks, and its counts.
func (f *floorServer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", f.health)
	mux.HandleFunc("GET /readyz", f.health)
	mux.HandleFunc("POST /v1/leases", f.acquire)
	mux.HandleFunc("POST /v1/attempts/{id}/complete", f.complete)
	mux.HandleFunc("POST /v1/attempts/complete", f.completeMany)
	mux.HandleFunc("GET "+floorCountsPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d %d\n", f.granted.Load(), f.completed.Load())
	})
	return mux
}

func (f *floorServer) health(w http.ResponseWriter, _ *http.Request) {
	f.headers(w, false)
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// headers are those the gateway sends with a JSON answer: a request id,
// nosniff, and no-store on answers that carry a secret (a lease token).
func (f *floorServer) headers(w http.ResponseWriter, secret bool) {
	h := w.Header()
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], f.requests.Add(1)^binary.BigEndian.Uint64(f.idBase[:8]))
	h.Set("X-Request-Id", hex.EncodeToString(id[:]))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", "application/json")
	if secret {
		h.Set("Cache-Control", "no-store")
	}
}

// take reserves up to n of the leases left to grant.
func (f *floorServer) take(n int) int {
	for {
		g := f.granted.Load()
		k := min(int64(n), f.tasks-g)
		if k <= 0 {
			return 0
		}
		if f.granted.CompareAndSwap(g, g+k) {
			return int(k)
		}
	}
}

func (f *floorServer) acquire(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	k := f.take(f.batch)
	if k == 0 {
		// Nothing left: wait as a long-poll does, or until the worker
		// gives up.
		t := time.NewTimer(f.wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	f.headers(w, true)
	_, _ = w.Write(f.leaseAnswer(k))
}

// leaseAnswer is the answer granting k new leases.
func (f *floorServer) leaseAnswer(k int) []byte {
	buf := make([]byte, 0, 16+k*(f.lease.size+128))
	buf = append(buf, '{')
	buf = f.appendLeases(buf, k)
	return append(buf, "}\n"...)
}

// nextAsked is how many leases a completion body asks for with `next`
// (max_tasks, at most the server's batch), or -1 when it does not ask.
func (f *floorServer) nextAsked(body []byte) int {
	i := bytes.Index(body, []byte(`"next":`))
	if i < 0 {
		return -1
	}
	var next struct {
		MaxTasks int `json:"max_tasks"`
	}
	rest := body[i+len(`"next":`):]
	if end := bytes.IndexByte(rest, '}'); end >= 0 {
		_ = json.Unmarshal(rest[:end+1], &next)
	}
	return min(max(next.MaxTasks, 1), f.batch)
}

// appendLeases appends `"leases":[…]` granting k new leases.
func (f *floorServer) appendLeases(buf []byte, k int) []byte {
	buf = append(buf, `"leases":[`...)
	for i := range k {
		if i > 0 {
			buf = append(buf, ',')
		}
		n := f.next.Add(1)
		var vals [3][]byte
		vals[slotAttemptID] = f.appendID(nil, idAttempt, n)
		vals[slotLeaseToken] = f.appendToken(nil, n)
		vals[slotTaskID] = f.appendID(nil, idTask, n)
		buf = f.lease.render(buf, vals)
	}
	return append(buf, ']')
}

func (f *floorServer) complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := []byte(r.PathValue("id"))
	task, ok := taskIDOf(id)
	if !ok {
		http.Error(w, "no such attempt", http.StatusNotFound)
		return
	}
	f.completed.Add(1)
	next := f.nextAsked(body)
	f.headers(w, true) // its answer may carry leases: the gateway marks it no-store
	buf := f.completeOne.render(make([]byte, 0, f.completeOne.size+80), [3][]byte{slotAttemptID: id, slotTaskID: task})
	if next >= 0 {
		// The gateway answers the next leases inside the completion object.
		buf = append(buf[:len(buf)-1], ',')
		buf = f.appendLeases(buf, f.take(next))
		buf = append(buf, '}')
	}
	_, _ = w.Write(append(buf, '\n'))
}

// completeMany answers every completion of the body with 200, in order.
// It only looks for the attempt ids; the rest of the body is not read.
func (f *floorServer) completeMany(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	next := f.nextAsked(body)
	key := []byte(`"attempt_id":"`)
	buf := make([]byte, 0, 32+bytes.Count(body, key)*(f.completeItem.size+80))
	buf = append(buf, `{"completions":[`...)
	n := 0
	for {
		i := bytes.Index(body, key)
		if i < 0 {
			break
		}
		body = body[i+len(key):]
		id, rest, found := bytes.Cut(body, []byte(`"`))
		task, ok := taskIDOf(id)
		if !found || !ok {
			http.Error(w, "malformed attempt id", http.StatusBadRequest)
			return
		}
		body = rest
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = f.completeItem.render(buf, [3][]byte{slotAttemptID: id, slotTaskID: task})
		n++
	}
	f.completed.Add(int64(n))
	buf = append(buf, ']')
	if next >= 0 {
		buf = append(buf, ',')
		buf = f.appendLeases(buf, f.take(next))
	}
	f.headers(w, true)
	_, _ = w.Write(append(buf, "}\n"...))
}

// Kinds of id: byte 7 of a floor id says which it is (characters 16 and
// 17 of its text), so an attempt's task id follows from the attempt id.
const (
	idAttempt, idAttemptHex = 0xa7, "a7"
	idTask, idTaskHex       = 0x7a, "7a"
)

// appendID appends id number n of a kind in UUID form (version 4 and
// variant bits set, as the gateway's ids have).
func (f *floorServer) appendID(buf []byte, kind byte, n uint64) []byte {
	b := f.idBase
	b[6] = 0x40 | b[6]&0x0f
	b[7] = kind
	binary.BigEndian.PutUint64(b[8:], n)
	b[8] = 0x80 | b[8]&0x3f
	return append(buf, uuid.UUID(b).String()...)
}

// appendToken appends lease token n: 64 hex characters.
func (f *floorServer) appendToken(buf []byte, n uint64) []byte {
	var b [32]byte
	copy(b[:], f.idBase[:])
	copy(b[16:24], f.idBase[:])
	binary.BigEndian.PutUint64(b[24:], n)
	return hex.AppendEncode(buf, b[:])
}

// taskIDOf is the task id of a floor attempt id (see idAttempt).
func taskIDOf(attemptID []byte) ([]byte, bool) {
	if len(attemptID) != 36 || string(attemptID[16:18]) != idAttemptHex {
		return nil, false
	}
	task := bytes.Clone(attemptID)
	copy(task[16:18], idTaskHex)
	return task, true
}

// floorTemplate is a canned JSON answer cut where per-lease values go:
// parts[0] slot[0] parts[1] slot[1] … parts[len(slots)].
type floorTemplate struct {
	parts [][]byte
	slots []int
	size  int // of the parts
}

// newFloorTemplate encodes v as the gateway does (encoding/json) and cuts
// it at the sentinels.
func newFloorTemplate(v any) (floorTemplate, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return floorTemplate{}, err
	}
	sentinels := [3][]byte{
		slotAttemptID:  []byte(sentinelAttempt.String()),
		slotLeaseToken: []byte(sentinelToken),
		slotTaskID:     []byte(sentinelTask.String()),
	}
	var t floorTemplate
	for {
		at, slot := -1, -1
		for s, sentinel := range sentinels {
			if i := bytes.Index(b, sentinel); i >= 0 && (at < 0 || i < at) {
				at, slot = i, s
			}
		}
		if at < 0 {
			break
		}
		t.parts = append(t.parts, b[:at])
		t.slots = append(t.slots, slot)
		b = b[at+len(sentinels[slot]):]
	}
	t.parts = append(t.parts, b)
	for _, p := range t.parts {
		t.size += len(p)
	}
	if len(t.slots) == 0 {
		return t, errors.New("floor template without a slot")
	}
	return t, nil
}

// render appends the answer with vals in its slots.
func (t floorTemplate) render(buf []byte, vals [3][]byte) []byte {
	buf = append(buf, t.parts[0]...)
	for i, s := range t.slots {
		buf = append(buf, vals[s]...)
		buf = append(buf, t.parts[i+1]...)
	}
	return buf
}
