package server

import (
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/worker-gateway/gateway/internal/buildinfo"
)

// buildInfo is gateway_build_info: always 1, its labels say what runs — the
// release and revision the build stamped (or recorded) and the Go version
// (what `gateway version` prints).
func buildInfo() prometheus.Collector {
	bi := buildinfo.Read()
	revision := bi.Revision
	if revision == "" {
		revision = "unknown"
	} else if bi.Modified && !strings.HasSuffix(bi.Version, "-dirty") {
		revision += "-modified"
	}
	version, goVersion := bi.Version, bi.GoVersion
	if goVersion == "" {
		goVersion = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gateway_build_info",
		Help:        "Always 1; the labels name the running build: module version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion},
	})
	g.Set(1)
	return g
}

// poolCollector reads the database pool's statistics at scrape time.
type poolCollector struct{ pool *pgxpool.Pool }

var (
	poolAcquiredDesc = prometheus.NewDesc("gateway_db_pool_acquired_conns", "Database pool connections in use now.", nil, nil)
	poolIdleDesc     = prometheus.NewDesc("gateway_db_pool_idle_conns", "Database pool connections idle now.", nil, nil)
	poolTotalDesc    = prometheus.NewDesc("gateway_db_pool_total_conns", "Database pool connections open now (in use, idle and being opened).", nil, nil)
	poolMaxDesc      = prometheus.NewDesc("gateway_db_pool_max_conns", "Database pool size (-db-max-conns).", nil, nil)
	poolAcquiresDesc = prometheus.NewDesc("gateway_db_pool_acquires_total", "Connections acquired from the database pool.", nil, nil)
	poolAcquireDesc  = prometheus.NewDesc("gateway_db_pool_acquire_seconds_total", "Time spent acquiring connections from the database pool (waiting included).", nil, nil)
	poolEmptyDesc    = prometheus.NewDesc("gateway_db_pool_empty_acquires_total", "Acquisitions that waited because no connection was idle (pool exhausted or still opening).", nil, nil)
	poolCanceledDesc = prometheus.NewDesc("gateway_db_pool_canceled_acquires_total", "Acquisitions given up because their context ended while waiting.", nil, nil)
	poolNewDesc      = prometheus.NewDesc("gateway_db_pool_new_conns_total", "Database connections the pool opened.", nil, nil)
)

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquiredDesc, poolIdleDesc, poolTotalDesc, poolMaxDesc,
		poolAcquiresDesc, poolAcquireDesc, poolEmptyDesc, poolCanceledDesc, poolNewDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(poolAcquiredDesc, float64(st.AcquiredConns()))
	gauge(poolIdleDesc, float64(st.IdleConns()))
	gauge(poolTotalDesc, float64(st.TotalConns()))
	gauge(poolMaxDesc, float64(st.MaxConns()))
	counter(poolAcquiresDesc, float64(st.AcquireCount()))
	counter(poolAcquireDesc, st.AcquireDuration().Seconds())
	counter(poolEmptyDesc, float64(st.EmptyAcquireCount()))
	counter(poolCanceledDesc, float64(st.CanceledAcquireCount()))
	counter(poolNewDesc, float64(st.NewConnsCount()))
}
