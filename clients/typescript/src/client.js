// @ts-check
// The typed gateway client: openapi-fetch over the types openapi-typescript
// generated from openapi.yaml (schema.d.ts, never edited by hand), the
// gateway's problem+json errors as ProblemError, and the one retry rule
// every worker call follows.

import createClient from "openapi-fetch";

/** @typedef {import("./schema.js").paths} paths */
/** @typedef {import("./schema.js").components["schemas"]} schemas */
/** @typedef {import("openapi-fetch").Client<paths>} GatewayClient */

/**
 * createGatewayClient returns a client for every route of openapi.yaml.
 * Workers pass the mTLS fetch of mtls.js; operators can pass a fetch that
 * adds their bearer token, or set `headers`.
 *
 * @param {{ baseUrl: string, fetch?: (input: Request) => Promise<Response>, headers?: Record<string, string> }} opts
 * @returns {GatewayClient}
 */
export function createGatewayClient(opts) {
  return createClient({ baseUrl: opts.baseUrl, fetch: opts.fetch, headers: opts.headers });
}

/**
 * ProblemError is an answer that is not a success: the gateway's
 * application/problem+json body (RFC 9457, with its stable `code`) when it
 * sent one, otherwise just the status.
 */
export class ProblemError extends Error {
  /**
   * @param {string} operation what was being done, for the message
   * @param {Response} response
   * @param {unknown} body the parsed error body openapi-fetch returned
   */
  constructor(operation, response, body) {
    const problem = isProblem(response, body) ? body : undefined;
    const code = problem?.code ?? "";
    super(
      `${operation}: ${response.status}${code ? ` ${code}` : ""}` +
        (problem?.detail ? `: ${problem.detail}` : problem?.title ? `: ${problem.title}` : ""),
    );
    this.name = "ProblemError";
    this.status = response.status;
    /** The problem's stable code (problem/codes.go), "" when the body was not a problem. */
    this.code = code;
    /** @type {schemas["Problem"] | undefined} */
    this.problem = problem;
    /** Seconds the Retry-After header asks to wait, when it has delay-seconds. */
    this.retryAfterSeconds = retryAfter(response.headers.get("Retry-After"));
  }
}

/**
 * @param {Response} response
 * @param {unknown} body
 * @returns {body is schemas["Problem"]}
 */
function isProblem(response, body) {
  const type = response.headers.get("Content-Type") ?? "";
  return (
    type.startsWith("application/problem+json") &&
    typeof body === "object" &&
    body !== null &&
    typeof (/** @type {{ code?: unknown }} */ (body).code) === "string"
  );
}

/** @param {string | null} v */
function retryAfter(v) {
  if (v === null || !/^\d+$/.test(v.trim())) {
    return undefined;
  }
  return Number(v.trim());
}

/**
 * unwrap returns the data of a successful openapi-fetch answer and throws a
 * ProblemError for any other.
 *
 * @template T
 * @param {string} operation
 * @param {{ data?: T, error?: unknown, response: Response }} answer
 * @returns {T}
 */
export function unwrap(operation, answer) {
  if (!answer.response.ok || answer.data === undefined) {
    throw new ProblemError(operation, answer.response, answer.error);
  }
  return answer.data;
}

/**
 * isTransient says whether repeating a call can help: transport errors,
 * 408, 429, 5xx and idempotency-in-flight — the Go runtime's rule
 * (workerclient/retry.go).
 *
 * @param {unknown} err
 */
export function isTransient(err) {
  if (!(err instanceof ProblemError)) {
    return true;
  }
  return err.status === 408 || err.status === 429 || err.status >= 500 || err.code === "idempotency-in-flight";
}

const backoffBase = 100; // ms
const backoffCap = 5000; // ms

/**
 * retry runs call until it succeeds, fails with an error that is not
 * transient, or signal aborts (then it throws the abort's reason). Waits
 * follow Retry-After when the answer has one, else exponential backoff with
 * full jitter from 100 ms to 5 s.
 *
 * @template T
 * @param {AbortSignal} signal
 * @param {() => Promise<T>} call
 * @param {(err: unknown, delayMs: number) => void} [onRetry]
 * @returns {Promise<T>}
 */
export async function retry(signal, call, onRetry) {
  for (let attempt = 0; ; attempt++) {
    signal.throwIfAborted();
    try {
      return await call();
    } catch (err) {
      if (signal.aborted || !isTransient(err)) {
        throw signal.aborted ? signal.reason : err;
      }
      const ra = err instanceof ProblemError ? err.retryAfterSeconds : undefined;
      const delay =
        ra !== undefined ? ra * 1000 : Math.random() * Math.min(backoffCap, backoffBase * 2 ** Math.min(attempt, 16));
      onRetry?.(err, delay);
      await sleep(delay, signal);
    }
  }
}

/**
 * sleep waits ms milliseconds, or throws signal's reason when it aborts first.
 *
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
