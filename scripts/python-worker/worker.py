#!/usr/bin/env python3
"""A Worker Gateway worker in Python 3, standard library only.

It implements the whole worker protocol: a long-poll loop (each poll carries an Idempotency-Key,
reused when the poll is retried), N concurrent slots, one heartbeat thread renewing every lease with
POST /v1/heartbeat at the interval the server names, cancellation (`cancel_requested`: stop the task
and complete it `cancelled`) and lost leases (`lost`: stop without completing), result batches with
Idempotency-Key "<attempt>:<sequence>" retried with the same key and the same bytes, completion
retried until acknowledged (asking for the next lease in the same call when every slot is busy, so
a busy worker sends one request per task), and a graceful stop on SIGTERM/SIGINT.

Demo handlers by payload plugin: `echo` (one hostname asset: input.host or "python.example") and
`sleep` (input.seconds, in small steps, stopping on cancellation). See README.md next to this file.
"""

import argparse
import hashlib
import json
import os
import random
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

SOFTWARE_VERSION = "python-worker/0.1.0"
PLUGINS = ("echo", "sleep")


def log(msg, *args):
    line = msg % args if args else msg
    sys.stderr.write("%s python-worker: %s\n" % (time.strftime("%H:%M:%S"), line))
    sys.stderr.flush()


# --- HTTP ------------------------------------------------------------------------------------


class TransportError(Exception):
    """The request may or may not have reached the gateway: retry it unchanged."""


class Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8")) if self.body else {}
        except ValueError:
            return {}

    @property
    def code(self):
        """The problem+json `code`, if any."""
        doc = self.json()
        return doc.get("code", "") if isinstance(doc, dict) else ""

    def retryable(self):
        """Transient: 5xx, 429, or a result batch still in flight under its key."""
        return self.status >= 500 or self.status == 429 or (self.status == 409 and self.code == "idempotency-in-flight")

    def retry_after(self, default):
        try:
            return max(0.0, float(self.headers.get("Retry-After", "")))
        except ValueError:
            return default

    def __str__(self):
        return "%d %s" % (self.status, self.body.decode("utf-8", "replace")[:500])


class Gateway:
    def __init__(self, url, cert, key, ca):
        self.url = url.rstrip("/")
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))

    def call(self, method, path, body=None, headers=None, timeout=30.0, raw=None, url=None):
        """One request. `body` is JSON-encoded (or `raw` bytes sent as they are); answers any HTTP
        status as an Answer, raises TransportError when no answer came."""
        data = raw
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            hdrs.setdefault("Content-Type", "application/json")
        elif data is None and method == "POST":
            data = b""
        req = urllib.request.Request(url or self.url + path, data=data, method=method, headers=hdrs)
        try:
            with self.opener.open(req, timeout=timeout) as res:
                return Answer(res.status, res.headers, res.read())
        except urllib.error.HTTPError as e:
            try:
                payload = e.read()
            except OSError:
                payload = b""
            return Answer(e.code, e.headers, payload)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise TransportError("%s %s: %s" % (method, path or url, e)) from e


def backoff(attempt, cap=5.0):
    """Exponential backoff with full jitter."""
    return random.uniform(0, min(cap, 0.2 * (2 ** min(attempt, 10))))


# --- tasks -----------------------------------------------------------------------------------


class Stopped(Exception):
    """The task must stop: cancelled, lease lost, or the worker is shutting down."""


class LeaseLost(Exception):
    pass


