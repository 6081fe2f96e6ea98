// A realistic Worker Gateway worker load for k6 (https://k6.io): each virtual
// user is a worker that long-polls for a lease, heartbeats, sends one result
// batch and completes the attempt — over mutual TLS, like a real worker.
//
// k6 is AGPL-licensed: it is not a dependency of this project and no test
// needs it. See README.md in this folder for how to run it.
import http from 'k6/http';
import { check, fail } from 'k6';
import { Counter, Trend } from 'k6/metrics';

const GATEWAY_URL = __ENV.GATEWAY_URL || 'https://127.0.0.1:8443';
const host = GATEWAY_URL.replace(/^https:\/\//, '').replace(/\/.*$/, '').replace(/:\d+$/, '');

export const options = {
  // Client certificate of a worker assigned to the organization under load.
  tlsAuth: [{ domains: [host], cert: open(__ENV.WORKER_CERT), key: open(__ENV.WORKER_KEY) }],
  // The gateway's certificate is signed by the dev CA; k6 cannot take a CA
  // file, so trust is skipped for this load test against your own gateway.
  insecureSkipTLSVerify: true,
  vus: Number(__ENV.VUS || 8),
  duration: __ENV.DURATION || '30s',
  thresholds: { checks: ['rate>0.99'] },
};

const cycles = new Counter('lease_cycles');
const cycleTime = new Trend('lease_cycle_ms', true);
const json = { headers: { 'Content-Type': 'application/json' } };

function post(path, body, headers) {
  return http.post(`${GATEWAY_URL}${path}`, body === undefined ? null : JSON.stringify(body), {
    headers: Object.assign({ 'Content-Type': 'application/json' }, headers || {}),
  });
}

export default function () {
  const started = Date.now();
  const poll = post('/v1/leases', { max_tasks: 1, wait_seconds: Number(__ENV.WAIT_SECONDS || 5) },
    { 'Idempotency-Key': `k6-${__VU}-${__ITER}` });
  if (!check(poll, { 'lease answered 200': (r) => r.status === 200 })) {
    fail(`lease: ${poll.status} ${poll.body}`);
  }
  const leases = poll.json('leases');
  if (leases.length === 0) {
    return; // nothing to do this round
  }
  const lease = leases[0];
  const fenced = { 'Lease-Token': lease.lease_token };
  const attempt = `/v1/attempts/${lease.attempt_id}`;

  const hb = post(`${attempt}/heartbeat`, undefined, fenced);
  check(hb, { 'heartbeat active': (r) => r.status === 200 && r.json('state') === 'active' });

  const batch = {
    sequence_number: 1,
    records: [{ kind: 'asset', asset: { type: 'hostname', value: `k6-${__VU}-${__ITER}.example` } }],
  };
  const results = post(`${attempt}/results`, batch, Object.assign({ 'Idempotency-Key': `${lease.attempt_id}:1` }, fenced));
  check(results, { 'results persisted': (r) => r.status === 200 });

  const done = post(`${attempt}/complete`, { outcome: 'succeeded', last_sequence_number: 1 }, fenced);
  check(done, { 'completed': (r) => r.status === 200 });
  cycles.add(1);
  cycleTime.add(Date.now() - started);
}
