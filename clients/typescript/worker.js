#!/usr/bin/env node
// @ts-check
// A reference worker in Node, written against the generated types alone
// (src/schema.d.ts through openapi-fetch): a second proof, beside the Go
// runtime in workerclient/, that openapi.yaml is enough to build a worker.
//
// It speaks the worker protocol as the Go runtime does: long-poll
// POST /v1/leases (with an Idempotency-Key reused when a poll is retried),
// POST /v1/attempts/{id}/start, one POST /v1/heartbeat renewing every held
// lease with its fencing token at the interval the gateway asks for, result
// batches numbered 1, 2, … with Idempotency-Key "<attempt_id>:<sequence>",
// then POST /v1/attempts/{id}/complete with the last acknowledged sequence
// number. When every slot is busy (the poll loop has no poll out), a
// completion also asks for the next lease ("next"), so a busy worker sends
// one request per task. Errors are the gateway's problem+json (ProblemError).
//
// Usage:
//   node worker.js --gateway https://host:8443 --cert worker.pem --key worker-key.pem --ca ca.pem
//     [--slots 1] [--wait 20] [--tasks N] [--capabilities JSON] [--drain-timeout 10]
// --tasks N exits (status 0) once N leased attempts have been finished.
// --capabilities adds to what the worker advertises ({"plugins": [...]}),
// e.g. '{"manual": true}' to take the README's hand-driven tasks.
// Each line on stdout is a JSON event; lease tokens and secrets never appear.
// Exit status: 0 done, 1 a fatal refusal (e.g. worker-revoked), 2 bad usage.

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { createGatewayClient, isTransient, ProblemError, retry, sleep, unwrap } from "./src/client.js";
import { mtlsFetch } from "./src/mtls.js";

/** @typedef {import("./src/client.js").schemas} schemas */
/** @typedef {import("./src/client.js").GatewayClient} GatewayClient */

const softwareVersion = "node-reference-worker/0.1.0";
const protocolVersion = "1";
const callTimeoutMs = 10_000;
const completeWindowMs = 60_000;
const pollMarginMs = 10_000;
const nextRefusedForMs = 5 * 60_000;
const refusedPollDelayMs = 5_000;
const minHeartbeatIntervalMs = 100;

/**
 * log writes one JSON event to stdout.
 *
 * @param {string} event
 * @param {Record<string, unknown>} [fields]
 */
function log(event, fields = {}) {
  process.stdout.write(JSON.stringify({ time: new Date().toISOString(), event, ...fields }) + "\n");
}

/** @param {unknown} err */
function describe(err) {
  return err instanceof Error ? err.message : String(err);
}

/** TaskError is a plugin's failure with the code and retryability to report. */
class TaskError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {boolean} retryable
   */
  constructor(code, message, retryable) {
    super(message);
    this.code = code;
    this.retryable = retryable;
  }
}

/**
 * Why an attempt's signal was aborted: the gateway asked to cancel, the
 * lease is lost, the attempt's time is up, or the worker shut down before
 * the task finished.
 *
 * @typedef {"cancel" | "lost" | "deadline" | "shutdown"} EndReason
 */
class AttemptEnded extends Error {
  /** @param {EndReason} reason */
  constructor(reason) {
    super(`attempt ended: ${reason}`);
    this.reason = reason;
  }
}

/** Notifier wakes whoever waits on its promise. */
class Notifier {
  constructor() {
    /** @type {() => void} */
    this.resolve = () => {};
    /** @type {Promise<void>} */
    this.promise = this.#fresh();
  }
  #fresh() {
    return new Promise((resolve) => {
      this.resolve = () => resolve(undefined);
    });
  }
  notify() {
    this.resolve();
    this.promise = this.#fresh();
  }
}

/**
 * anySignal aborts when any of signals does: AbortSignal.any (Node 20.3 on),
 * which lets go of its listeners once the signal it returns is collected;
 * on older Nodes a plain combination, whose listeners stay on the signals
 * given until they abort.
 *
 * @param {AbortSignal[]} signals
 * @returns {AbortSignal}
 */
function anySignal(signals) {
  if (typeof AbortSignal.any === "function") {
    return AbortSignal.any(signals);
  }
  const c = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      c.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}

