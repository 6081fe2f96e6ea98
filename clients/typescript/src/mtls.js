// @ts-check
// A fetch that speaks mutual TLS. Node's global fetch cannot be given a
// client certificate without the undici package, so this one sends each
// Request through node:https with an Agent holding the worker's certificate
// and key and trusting the gateway's CA: openapi-fetch takes it as its
// `fetch`, and it works on every Node from 18 on without a dependency.

import https from "node:https";

/**
 * @typedef {object} MTLSOptions
 * @property {string | Buffer} cert the worker's client certificate (PEM)
 * @property {string | Buffer} key its private key (PEM)
 * @property {string | Buffer} [ca] the CA the gateway's certificate is issued by (PEM); the system roots when absent
 */

/**
 * @typedef {((input: Request | string | URL, init?: RequestInit) => Promise<Response>) & { close: () => void }} MTLSFetch
 */

// Statuses whose Response must be built without a body.
const nullBodyStatus = new Set([101, 103, 204, 205, 304]);

/**
 * mtlsFetch returns a fetch presenting the worker's certificate on TLS 1.3
 * connections kept alive between calls; close() ends them.
 *
 * @param {MTLSOptions} opts
 * @returns {MTLSFetch}
 */
export function mtlsFetch(opts) {
  const agent = new https.Agent({
    cert: opts.cert,
    key: opts.key,
    ca: opts.ca,
    minVersion: "TLSv1.3",
    keepAlive: true,
  });

  /** @type {(input: Request | string | URL, init?: RequestInit) => Promise<Response>} */
  const send = async (input, init) => {
    const req = input instanceof Request ? input : new Request(input, init);
    const body = req.body ? Buffer.from(await req.arrayBuffer()) : undefined;
    /** @type {Record<string, string>} */
    const headers = {};
    req.headers.forEach((value, name) => {
      headers[name] = value;
    });
    if (body) {
      headers["content-length"] = String(body.length);
    }
    return new Promise((resolve, reject) => {
      const out = https.request(
        req.url,
        { method: req.method, headers, agent, signal: req.signal },
        (res) => {
          /** @type {Buffer[]} */
          const chunks = [];
          res.on("data", (chunk) => chunks.push(chunk));
          res.on("error", reject);
          res.on("end", () => {
            const status = res.statusCode ?? 0;
            const answer = new Headers();
            for (const [name, value] of Object.entries(res.headers)) {
              for (const v of Array.isArray(value) ? value : [value ?? ""]) {
                answer.append(name, v);
              }
            }
            resolve(
              new Response(nullBodyStatus.has(status) ? null : Buffer.concat(chunks), {
                status,
                statusText: res.statusMessage,
                headers: answer,
              }),
            );
          });
        },
      );
      out.on("error", reject);
      out.end(body);
    });
  };
  return Object.assign(send, { close: () => agent.destroy() });
}