class Task:
    """One leased attempt and what its handler may do with it."""

    def __init__(self, worker, lease):
        self.worker = worker
        self.gw = worker.gw
        self.attempt_id = lease["attempt_id"]
        self.token = lease["lease_token"]
        self.task = lease["task"]
        self.payload = self.task.get("payload") or {}
        self.heartbeat_interval = float(lease.get("heartbeat_interval_seconds") or 10)
        self.cancel_requested = threading.Event()
        self.lost = threading.Event()
        self.changed = threading.Event()  # wakes a sleeping handler
        self.seq = 0
        self.log_offset = 0

    # State reported by any attempt-scoped answer.
    def observe(self, state, cancel=False):
        if state == "lost":
            if not self.lost.is_set():
                log("attempt %s: lease lost", self.attempt_id)
            self.lost.set()
            self.changed.set()
        elif state == "cancel_requested" or cancel:
            if not self.cancel_requested.is_set():
                log("attempt %s: cancellation requested", self.attempt_id)
            self.cancel_requested.set()
            self.changed.set()

    def should_stop(self):
        return self.lost.is_set() or self.cancel_requested.is_set() or self.worker.abort.is_set()

    def check(self):
        """Raise Stopped when the handler must stop."""
        if self.should_stop():
            raise Stopped()

    def sleep(self, seconds, step=0.1):
        """Sleep in small steps, stopping as soon as the task must stop."""
        end = time.monotonic() + seconds
        while True:
            self.check()
            left = end - time.monotonic()
            if left <= 0:
                return
            self.changed.wait(min(step, left))

    @property
    def lease_headers(self):
        return {"Lease-Token": self.token}

    def _attempt_call(self, what, path, body=None, extra=None, deadline=60.0):
        """POST an attempt call, retrying transport errors and transient answers unchanged until
        `deadline` seconds have passed. Answers the last Answer; raises LeaseLost on lease-lost."""
        headers = dict(self.lease_headers)
        headers.update(extra or {})
        data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8") if body is not None else None
        end = time.monotonic() + deadline
        attempt = 0
        while True:
            try:
                a = self.gw.call("POST", path, body=data, headers=headers)
                state = a.headers.get("Lease-State", "") if a.headers else ""
                if state:
                    self.observe(state)
                if a.status == 409 and a.code == "lease-lost":
                    self.observe("lost")
                    raise LeaseLost(what)
                if not a.retryable():
                    return a
                err = "answered %s" % a
                wait = a.retry_after(backoff(attempt))
            except TransportError as e:
                err, wait = str(e), backoff(attempt)
            attempt += 1
            if time.monotonic() + wait > end or self.worker.hard_stop.is_set():
                raise TransportError("%s: giving up after %d tries: %s" % (what, attempt, err))
            log("attempt %s: %s failed (%s); retrying in %.1fs", self.attempt_id, what, err, wait)
            time.sleep(wait)

    def emit(self, *records):
        """Send one result batch. Its Idempotency-Key is "<attempt>:<sequence>"; a retry sends the
        same key with the same bytes, so the batch takes effect exactly once."""
        self.check()
        self.seq += 1
        key = "%s:%d" % (self.attempt_id, self.seq)
        body = {"sequence_number": self.seq, "records": list(records)}
        path = "/v1/attempts/%s/results" % self.attempt_id
        if self.worker.take_fault_drop():
            # Test hook: the first batch reaches the gateway, its answer is "lost", and the batch is
            # sent again under the same key, as after a timeout.
            first = self._attempt_call("results (answer to be dropped)", path, body, {"Idempotency-Key": key})
            log("attempt %s: fault: dropping the answer to batch %d (%d), sending it again", self.attempt_id, self.seq, first.status)
        a = self._attempt_call("results", path, body, {"Idempotency-Key": key})
        if a.status != 200:
            raise RuntimeError("result batch %d refused: %s" % (self.seq, a))
        replayed = a.headers.get("Idempotent-Replayed") == "true"
        log("attempt %s: batch %d acknowledged%s", self.attempt_id, self.seq, " (replayed)" if replayed else "")
        return a.json()

    def log(self, text):
        """Append to the attempt's log at the current byte offset (a retried chunk is accepted once)."""
        data = text.encode("utf-8")
        a = self._attempt_call("logs", "/v1/attempts/%s/logs" % self.attempt_id, {"offset": self.log_offset, "data": text})
        if a.status == 200:
            self.log_offset = int(a.json().get("next_offset", self.log_offset + len(data)))
        else:
            log("attempt %s: log append refused: %s", self.attempt_id, a)

    def upload(self, name, data, content_type="application/octet-stream"):
        """Upload an artifact: open a session, PUT the bytes as it says, commit."""
        body = {"name": name, "content_type": content_type, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        a = self._attempt_call("open upload", "/v1/attempts/%s/artifacts" % self.attempt_id, body)
        if a.status != 201:
            raise RuntimeError("open upload refused: %s" % a)
        s = a.json()
        put = self.gw.call(s.get("method", "PUT"), "", raw=data, headers=s.get("headers") or {}, url=s["url"], timeout=120)
        if put.status not in (200, 204):
            raise RuntimeError("upload refused: %s" % put)
        c = self._attempt_call("commit upload", "/v1/uploads/%s/commit" % s["upload_id"])
        if c.status != 200:
            raise RuntimeError("commit refused: %s" % c)
        return c.json()

    def start(self):
        a = self._attempt_call("start", "/v1/attempts/%s/start" % self.attempt_id)
        if a.status == 200:
            st = a.json()
            self.observe(st.get("state"), st.get("cancel_requested", False))
        else:
            log("attempt %s: start answered %s", self.attempt_id, a)

    def complete(self, outcome, error=None):
        """Complete the attempt, retrying until acknowledged (completion is idempotent). When the
        worker has no free slot, the completion also asks for the next lease ("next"), so a busy
        worker sends one request per task; a retry sends the same call, so after a lost answer the
        gateway returns the same next lease under a fresh token instead of leasing another."""
        body = {"outcome": outcome}
        if error:
            body["error"] = error
        if self.seq:
            body["last_sequence_number"] = self.seq
        path = "/v1/attempts/%s/complete" % self.attempt_id
        reserved = self.worker.reserve_next()
        leases = []
        try:
            if reserved:
                body["next"] = {"max_tasks": 1}
            try:
                a = self._attempt_call("complete", path, body, deadline=120.0)
                if a.status == 400 and reserved:
                    # A gateway from before "next": complete without it, and poll instead.
                    del body["next"]
                    a = self._attempt_call("complete", path, body, deadline=120.0)
                    if a.status != 400:
                        self.worker.next_refused()
            except LeaseLost:
                log("attempt %s: lease lost before completing %s", self.attempt_id, outcome)
                return
            if a.status == 200:
                doc = a.json()
                leases = doc.get("leases") or []
                log("attempt %s: completed %s (task %s)%s", self.attempt_id, outcome, doc.get("task_state"),
                    ", the next lease came with it" if leases else "")
            else:
                log("attempt %s: complete %s refused: %s", self.attempt_id, outcome, a)
        finally:
            self.worker.next_answered(leases, reserved)


# --- handlers --------------------------------------------------------------------------------


def handle_echo(task, inp):
    host = inp.get("host") if isinstance(inp.get("host"), str) and inp.get("host") else "python.example"
    task.log("echo: reporting %s\n" % host)
    task.emit({"kind": "asset", "asset": {"type": "hostname", "value": host}})


def handle_sleep(task, inp):
    seconds = float(inp.get("seconds", 1))
    task.log("sleep: %gs\n" % seconds)
    task.sleep(seconds)


HANDLERS = {"echo": handle_echo, "sleep": handle_sleep}


class Failure(Exception):
    def __init__(self, code, message, retryable):
        super().__init__(message)
        self.code, self.retryable = code, retryable


def run_handler(task):
    plugin = task.payload.get("plugin")
    handler = HANDLERS.get(plugin)
    if handler is None:
        raise Failure("unknown-plugin", "no handler for plugin %r" % (plugin,), False)
    inp = task.payload.get("input") or {}
    handler(task, inp if isinstance(inp, dict) else {})


# --- the worker ------------------------------------------------------------------------------


class Worker:
    def __init__(self, args):
        self.args = args
        self.gw = Gateway(args.gateway, args.cert, args.key, args.ca)
        self.slots = args.slots
        self.capabilities = json.loads(args.capabilities)
        self.stop = threading.Event()  # no more polls
        self.abort = threading.Event()  # running tasks must stop (drain timed out)
        self.hard_stop = threading.Event()  # give up retrying
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.tasks = {}  # attempt_id -> Task
        self.threads = []
        self.leased = 0
        self.finished = 0
        self.parked = False  # the poll loop waits for a slot: a completion may lease the one it frees
        self.reserved = 0  # slots completions in flight may lease; the poll loop leaves them
        self.next_refused_until = 0.0
        self.fault_drop = args.fault_drop_first_result_answer

    def take_fault_drop(self):
        with self.lock:
            drop, self.fault_drop = self.fault_drop, False
            return drop

    # Long-poll loop.
    def poll_loop(self):
        while not self.stop.is_set():
            with self.cond:
                while not self.stop.is_set() and len(self.tasks) + self.reserved >= self.slots:
                    self.parked = True
                    self.cond.wait(1.0)
                self.parked = False
                if self.stop.is_set():
                    return
                free = self.slots - len(self.tasks) - self.reserved
                if self.args.once:
                    free = min(free, self.args.once - self.leased)
                    if free <= 0:
                        return
            leases = self.poll(free)
            for lease in leases:
                self.run(lease)

    def poll(self, n):
        """One long-poll. Its Idempotency-Key is reused on every retry, so an answer lost in transit
        returns the same leases instead of stranding them."""
        key = str(uuid.uuid4())
        body = {"max_tasks": n, "wait_seconds": self.args.wait, "capabilities": self.capabilities,
                "software_version": SOFTWARE_VERSION, "protocol_version": "1"}
        attempt = 0
        while True:
            try:
                a = self.gw.call("POST", "/v1/leases", body=body, headers={"Idempotency-Key": key}, timeout=self.args.wait + 30)
                if a.status == 200:
                    return a.json().get("leases") or []
                if not a.retryable():
                    log("poll refused: %s", a)
                    if a.status in (401, 403):
                        self.stop.set()
                        return []
                wait = a.retry_after(backoff(attempt))
            except TransportError as e:
                log("poll failed: %s", e)
                wait = backoff(attempt)
            attempt += 1
            if self.stop.wait(wait):
                # Stopping: one last try with the same key would only hand us leases to drain.
                return []

    def reserve_next(self):
        """1 when a completion should ask for the next lease: the poll loop is parked for want of a
        slot (so no poll is out for the slot this completion frees), else 0."""
        with self.cond:
            if not self.parked or self.stop.is_set() or time.monotonic() < self.next_refused_until:
                return 0
            if self.args.once and self.leased + self.reserved >= self.args.once:
                return 0
            self.reserved += 1
            return 1

    def next_answered(self, leases, reserved):
        """Runs the leases a completion brought, then gives its reservation back."""
        for lease in leases:
            if self.stop.is_set():
                # Stopping: give it back so another worker runs it now.
                Task(self, lease).complete("cancelled", {"code": "worker-shutdown", "message": "the worker stopped", "retryable": True})
                continue
            self.run(lease)
        with self.cond:
            self.reserved -= reserved
            self.cond.notify_all()

    def next_refused(self):
        with self.cond:
            self.next_refused_until = time.monotonic() + 300
        log("the gateway refused a next lease with a completion; polling for them instead for 5 minutes")

    def run(self, lease):
        task = Task(self, lease)
        with self.cond:
            self.tasks[task.attempt_id] = task
            self.leased += 1
            self.cond.notify_all()
        log("attempt %s: leased task %s (%s)", task.attempt_id, task.task.get("id"), task.payload.get("plugin"))
        t = threading.Thread(target=self.execute, args=(task,), name="task-" + task.attempt_id, daemon=True)
        self.threads.append(t)
        t.start()

    def execute(self, task):
        try:
            task.start()
            try:
                task.check()
                run_handler(task)
                task.check()
            except (Stopped, LeaseLost):
                pass
            except Failure as f:
                task.complete("failed", {"code": f.code, "message": str(f), "retryable": f.retryable})
                return
            except TransportError as e:
                if not task.lost.is_set():
                    task.complete("failed", {"code": "gateway-unreachable", "message": str(e), "retryable": True})
                return
            except Exception as e:  # a handler bug
                if not task.should_stop():
                    task.complete("failed", {"code": "handler-error", "message": "%s: %s" % (type(e).__name__, e), "retryable": True})
                    return
            else:
                task.complete("succeeded")
                return
            if task.lost.is_set():
                log("attempt %s: stopped without completing (lease lost)", task.attempt_id)
            elif task.cancel_requested.is_set():
                task.complete("cancelled")
            else:
                task.complete("failed", {"code": "worker-shutdown", "message": "the worker stopped", "retryable": True})
        except LeaseLost:
            log("attempt %s: lease lost", task.attempt_id)
        except Exception as e:
            log("attempt %s: %s", task.attempt_id, e)
        finally:
            with self.cond:
                self.tasks.pop(task.attempt_id, None)
                self.finished += 1
                self.cond.notify_all()

    # One heartbeat for all leases, at the shortest interval any of them names.
    def heartbeat_loop(self):
        while not self.hard_stop.is_set():
            with self.cond:
                while not self.tasks and not self.hard_stop.is_set():
                    self.cond.wait(1.0)
                tasks = list(self.tasks.values())
            if not tasks:
                continue
            interval = max(0.2, min(t.heartbeat_interval for t in tasks))
            if self.hard_stop.wait(interval):
                return
            with self.lock:
                tasks = list(self.tasks.values())
            if tasks:
                self.heartbeat(tasks)

    def heartbeat(self, tasks):
        body = {"leases": [{"attempt_id": t.attempt_id, "lease_token": t.token} for t in tasks],
                "capabilities": self.capabilities, "software_version": SOFTWARE_VERSION}
        try:
            a = self.gw.call("POST", "/v1/heartbeat", body=body, timeout=20)
        except TransportError as e:
            log("heartbeat failed: %s", e)
            return
        if a.status != 200:
            log("heartbeat refused: %s", a)
            return
        for t, st in zip(tasks, a.json().get("leases") or []):
            t.observe(st.get("state"), st.get("cancel_requested", False))
            if st.get("heartbeat_interval_seconds"):
                t.heartbeat_interval = float(st["heartbeat_interval_seconds"])

    def serve(self):
        poller = threading.Thread(target=self.poll_loop, name="poller", daemon=True)
        beater = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        poller.start()
        beater.start()
        deadline = time.monotonic() + self.args.max_seconds if self.args.max_seconds else None
        with self.cond:
            while not self.stop.is_set():
                if self.args.once and self.finished >= self.args.once:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    log("--max-seconds reached")
                    break
                self.cond.wait(0.2)
        self.stop.set()
        # Drain: running tasks may finish; past the drain timeout they are told to stop.
        drain_end = time.monotonic() + self.args.drain
        with self.cond:
            while self.tasks and time.monotonic() < drain_end:
                self.cond.wait(0.2)
            if self.tasks:
                log("drain timed out; stopping %d task(s)", len(self.tasks))
                self.abort.set()
                for t in self.tasks.values():
                    t.changed.set()
        # Stopped tasks complete (failed, retryable); give them a bounded moment.
        end = time.monotonic() + 30
        for t in list(self.threads):
            t.join(max(0.0, end - time.monotonic()))
        self.hard_stop.set()
        with self.cond:
            self.cond.notify_all()
        beater.join(5)
        log("stopped: %d task(s) leased, %d finished", self.leased, self.finished)
        return 0


def read_env(path):
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            if line.startswith("export "):
                line = line[len("export "):]
            k, v = line.split("=", 1)
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                v = v[1:-1]
            values[k.strip()] = v
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description="A Worker Gateway worker in Python, standard library only.")
    p.add_argument("--env", help="KEY=VALUE file as `make run` writes it ($STATE_DIR/env); flags win over it")
    p.add_argument("--manual", action="store_true",
                   help="act as the hand-driven worker: MANUAL_WORKER_CERT/KEY from the env file, and "
                        "\"manual\": true among the default capabilities (as scripts/curl-worker.sh --manual)")
    p.add_argument("--gateway", help="gateway URL (GATEWAY_URL)")
    p.add_argument("--cert", help="client certificate PEM (WORKER_CERT)")
    p.add_argument("--key", help="client key PEM (WORKER_KEY)")
    p.add_argument("--ca", help="CA certificate PEM to trust (CA_CERT)")
    p.add_argument("--slots", type=int, default=1, help="tasks run at once (default 1)")
    p.add_argument("--wait", type=int, default=20, help="long-poll wait in seconds (default 20)")
    p.add_argument("--capabilities",
                   help="capabilities to advertise, a JSON object (default %s, with --manual also \"manual\": true)"
                        % json.dumps({"plugins": list(PLUGINS)}))
    p.add_argument("--once", type=int, default=0, metavar="N", help="exit after N tasks (0: run until stopped)")
    p.add_argument("--max-seconds", type=float, default=0, help="stop after this many seconds (0: no limit)")
    p.add_argument("--drain", type=float, default=30, help="seconds running tasks may take to finish on stop")
    p.add_argument("--fault-drop-first-result-answer", action="store_true",
                   help="test hook: send the first result batch, drop its answer and send it again with the same key")
    args = p.parse_args(argv)
    env = read_env(args.env) if args.env else {}
    cert_var, key_var = ("MANUAL_WORKER_CERT", "MANUAL_WORKER_KEY") if args.manual else ("WORKER_CERT", "WORKER_KEY")
    if args.capabilities is None:
        caps = {"plugins": list(PLUGINS)}
        if args.manual:
            caps["manual"] = True
        args.capabilities = json.dumps(caps)
    args.gateway = args.gateway or env.get("GATEWAY_URL") or os.environ.get("GATEWAY_URL")
    args.cert = args.cert or env.get(cert_var) or os.environ.get(cert_var)
    args.key = args.key or env.get(key_var) or os.environ.get(key_var)
    args.ca = args.ca or env.get("CA_CERT") or os.environ.get("CA_CERT")
    for name in ("gateway", "cert", "key", "ca"):
        if not getattr(args, name):
            p.error("--%s is required (or --env FILE)" % name)
    if args.slots < 1:
        p.error("--slots must be at least 1")
    try:
        if not isinstance(json.loads(args.capabilities), dict):
            raise ValueError
    except ValueError:
        p.error("--capabilities must be a JSON object")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    worker = Worker(args)

    def on_signal(signum, _frame):
        log("signal %d: stopping (draining running tasks)", signum)
        worker.stop.set()  # the loops wake within a fraction of a second

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log("serving %s with %d slot(s)", args.gateway, args.slots)
    return worker.serve()


if __name__ == "__main__":
    sys.exit(main())