/**
 * nap waits until ms pass, wake resolves or signal aborts, whichever comes
 * first, and leaves no timer or listener behind.
 *
 * @param {number} ms Infinity for no timeout
 * @param {Promise<void>} wake
 * @param {AbortSignal} signal
 */
async function nap(ms, wake, signal) {
  const done = new AbortController();
  /** @type {Promise<void>[]} */
  const waits = [wake, new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true, signal: done.signal }))];
  if (ms !== Infinity) {
    waits.push(sleep(ms, done.signal).catch(() => {}));
  }
  try {
    await Promise.race(waits);
  } finally {
    done.abort();
  }
}

/**
 * heartbeatInterval is the gateway's interval (a third of the TTL when it
 * gives none), never longer than half the TTL.
 *
 * @param {number | undefined} intervalMs
 * @param {number} ttlMs
 */
function heartbeatInterval(intervalMs, ttlMs) {
  let ms = intervalMs && intervalMs > 0 ? intervalMs : ttlMs / 3;
  if (ttlMs > 0 && ms > ttlMs / 2) {
    ms = ttlMs / 2;
  }
  return Math.max(ms, minHeartbeatIntervalMs);
}

/** One leased attempt, from the lease to its completion. */
class Attempt {
  /**
   * @param {GatewayClient} client
   * @param {schemas["Lease"]} lease
   * @param {number} sentAt when the poll that granted it was sent (our clock; only durations are trusted)
   */
  constructor(client, lease, sentAt) {
    this.client = client;
    this.id = lease.attempt_id;
    this.token = lease.lease_token; // the fencing token: a header on every attempt call, never logged
    this.task = lease.task;
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    const ttlMs = lease.lease_ttl_seconds * 1000;
    this.expiresAt = sentAt + ttlMs;
    this.intervalMs = heartbeatInterval(lease.heartbeat_interval_seconds * 1000, ttlMs);
    this.renewedAt = sentAt;
    this.renewals = 0;
    this.renewed = new Notifier();
    this.lost = false;
    this.nextSequence = 1;
    this.acked = 0; // the last sequence number the gateway acknowledged
    /** @type {NodeJS.Timeout | undefined} */
    this.deadline = undefined;
    const budgets = [lease.task.attempt_deadline_in_seconds, lease.task.execution_deadline_in_seconds].filter(
      (d) => d !== undefined,
    );
    if (budgets.length > 0) {
      // Less a margin, to report the failure while the attempt still may.
      const ms = Math.min(...budgets) * 1000;
      this.deadline = setTimeout(() => this.end("deadline"), Math.max(ms - Math.min(2000, ms / 10), 0));
    }
  }

  /** @param {EndReason} reason */
  end(reason) {
    if (reason === "lost") {
      this.lost = true;
    }
    if (!this.signal.aborted) {
      this.controller.abort(new AttemptEnded(reason));
    }
  }

  /** @returns {EndReason | undefined} */
  reason() {
    if (this.lost) {
      return "lost";
    }
    return this.signal.aborted && this.signal.reason instanceof AttemptEnded ? this.signal.reason.reason : undefined;
  }

  /**
   * apply records the lease's state as of a request sent at sentAt.
   *
   * @param {schemas["LeaseStatus"]} st
   * @param {number} sentAt
   * @param {boolean} renewal whether the request renewed the lease (a heartbeat)
   */
  apply(st, sentAt, renewal) {
    if (this.lost) {
      return;
    }
    if (st.state === "lost") {
      log("lease lost", { attempt_id: this.id });
      this.end("lost");
      return;
    }
    if (st.state === "cancel_requested" || st.cancel_requested) {
      if (!this.signal.aborted) {
        log("cancel requested", { attempt_id: this.id });
      }
      this.end("cancel"); // the lease is still renewed until the completion
    }
    const ttlMs = st.lease_ttl_seconds * 1000;
    this.expiresAt = sentAt + ttlMs;
    if (st.heartbeat_interval_seconds !== undefined) {
      this.intervalMs = heartbeatInterval(st.heartbeat_interval_seconds * 1000, ttlMs);
    }
    if (renewal) {
      this.renewedAt = sentAt;
      this.renewals++;
      this.renewed.notify();
    }
  }

