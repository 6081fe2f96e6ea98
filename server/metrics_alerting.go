package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics in this file exist for alerting (deploy/prometheus/alerts.yml):
// readiness as the load balancer sees it, the certificates' expiry and how
// long the oldest due task has waited (webhook tries by outcome are the
// deliverer's own: webhookdeliver).

var (
	readyDesc = prometheus.NewDesc("gateway_ready",
		"1 while this replica is ready (what /readyz answers: database, schema and LISTEN connection), checked on scrape.", nil, nil)
	readinessCheckDesc = prometheus.NewDesc("gateway_readiness_check",
		"1 while one of /readyz's checks (database, schema, listen) passes on this replica, checked on scrape.", []string{"check"}, nil)
	queueAgeDesc = prometheus.NewDesc("gateway_queue_oldest_age_seconds",
		"How long the oldest due task (pending or retry_wait, available now) has waited, by organization (the organizations that waited longest by id, the rest as \"other\"), computed on scrape.",
		[]string{"organization"}, nil)
)

// readinessCollector reports /readyz's verdict and each of its checks.
type readinessCollector struct{ s *Server }

func (readinessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- readyDesc
	ch <- readinessCheckDesc
}

func (c readinessCollector) Collect(ch chan<- prometheus.Metric) {
	ready, checks := c.s.readiness(context.Background())
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, boolGauge(ready))
	for check, state := range checks {
		ch <- prometheus.MustNewConstMetric(readinessCheckDesc, prometheus.GaugeValue, boolGauge(state == "ok"), check)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newCertificateExpiry is gateway_certificate_expiry_timestamp_seconds;
// the enrollment CA is known at construction, the serving certificate once
// Serve is given it.
func newCertificateExpiry(s *Server) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_certificate_expiry_timestamp_seconds",
		Help: "When a certificate this replica uses expires (Unix time), by certificate: serving (the TLS listener's) and enrollment_ca (signs enrolled workers' certificates).",
	}, []string{"certificate"})
	if s.cfg.Identity.CA != nil && s.cfg.Identity.CA.Cert != nil {
		g.WithLabelValues("enrollment_ca").Set(float64(s.cfg.Identity.CA.Cert.NotAfter.Unix()))
	}
	return g
}

// noteServingCertificate records the serving certificate's expiry (the
// leaf; chains the listener also sends expire no sooner in practice).
func (m *metrics) noteServingCertificate(cfg *tls.Config) {
	if cfg == nil || len(cfg.Certificates) == 0 {
		return
	}
	cert := cfg.Certificates[0]
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	if leaf != nil {
		m.certificateExpiry.WithLabelValues("serving").Set(float64(leaf.NotAfter.Unix()))
	}
}

// queueAgeCollector computes gateway_queue_oldest_age_seconds from the
// queue of leasable tasks (worker_task_queue holds only those, so the query
// does not read finished tasks).
type queueAgeCollector struct {
	pool    *pgxpool.Pool
	timeout time.Duration
}

// queueAgeTopOrganizations is how many organizations the queue age names.
const queueAgeTopOrganizations = 20

func (*queueAgeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueAgeDesc }

func (c *queueAgeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT organization_id::text, extract(epoch FROM now() - min(available_at))::float8
		FROM worker_task_queue WHERE available_at <= now() GROUP BY 1`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queueAgeDesc, err)
		return
	}
	var ages []queueAge
	for rows.Next() {
		var a queueAge
		if err := rows.Scan(&a.org, &a.seconds); err != nil {
			rows.Close()
			ch <- prometheus.NewInvalidMetric(queueAgeDesc, err)
			return
		}
		ages = append(ages, a)
	}
	if err := rows.Err(); err != nil {
		ch <- prometheus.NewInvalidMetric(queueAgeDesc, err)
		return
	}
	for _, a := range groupQueueAges(ages, queueAgeTopOrganizations) {
		ch <- prometheus.MustNewConstMetric(queueAgeDesc, prometheus.GaugeValue, a.seconds, a.org)
	}
}

type queueAge struct {
	org     string
	seconds float64
}

// groupQueueAges bounds the organization label: the organizations that
// waited longest keep their id, the others are "other" with the longest
// wait among them (an alert on any organization still fires).
func groupQueueAges(in []queueAge, top int) []queueAge {
	sorted := slices.Clone(in)
	slices.SortFunc(sorted, func(a, b queueAge) int {
		return cmp.Or(cmp.Compare(b.seconds, a.seconds), cmp.Compare(a.org, b.org))
	})
	if len(sorted) <= top {
		return sorted
	}
	return append(sorted[:top:top], queueAge{"other", sorted[top].seconds})
}
