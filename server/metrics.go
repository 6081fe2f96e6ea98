package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
)

// metrics are one replica's Prometheus metrics, on a registry of its own
// (not the global default) so many gateways in one test process do not
// collide. Every label has a small, fixed set of values: route patterns,
// status codes and problem codes, never ids — except gateway_tasks'
// organization label, bounded to the top organizations plus "other".
type metrics struct {
	registry *prometheus.Registry

	leaseAcquisition  prometheus.Histogram
	wakeLatency       prometheus.Histogram
	wakeupsPassedOn   prometheus.Counter
	heartbeats        prometheus.Counter
	fencingRejections prometheus.Counter
	replays           *prometheus.CounterVec
	conflicts         *prometheus.CounterVec
	undelivered       prometheus.Counter
	secretUnavailable prometheus.Counter
	uploadBytes       prometheus.Counter
	rateLimited       prometheus.Counter
	httpRequests      *prometheus.CounterVec
	// Requests and long-polls have histograms of their own: a long-poll
	// lasts up to -max-wait by design, and in one histogram it would
	// swamp the p99 of everything else (and need other buckets).
	requestDuration  *prometheus.HistogramVec
	longPollDuration *prometheus.HistogramVec
	// leasePoll times lease polls from arrival to answer, apart by outcome:
	// leased (work was there, or came while waiting) or empty (the wait
	// ended with nothing), so the time to a lease is not hidden among waits.
	leasePoll         *prometheus.HistogramVec
	certificateExpiry *prometheus.GaugeVec
	routes            *http.ServeMux
}