  /**
   * attemptCall retries a call about this attempt while the attempt lasts,
   * turning lease-lost into the end of the attempt.
   *
   * @template T
   * @param {string} what
   * @param {AbortSignal} signal
   * @param {() => Promise<T>} call
   * @returns {Promise<T>}
   */
  async attemptCall(what, signal, call) {
    try {
      return await retry(signal, call, (err, delay) =>
        log("retrying", { attempt_id: this.id, call: what, error: describe(err), retry_in_ms: Math.round(delay) }),
      );
    } catch (err) {
      if (err instanceof ProblemError && err.code === "lease-lost") {
        log("lease lost", { attempt_id: this.id, call: what });
        this.end("lost");
      }
      throw err;
    }
  }

  /** start moves the attempt to running. */
  async start() {
    const signal = anySignal([this.signal, AbortSignal.timeout(callTimeoutMs)]);
    let sentAt = 0;
    const st = await this.attemptCall("start", signal, async () => {
      sentAt = Date.now();
      return unwrap(
        "start attempt",
        await this.client.POST("/v1/attempts/{attempt_id}/start", {
          params: { path: { attempt_id: this.id }, header: { "Lease-Token": this.token } },
          signal: anySignal([signal, AbortSignal.timeout(callTimeoutMs)]),
        }),
      );
    });
    this.apply(st, sentAt, false);
  }

  /**
   * emit sends records as the attempt's next result batch and returns once
   * the gateway acknowledged it. The batch keeps its sequence number and
   * Idempotency-Key across retries, so a batch whose answer was lost is
   * acknowledged again instead of stored twice.
   *
   * @param {schemas["ResultRecord"][]} records
   * @returns {Promise<schemas["ResultAck"]>}
   */
  async emit(records) {
    const sequence = this.nextSequence++;
    const key = `${this.id}:${sequence}`;
    /** @type {schemas["ResultBatch"]} */
    const batch = { sequence_number: sequence, records };
    const ack = await this.attemptCall("results", this.signal, async () => {
      const answer = await this.client.POST("/v1/attempts/{attempt_id}/results", {
        params: {
          path: { attempt_id: this.id },
          header: { "Lease-Token": this.token, "Idempotency-Key": key },
        },
        body: batch,
        signal: anySignal([this.signal, AbortSignal.timeout(callTimeoutMs)]),
      });
      const data = unwrap("submit results", answer);
      // The answer says how the lease is now (a replay's body is the
      // original acknowledgement, its headers are not).
      if (answer.response.headers.get("Lease-State") === "cancel_requested") {
        this.end("cancel");
      }
      return data;
    });
    this.acked = sequence;
    log("results acknowledged", {
      attempt_id: this.id,
      sequence_number: ack.sequence_number,
      record_count: ack.record_count,
    });
    return ack;
  }

  /**
   * waitRenewals resolves once the lease has been renewed n times by
   * heartbeats, or throws when the attempt ends first.
   *
   * @param {number} n
   */
  async waitRenewals(n) {
    while (this.renewals < n) {
      this.signal.throwIfAborted();
      await nap(Infinity, this.renewed.promise, this.signal);
    }
  }

  /**
   * complete reports the outcome, retried (completion is idempotent) for at
   * most a minute, whatever the attempt's own signal says: a cancelled
   * attempt is still completed.
   *
   * @param {schemas["CompleteRequest"]} req
   */
  async complete(req) {
    const window = AbortSignal.timeout(completeWindowMs);
    return this.attemptCall("complete", window, async () =>
      unwrap(
        "complete attempt",
        await this.client.POST("/v1/attempts/{attempt_id}/complete", {
          params: { path: { attempt_id: this.id }, header: { "Lease-Token": this.token } },
          body: req,
          signal: anySignal([window, AbortSignal.timeout(callTimeoutMs)]),
        }),
      ),
    );
  }
}

/**
 * The plugins this worker runs for scanner_plugin tasks, by payload.plugin;
 * their names are the "plugins" capability it advertises. Each gets the
 * attempt and payload.input, and throws to fail.
 *
 * @type {Record<string, (a: Attempt, input: any) => Promise<void>>}
 */
