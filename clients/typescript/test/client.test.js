// @ts-check
// The client's error and retry rules, on answers built in memory; the
// whole protocol against a real gateway is tests/typescript_worker_test.go.

import assert from "node:assert/strict";
import { test } from "node:test";

import { createGatewayClient, isTransient, ProblemError, retry, unwrap } from "../src/client.js";

/**
 * answering returns a fetch that answers each call with the next of answers.
 *
 * @param {(() => Response)[]} answers
 */
function answering(answers) {
  /** @type {Request[]} */
  const seen = [];
  /** @param {Request} req */
  const fetch = async (req) => {
    seen.push(req);
    const next = answers.shift();
    if (next === undefined) {
      throw new Error("no more answers");
    }
    return next();
  };
  return { fetch, seen };
}

/**
 * @param {number} status
 * @param {string} code
 * @param {Record<string, string>} [headers]
 */
function problem(status, code, headers = {}) {
  return () =>
    new Response(JSON.stringify({ type: "about:blank", title: "t", status, code, detail: `detail of ${code}` }), {
      status,
      headers: { "Content-Type": "application/problem+json", ...headers },
    });
}

test("a problem+json answer becomes a ProblemError with its code", async () => {
  const { fetch } = answering([problem(409, "lease-lost")]);
  const gw = createGatewayClient({ baseUrl: "https://gateway.test", fetch });
  const answer = await gw.POST("/v1/attempts/{attempt_id}/start", {
    params: { path: { attempt_id: "0193f1a2-9b22-7c3d-9e4f-2a3b4c5d6e7f" }, header: { "Lease-Token": "t".repeat(32) } },
  });
  assert.throws(
    () => unwrap("start attempt", answer),
    (err) =>
      err instanceof ProblemError &&
      err.status === 409 &&
      err.code === "lease-lost" &&
      err.message === "start attempt: 409 lease-lost: detail of lease-lost" &&
      !isTransient(err),
  );
});

test("an answer that is not problem+json still fails, with no code", async () => {
  const { fetch } = answering([() => new Response("<html>bad gateway</html>", { status: 502, headers: { "Content-Type": "text/html" } })]);
  const gw = createGatewayClient({ baseUrl: "https://gateway.test", fetch });
  const answer = await gw.GET("/healthz");
  assert.throws(
    () => unwrap("health", answer),
    (err) => err instanceof ProblemError && err.status === 502 && err.code === "" && isTransient(err),
  );
});

test("what is transient: transport errors, 408, 429, 5xx, idempotency-in-flight", () => {
  const res = (/** @type {number} */ status) => new Response(null, { status });
  assert.equal(isTransient(new TypeError("fetch failed")), true);
  assert.equal(isTransient(new ProblemError("x", res(408), undefined)), true);
  assert.equal(isTransient(new ProblemError("x", res(429), undefined)), true);
  assert.equal(isTransient(new ProblemError("x", res(503), undefined)), true);
  assert.equal(isTransient(new ProblemError("x", res(400), undefined)), false);
  const inFlight = problem(409, "idempotency-in-flight")();
  assert.equal(isTransient(new ProblemError("x", inFlight, { code: "idempotency-in-flight", status: 409, title: "t", type: "about:blank" })), true);
});

test("retry repeats the same request until it is acknowledged, honouring Retry-After", async () => {
  const ack = {
    batch_id: "0193f1a2-9b22-7c3d-9e4f-2a3b4c5d6e70",
    task_id: "0193f1a2-9b22-7c3d-9e4f-2a3b4c5d6e71",
    attempt_id: "0193f1a2-9b22-7c3d-9e4f-2a3b4c5d6e7f",
    sequence_number: 1,
    status: "persisted",
    record_count: 1,
    received_at: "2026-12-02T00:00:00Z",
  };
  const { fetch, seen } = answering([
    () => {
      throw new TypeError("fetch failed");
    },
    problem(409, "idempotency-in-flight", { "Retry-After": "0" }),
    () => new Response(JSON.stringify(ack), { status: 200, headers: { "Content-Type": "application/json" } }),
  ]);
  const gw = createGatewayClient({ baseUrl: "https://gateway.test", fetch });
  const key = "0193f1a2-9b22-7c3d-9e4f-2a3b4c5d6e7f:1";
  /** @type {number[]} */
  const delays = [];
  const got = await retry(
    new AbortController().signal,
    async () =>
      unwrap(
        "submit results",
        await gw.POST("/v1/attempts/{attempt_id}/results", {
          params: {
            path: { attempt_id: ack.attempt_id },
            header: { "Lease-Token": "t".repeat(32), "Idempotency-Key": key },
          },
          body: { sequence_number: 1, records: [{ kind: "data", data: { n: 1 } }] },
        }),
      ),
    (_err, delay) => delays.push(delay),
  );
  assert.deepEqual(got, ack);
  assert.equal(seen.length, 3);
  assert.equal(delays[1], 0, "Retry-After: 0 is honoured");
  const bodies = await Promise.all(seen.map((r) => r.clone().text()));
  for (const r of seen) {
    assert.equal(r.headers.get("Idempotency-Key"), key);
  }
  assert.equal(new Set(bodies).size, 1, "every try sends the same body");
});

test("retry stops at an answer that is not transient, and when its signal aborts", async () => {
  let calls = 0;
  await assert.rejects(
    retry(new AbortController().signal, async () => {
      calls++;
      throw new ProblemError("x", problem(422, "idempotency-key-reused")(), {
        code: "idempotency-key-reused",
        status: 422,
        title: "t",
        type: "about:blank",
      });
    }),
    (err) => err instanceof ProblemError && err.code === "idempotency-key-reused",
  );
  assert.equal(calls, 1);
  const stop = new AbortController();
  const reason = new Error("stopped");
  await assert.rejects(
    retry(stop.signal, async () => {
      stop.abort(reason);
      throw new TypeError("fetch failed");
    }),
    (err) => err === reason,
  );
});