// tasksTopOrganizations is how many organizations gateway_tasks names; the
// rest are summed under organization="other".
const tasksTopOrganizations = 20

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		registry: reg,
		leaseAcquisition: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gateway_lease_acquisition_seconds",
			Help:    "Duration of one lease acquisition transaction (every pass of a long-poll runs one).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		wakeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gateway_wake_latency_seconds",
			Help:    "Approximate wake-up latency: from the hub signalling a waiting poll to that poll answering with leases.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		wakeupsPassedOn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_wakeups_passed_on_total",
			Help: "Wake-ups a woken poll passed on to the next waiting worker: it leased nothing while a due task was still queued (one it cannot take).",
		}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_heartbeats_total",
			Help: "Leases renewed, by single and batch heartbeats (one per lease).",
		}),
		fencingRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_fencing_rejections_total",
			Help: "Lease-lost answers: requests refused with lease-lost, and leases a batch heartbeat reported lost.",
		}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_idempotent_replays_total",
			Help: "Requests answered with an earlier request's result (idempotent replays), by route.",
		}, []string{"route"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_idempotency_conflicts_total",
			Help: "Requests refused because their Idempotency-Key was reused with another request or is still in flight, by problem code.",
		}, []string{"code"}),
		secretUnavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_secret_unavailable_attempts_total",
			Help: "Attempts failed at lease time because a secret they reference could not be given (secret_unavailable).",
		}),
		undelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_undelivered_leases_released_total",
			Help: "Leases granted to a poll that went away before its answer, released at once instead of left to expire.",
		}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_upload_bytes_total",
			Help: "Artifact bytes uploaded through the gateway (fs backend uploads; direct S3 uploads bypass it).",
		}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_worker_rate_limited_total",
			Help: "Worker requests refused with 429 because the worker exceeded its request rate.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_http_requests_total",
			Help: "HTTP requests answered, by route pattern (\"unmatched\" for unknown routes) and status code.",
		}, []string{"route", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_http_request_duration_seconds",
			Help:    "Duration of HTTP requests other than long-polls, by route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		longPollDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_http_long_poll_duration_seconds",
			Help:    "Duration of long-polls (POST /v1/leases waiting for work, log follows), by route pattern: up to their wait.",
			Buckets: []float64{.01, .05, .1, .5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120},
		}, []string{"route"}),
		leasePoll: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_lease_poll_seconds",
			Help:    "Duration of lease polls (POST /v1/leases) from arrival to answer, by outcome: leased (the time to a lease) or empty (a wait that ended with nothing).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60},
		}, []string{"outcome"}),
		certificateExpiry: newCertificateExpiry(s),
	}
	for _, outcome := range []string{"leased", "empty"} {
		m.leasePoll.WithLabelValues(outcome)
	}
	for _, code := range []string{problem.IdempotencyKeyReused, problem.IdempotencyInFlight} {
		m.conflicts.WithLabelValues(code)
	}
	for _, route := range []string{"leases", "complete", "results", "tasks", "scans"} {
		m.replays.WithLabelValues(route)
	}
	reg.MustRegister(
		m.leaseAcquisition, m.wakeLatency, m.wakeupsPassedOn, m.heartbeats, m.fencingRejections, m.replays, m.conflicts,
		m.undelivered, m.secretUnavailable, m.uploadBytes, m.rateLimited, m.httpRequests,
		m.requestDuration, m.longPollDuration, m.leasePoll, m.certificateExpiry, buildInfo(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_waiting_polls",
			Help: "Long-polls waiting in this replica's hub.",
		}, func() float64 { return float64(s.hub.Waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_log_followers",
			Help: "Log follows waiting on this replica's shared log readers (one reader per followed attempt).",
		}, func() float64 { return float64(s.follows.Waiting()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_log_shared_reads_total",
			Help: "Database reads by this replica's shared log readers for followers.",
		}, func() float64 { return float64(s.store.LogReads().Shared) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_listen_connected",
			Help: "1 while this replica's LISTEN connection is up.",
		}, func() float64 {
			if s.hub.Connected() {
				return 1
			}
			return 0
		}),
		&tasksCollector{pool: s.pool, timeout: 5 * time.Second},
		&queueAgeCollector{pool: s.pool, timeout: 5 * time.Second},
		readinessCollector{s},
		poolCollector{s.pool},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// The background services' own (the sweeper's, the deliverer's, …).
	reg.MustRegister(s.services.Collectors()...)
	return m
}

// handler serves the registry in the exposition format. A failed tasks
// query leaves gateway_tasks out of that scrape (and is reported) but the
// other metrics are still served.
func (m *metrics) handler(s *Server) http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		ErrorLog:            slogPromLogger{s},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

type slogPromLogger struct{ s *Server }

func (l slogPromLogger) Println(v ...any) {
	l.s.logger.Warn("metrics scrape", "error", fmt.Sprint(v...))
}

// tasksCollector computes gateway_tasks on scrape with one grouped query.
type tasksCollector struct {
	pool    *pgxpool.Pool
	timeout time.Duration
}

var tasksDesc = prometheus.NewDesc("gateway_tasks",
	"Tasks by state and organization (the top organizations by task count by id, the rest summed as \"other\"), computed on scrape.",
	[]string{"organization", "state"}, nil)

func (c *tasksCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tasksDesc }

func (c *tasksCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT organization_id::text, state::text, count(*) FROM worker_tasks GROUP BY 1, 2`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(tasksDesc, err)
		return
	}
	var all []taskCount
	for rows.Next() {
		var c taskCount
		if err := rows.Scan(&c.org, &c.state, &c.n); err != nil {
			rows.Close()
			ch <- prometheus.NewInvalidMetric(tasksDesc, err)
			return
		}
		all = append(all, c)
	}
	if err := rows.Err(); err != nil {
		ch <- prometheus.NewInvalidMetric(tasksDesc, err)
		return
	}
	for _, c := range groupTaskCounts(all, tasksTopOrganizations) {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(c.n), c.org, c.state)
	}
}

type taskCount struct {
	org, state string
	n          int64
}

// groupTaskCounts bounds the organization label: the top organizations by
// total task count keep their id, the others are summed per state under
// "other" (ties broken by id, so the choice is stable between scrapes).
func groupTaskCounts(in []taskCount, top int) []taskCount {
	totals := map[string]int64{}
	for _, c := range in {
		totals[c.org] += c.n
	}
	orgs := make([]string, 0, len(totals))
	for o := range totals {
		orgs = append(orgs, o)
	}
	slices.SortFunc(orgs, func(a, b string) int {
		return cmp.Or(cmp.Compare(totals[b], totals[a]), cmp.Compare(a, b))
	})
	named := map[string]bool{}
	for _, o := range orgs[:min(top, len(orgs))] {
		named[o] = true
	}
	other := map[string]int64{}
	var out []taskCount
	for _, c := range in {
		if named[c.org] {
			out = append(out, c)
		} else {
			other[c.state] += c.n
		}
	}
	for state, n := range other {
		out = append(out, taskCount{"other", state, n})
	}
	slices.SortFunc(out, func(a, b taskCount) int {
		return cmp.Or(cmp.Compare(a.org, b.org), cmp.Compare(a.state, b.state))
	})
	return out
}

// requestMetrics is what handlers tell the HTTP metrics middleware about a
// request: the problem code it was answered with, if any.
type requestMetrics struct {
	mu          sync.Mutex
	problemCode string
	longPoll    bool
}

type requestMetricsKey struct{}

// noteLongPoll marks a request as a long-poll, timed apart from the others.
func noteLongPoll(ctx context.Context) {
	if rm, ok := ctx.Value(requestMetricsKey{}).(*requestMetrics); ok {
		rm.mu.Lock()
		rm.longPoll = true
		rm.mu.Unlock()
	}
}

// noteProblem records the problem a request was answered with.
func noteProblem(ctx context.Context, code string) {
	if rm, ok := ctx.Value(requestMetricsKey{}).(*requestMetrics); ok {
		rm.mu.Lock()
		rm.problemCode = code
		rm.mu.Unlock()
	}
}

// withMetrics counts requests by route pattern and status code, and
// derives the counters that are visible at the HTTP level: fencing
// rejections and idempotency conflicts (from the problem code), and replays
// of routes that mark them with Idempotent-Replayed (results, tasks, scans;
// poll and completion replays are counted by their handlers, which set no
// header).
func (m *metrics) withMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := m.route(r)
		rm := &requestMetrics{}
		r = r.WithContext(context.WithValue(r.Context(), requestMetricsKey{}, rm))
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			elapsed := time.Since(start).Seconds()
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			m.httpRequests.WithLabelValues(route, statusCode(status)).Inc()
			rm.mu.Lock()
			code, longPoll := rm.problemCode, rm.longPoll
			rm.mu.Unlock()
			if longPoll {
				m.longPollDuration.WithLabelValues(route).Observe(elapsed)
			} else {
				m.requestDuration.WithLabelValues(route).Observe(elapsed)
			}
			switch code {
			case problem.LeaseLost:
				m.fencingRejections.Inc()
			case problem.IdempotencyKeyReused, problem.IdempotencyInFlight:
				m.conflicts.WithLabelValues(code).Inc()
			}
			if status < 300 && rec.Header().Get("Idempotent-Replayed") == "true" {
				if name := replayRouteName(route); name != "" {
					m.replays.WithLabelValues(name).Inc()
				}
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// route is the request's route pattern, "unmatched" for unknown routes.
func (m *metrics) route(r *http.Request) string {
	if _, pattern := m.routes.Handler(r); pattern != "" {
		return pattern
	}
	return "unmatched"
}

func replayRouteName(pattern string) string {
	switch pattern {
	case "POST /v1/attempts/{attempt_id}/results":
		return "results"
	case "POST /v1/tasks":
		return "tasks"
	case "POST /v1/scans":
		return "scans"
	}
	return ""
}

// statusCode is the code label: the status itself, so that 404, 409 and
// 429 can be told apart (a class is code=~"4..").
func statusCode(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}

// routeMux is a mux with every route of the API registered (handlers that
// are never called), used only to find a request's route pattern.
func routeMux(si api.ServerInterface) *http.ServeMux {
	mux := http.NewServeMux()
	api.HandlerWithOptions(si, api.StdHTTPServerOptions{BaseRouter: mux})
	for _, p := range []string{"GET /openapi.yaml", "GET /openapi.json", "GET /metrics", "GET /docs", "GET /docs/", "GET /{$}"} {
		mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	return mux
}

// MetricsHandler serves the replica's metrics with no authentication, for
// the ops listener (which must stay on an internal interface).
func (s *Server) MetricsHandler() http.Handler { return s.metricsHandler }

// Registry is the replica's Prometheus registry (tests, embedding).
func (s *Server) Registry() *prometheus.Registry { return s.metrics.registry }

// OpsHandler is the plain-HTTP operations surface: /metrics, /healthz and
// /readyz, with no authentication. Serve it only on an internal address
// (gateway serve -ops-listen 127.0.0.1:9090).
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metricsHandler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeOpsJSON(w, http.StatusOK, api.Health{Status: api.Ok})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready, checks := s.readiness(r.Context())
		if !ready {
			writeOpsJSON(w, http.StatusServiceUnavailable, api.Health{Status: api.Unavailable, Checks: &checks})
			return
		}
		writeOpsJSON(w, http.StatusOK, api.Health{Status: api.Ok, Checks: &checks})
	})
	if s.cfg.OpsProfiling {
		// Profiles show code paths and sizes, never request data; still
		// off unless asked for, like everything on this listener internal.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return withNoSniff(mux)
}

func writeOpsJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveMetricsAuthenticated serves /metrics on the main listener (when no
// ops listener is configured) to a bearer API token of any scope that is not
// restricted to one organization: the metrics name every organization.
func (s *Server) serveMetricsAuthenticated(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticateBearer(r.Context(), r)
	if err != nil {
		pr := problemFor(err)
		s.securityProblem(r, pr)
		writeProblem(w, r, pr, s.logger)
		return
	}
	if p.OrganizationID != nil {
		writeProblem(w, r, newProblem(http.StatusForbidden, problem.Forbidden, "metrics cover every organization: use a token without organization scope"), s.logger)
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}

// observeLeasePoll times one answered lease poll by its outcome.
func (m *metrics) observeLeasePoll(arrived time.Time, leased bool) {
	outcome := "empty"
	if leased {
		outcome = "leased"
	}
	m.leasePoll.WithLabelValues(outcome).Observe(time.Since(arrived).Seconds())
}