const plugins = {
  // echo succeeds, as the Go worker's does.
  echo: async (a, input) => {
    log("echo", { attempt_id: a.id, input });
  },
  // emit waits for input.heartbeats renewals of its lease, then sends
  // input.records in batches of input.batch_size (default 100).
  emit: async (a, input) => {
    const records = /** @type {schemas["ResultRecord"][]} */ (input?.records ?? []);
    const size = Number(input?.batch_size ?? 100);
    if (!Array.isArray(records) || !Number.isInteger(size) || size < 1) {
      throw new TaskError("bad-input", "emit takes {records: [...], batch_size: n >= 1, heartbeats: n}", false);
    }
    await a.waitRenewals(Number(input?.heartbeats ?? 0));
    for (let i = 0; i < records.length; i += size) {
      await a.emit(records.slice(i, i + size));
    }
  },
  // sleep waits input.seconds, or until the attempt ends.
  sleep: async (a, input) => {
    await sleep(Number(input?.seconds ?? 0) * 1000, a.signal);
  },
  // fail fails with input.code, input.message and input.retryable.
  fail: async (_a, input) => {
    throw new TaskError(String(input?.code || "plugin-failed"), String(input?.message ?? ""), input?.retryable === true);
  },
};

/**
 * completionFor maps how the plugin ended to the completion to send;
 * undefined means send none (the lease is lost).
 *
 * @param {Attempt} a
 * @param {unknown} err the plugin's error; undefined when it succeeded
 * @returns {schemas["CompleteRequest"] | undefined}
 */
function completionFor(a, err) {
  const reason = a.reason();
  /** @type {schemas["CompleteRequest"]} */
  let req;
  switch (true) {
    case reason === "lost":
      return undefined;
    case reason === "cancel":
      req = { outcome: "cancelled" };
      break;
    case reason === "shutdown":
      req = {
        outcome: "cancelled",
        error: { code: "worker-shutdown", message: "the worker shut down before the task finished", retryable: true },
      };
      break;
    case err === undefined:
      req = { outcome: "succeeded" };
      break;
    case err instanceof TaskError:
      req = { outcome: "failed", error: { code: err.code, message: err.message || undefined, retryable: err.retryable } };
      break;
    case reason === "deadline":
      req = { outcome: "failed", error: { code: "attempt-deadline-exceeded", retryable: true } };
      break;
    case err instanceof ProblemError:
      // A result batch the gateway refused: the results are incomplete.
      req = { outcome: "failed", error: { code: "results-undelivered", message: describe(err), retryable: true } };
      break;
    default:
      req = { outcome: "failed", error: { code: "handler-error", message: describe(err), retryable: true } };
  }
  if (req.error?.message) {
    req.error.message = req.error.message.slice(0, 1000);
  }
  if (a.acked > 0) {
    req.last_sequence_number = a.acked;
  }
  return req;
}

class Worker {
  /**
   * @param {GatewayClient} client
   * @param {{ slots: number, waitSeconds: number, tasks: number, drainTimeoutMs: number, capabilities: Record<string, unknown> }} cfg
   */
  constructor(client, cfg) {
    this.client = client;
    this.cfg = cfg;
    /** @type {Map<string, Attempt>} */
    this.held = new Map();
    this.changed = new Notifier(); // a lease taken or released
    this.capabilities = { ...cfg.capabilities, plugins: Object.keys(plugins).sort() };
    /** @type {Set<Promise<void>>} */
    this.running = new Set();
    this.leased = 0; // attempts leased, for cfg.tasks
    // parked: the poll loop waits for a slot, so no poll is out for the
    // slot a completion frees, and the completion may lease it ("next").
    this.parked = false;
    this.reserved = 0; // slots completions in flight may lease; the poll loop leaves them
    this.nextRefusedUntil = 0; // the gateway refused "next": poll instead until then
    this.stop = new AbortController().signal;
  }

  /**
   * run polls until stop aborts or cfg.tasks attempts were leased, lets the
   * attempts held finish (for at most the drain timeout once stopped), and
   * throws a ProblemError when the gateway refuses the worker for good.
   *
   * @param {AbortSignal} stop
   */
  async run(stop) {
    this.stop = stop;
    const heartbeats = new AbortController();
    const heartbeating = this.heartbeatLoop(heartbeats.signal);
    /** @type {unknown} */
    let fatal;
    try {
      await this.pollLoop(stop);
    } catch (err) {
      fatal = err;
    }
    if (stop.aborted && this.held.size > 0) {
      const drain = setTimeout(() => {
        for (const a of this.held.values()) {
          a.end("shutdown");
        }
      }, this.cfg.drainTimeoutMs);
      await Promise.all(this.running);
      clearTimeout(drain);
    }
    await Promise.all(this.running);
    heartbeats.abort();
    await heartbeating;
    if (fatal !== undefined) {
      throw fatal;
    }
  }

  /** @param {AbortSignal} stop */
  async pollLoop(stop) {
    while (!stop.aborted && (this.cfg.tasks === 0 || this.leased + this.reserved < this.cfg.tasks)) {
      let free = this.cfg.slots - this.held.size - this.reserved;
      if (this.cfg.tasks > 0) {
        free = Math.min(free, this.cfg.tasks - this.leased - this.reserved);
      }
      if (free <= 0) {
        this.parked = true;
        await nap(Infinity, this.changed.promise, stop);
        this.parked = false;
        continue;
      }
      // One key per poll, reused when the same poll is retried after a
      // transport error: a lost answer returns the same leases.
      const key = randomUUID();
      /** @type {schemas["LeaseRequest"]} */
      const body = {
        max_tasks: free,
        wait_seconds: this.cfg.waitSeconds,
        capabilities: this.capabilities,
        software_version: softwareVersion,
        protocol_version: protocolVersion,
      };
      let sentAt = 0;
      /** @type {schemas["Lease"][]} */
      let leases;
      try {
        leases = await retry(
          stop,
          async () => {
            sentAt = Date.now();
            const answer = await this.client.POST("/v1/leases", {
              params: { header: { "Idempotency-Key": key } },
              body,
              signal: anySignal([stop, AbortSignal.timeout(this.cfg.waitSeconds * 1000 + pollMarginMs)]),
            });
            return unwrap("acquire leases", answer).leases;
          },
          (err, delay) => log("retrying", { call: "poll", error: describe(err), retry_in_ms: Math.round(delay) }),
        );
      } catch (err) {
        if (stop.aborted) {
          return;
        }
        if (err instanceof ProblemError && err.code !== "worker-revoked" && (err.status === 401 || err.status === 403)) {
          // A refusal an operator may fix (an unknown certificate, a
          // disabled worker): keep trying, slowly.
          log("poll refused", { status: err.status, code: err.code, error: describe(err) });
          await sleep(refusedPollDelayMs, stop).catch(() => {});
          continue;
        }
        throw err; // revoked, or our request is wrong: repeating cannot help
      }
      this.take(leases, sentAt);
    }
  }

  /**
   * take runs the leases a poll or a completion brought, each in a slot.
   *
   * @param {schemas["Lease"][]} leases
   * @param {number} sentAt when the call that brought them was sent
   */
  take(leases, sentAt) {
    for (const lease of leases) {
      if (this.held.has(lease.attempt_id)) {
        continue; // a replayed answer for a lease already running
      }
      const a = new Attempt(this.client, lease, sentAt);
      if (this.held.size >= this.cfg.slots || this.stop.aborted) {
        // The gateway granted more than asked, or a completion's next
        // lease came as the worker stops: give it back at once rather
        // than run more tasks than slots.
        log("lease beyond free slots; releasing it", { attempt_id: a.id, task_id: a.task.id });
        const p = this.release(a).finally(() => this.running.delete(p));
        this.running.add(p);
        continue;
      }
      this.leased++;
      this.held.set(a.id, a);
      log("lease acquired", {
        attempt_id: a.id,
        task_id: a.task.id,
        task_type: a.task.task_type,
        attempt_number: a.task.attempt_number,
        lease_ttl_seconds: lease.lease_ttl_seconds,
      });
      const p = this.runAttempt(a).finally(() => {
        this.running.delete(p);
      });
      this.running.add(p);
    }
    if (leases.length > 0) {
      this.changed.notify();
    }
  }

  /**
   * reserveNext is 1 when a completion should ask for the next lease with
   * it: the poll loop is parked for want of a slot, so a busy worker's next
   * task comes with its completion, one request instead of two.
   */
  reserveNext() {
    if (!this.parked || this.stop.aborted || Date.now() < this.nextRefusedUntil) {
      return 0;
    }
    if (this.cfg.tasks > 0 && this.leased + this.reserved >= this.cfg.tasks) {
      return 0;
    }
    this.reserved++;
    return 1;
  }

  /** @param {Attempt} a */
  async runAttempt(a) {
    try {
      try {
        await a.start();
      } catch (err) {
        // A start that failed for another reason than a lost lease is not
        // fatal: a heartbeat implies start.
        if (!a.lost) {
          log("start failed", { attempt_id: a.id, error: describe(err) });
        }
      }
      /** @type {unknown} */
      let herr;
      if (a.signal.aborted) {
        herr = a.signal.reason;
      } else {
        try {
          await this.handle(a);
        } catch (err) {
          herr = err;
        }
      }
      const req = completionFor(a, herr);
      if (req === undefined) {
        log("not completing: the lease is lost", { attempt_id: a.id });
        return;
      }
      const reserved = this.reserveNext();
      /** @type {schemas["Lease"][]} */
      let next = [];
      const sentAt = Date.now();
      try {
        let done;
        try {
          done = await a.complete(reserved ? { ...req, next: { max_tasks: reserved, wait_seconds: 0 } } : req);
        } catch (err) {
          if (!(reserved && err instanceof ProblemError && err.status === 400)) {
            throw err;
          }
          // A gateway from before "next": complete without it, and poll.
          done = await a.complete(req);
          this.nextRefusedUntil = Date.now() + nextRefusedForMs;
          log("the gateway refused a next lease with a completion; polling instead", { for_ms: nextRefusedForMs });
        }
        next = done.leases ?? [];
        log("attempt completed", {
          attempt_id: a.id,
          task_id: a.task.id,
          outcome: req.outcome,
          error_code: req.error?.code,
          last_sequence_number: req.last_sequence_number,
          attempt_status: done.attempt_status,
          task_state: done.task_state,
          next_leases: next.length,
        });
      } catch (err) {
        log("completion failed", { attempt_id: a.id, error: describe(err) });
      } finally {
        // This attempt's slot goes to the lease its completion brought.
        this.held.delete(a.id);
        this.take(next, sentAt);
        this.reserved -= reserved;
      }
    } finally {
      clearTimeout(a.deadline);
      this.held.delete(a.id);
      this.changed.notify();
    }
  }

  /** @param {Attempt} a an attempt leased beyond the free slots, never started */
  async release(a) {
    try {
      await a.complete({
        outcome: "cancelled",
        error: { code: "worker-over-capacity", message: "the worker has no free slot", retryable: true },
      });
    } catch (err) {
      log("completion failed", { attempt_id: a.id, error: describe(err) });
    } finally {
      clearTimeout(a.deadline);
    }
  }

  /** @param {Attempt} a */
  async handle(a) {
    if (a.task.task_type !== "scanner_plugin") {
      throw new TaskError("unsupported-task-type", `this worker does not run ${a.task.task_type} tasks`, false);
    }
    const payload = /** @type {{ plugin?: unknown, input?: unknown }} */ (a.task.payload);
    const plugin = typeof payload.plugin === "string" ? plugins[payload.plugin] : undefined;
    if (plugin === undefined) {
      throw new TaskError("unknown-plugin", `no plugin ${JSON.stringify(payload.plugin)} (have ${this.capabilities.plugins})`, false);
    }
    await plugin(a, payload.input);
  }

  /**
   * heartbeatLoop renews every held lease with one call whenever the
   * earliest is due, and gives up leases whose local expiry passes.
   *
   * @param {AbortSignal} signal
   */
  async heartbeatLoop(signal) {
    let retryAt = 0;
    let failures = 0;
    while (!signal.aborted) {
      const now = Date.now();
      let renewAt = Infinity;
      let expireAt = Infinity;
      for (const a of this.held.values()) {
        if (a.lost) {
          continue;
        }
        if (now >= a.expiresAt) {
          log("lease expired without a renewal", { attempt_id: a.id });
          a.end("lost");
          continue;
        }
        renewAt = Math.min(renewAt, a.renewedAt + a.intervalMs);
        expireAt = Math.min(expireAt, a.expiresAt);
      }
      const wakeAt = Math.min(Math.max(renewAt, retryAt), expireAt);
      if (wakeAt > now) {
        await nap(wakeAt - now, this.changed.promise, signal);
        continue; // recompute: a lease may have come or gone
      }
      try {
        await this.heartbeat(signal);
        failures = 0;
        retryAt = 0;
      } catch (err) {
        if (signal.aborted) {
          return;
        }
        if (err instanceof ProblemError && err.code === "worker-revoked") {
          for (const a of this.held.values()) {
            a.end("lost");
          }
        }
        const delay = isTransient(err) ? Math.random() * Math.min(5000, 100 * 2 ** Math.min(failures, 16)) : 5000;
        failures++;
        retryAt = Date.now() + delay;
        log("heartbeat failed", { error: describe(err), retry_in_ms: Math.round(delay) });
      }
    }
  }

  /** @param {AbortSignal} signal */
  async heartbeat(signal) {
    const held = [...this.held.values()].filter((a) => !a.lost);
    if (held.length === 0) {
      return;
    }
    const sentAt = Date.now();
    const answer = unwrap(
      "heartbeat",
      await this.client.POST("/v1/heartbeat", {
        body: {
          leases: held.map((a) => ({ attempt_id: a.id, lease_token: a.token })),
          capabilities: this.capabilities,
          software_version: softwareVersion,
        },
        signal: anySignal([signal, AbortSignal.timeout(callTimeoutMs)]),
      }),
    );
    const byID = new Map(held.map((a) => [a.id, a]));
    for (const st of answer.leases) {
      const a = byID.get(st.attempt_id);
      if (a) {
        a.apply(st, sentAt, true);
        byID.delete(st.attempt_id);
        log("heartbeat", {
          attempt_id: a.id,
          state: st.state,
          lease_ttl_seconds: st.lease_ttl_seconds,
          renewals: a.renewals,
        });
      }
    }
    // A lease the answer left out is not renewed; its next renewal is not
    // due at once either: it expires locally unless a later answer renews it.
    for (const a of byID.values()) {
      a.renewedAt = sentAt;
    }
  }
}

async function main() {
  /** @type {ReturnType<typeof parseArgs<{ options: typeof options }>>["values"]} */
  let args;
  const options = /** @type {const} */ ({
    gateway: { type: "string" },
    cert: { type: "string" },
    key: { type: "string" },
    ca: { type: "string" },
    slots: { type: "string", default: "1" },
    wait: { type: "string", default: "20" },
    tasks: { type: "string", default: "0" },
    capabilities: { type: "string", default: "{}" },
    "drain-timeout": { type: "string", default: "10" },
  });
  try {
    args = parseArgs({ options, strict: true }).values;
  } catch (err) {
    console.error(describe(err));
    return 2;
  }
  /** @type {unknown} */
  let capabilities;
  try {
    capabilities = JSON.parse(args.capabilities ?? "{}");
  } catch {
    capabilities = undefined;
  }
  const cfg = {
    slots: Number(args.slots),
    waitSeconds: Number(args.wait),
    tasks: Number(args.tasks),
    drainTimeoutMs: Number(args["drain-timeout"]) * 1000,
    capabilities: /** @type {Record<string, unknown>} */ (capabilities),
  };
  if (
    !args.gateway ||
    !args.cert ||
    !args.key ||
    ![cfg.slots, cfg.waitSeconds, cfg.tasks].every(Number.isInteger) ||
    typeof capabilities !== "object" ||
    capabilities === null ||
    Array.isArray(capabilities)
  ) {
    console.error(
      "usage: node worker.js --gateway URL --cert FILE --key FILE [--ca FILE] [--slots N] [--wait SECONDS] [--tasks N] [--capabilities JSON-OBJECT] [--drain-timeout SECONDS]",
    );
    return 2;
  }
  const fetch = mtlsFetch({
    cert: readFileSync(args.cert),
    key: readFileSync(args.key),
    ca: args.ca ? readFileSync(args.ca) : undefined,
  });
  const client = createGatewayClient({ baseUrl: args.gateway, fetch });
  const stop = new AbortController();
  for (const sig of /** @type {const} */ (["SIGINT", "SIGTERM"])) {
    process.once(sig, () => {
      log("stopping", { signal: sig });
      stop.abort(new Error(sig));
    });
  }
  log("started", { gateway: args.gateway, slots: cfg.slots, plugins: Object.keys(plugins).sort() });
  try {
    await new Worker(client, cfg).run(stop.signal);
  } catch (err) {
    log("fatal", {
      error: describe(err),
      status: err instanceof ProblemError ? err.status : undefined,
      code: err instanceof ProblemError ? err.code : undefined,
    });
    return 1;
  } finally {
    fetch.close();
  }
  log("stopped");
  return 0;
}

process.exitCode = await main();
