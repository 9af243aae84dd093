"""A fleet: two iac-agui --demo pairs behind nginx with thread affinity (issue 14).

Proves: every request of a thread lands on the same pair (an interrupt taken through nginx
is resumed through nginx), threads spread over both pairs, the first event arrives through
nginx as fast as direct (no buffering), a killed pair affects only its own threads (a clear
error, never a hang) while the other pair's threads keep working, and a pair drained with
SIGTERM finishes its runs. Then a fleet routed by caller (issue 39): pairs with
--identity-header, nginx hashing on that header, so all of a caller's threads live on one
pair and GET /threads through nginx lists every one of them. Only loopback ports;
everything started is stopped.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HEADER = "X-Iac-Code-Thread-Id"


class Failure(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failure(f"FLEET FAILED: {what}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Pair:
    """One iac-agui with its built-in demo kernel (a private state directory)."""

    def __init__(self, binary, work, name, extra=()):
        self.name = name
        self.log = open(os.path.join(work, f"{name}.log"), "w")
        env = dict(os.environ, IAC_CODE_AGUI_ALLOWED_CWDS=work, RUST_LOG="info")
        self.proc = subprocess.Popen([binary, "--demo", "--port", "0", "--shutdown-grace", "20", *extra],
                                     env=env, stderr=subprocess.PIPE, stdout=self.log, text=True)
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.write(line)
            if line.startswith("iac-agui ") and "kernel" not in line and "listening on http://" in line:
                self.port = int(line.rsplit(":", 1)[1])
                break
        expect(self.port, f"pair {name} did not start")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.write(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(10)


# An nginx of its own in `work` (no root, no system paths); the `http` block stays open.
NGINX_HEAD = """
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections {conns}; }}
http {{
    access_log off;
    client_body_temp_path {work}/nginx-body;
    proxy_temp_path {work}/nginx-proxy;
    fastcgi_temp_path {work}/nginx-fastcgi;
    uwsgi_temp_path {work}/nginx-uwsgi;
    scgi_temp_path {work}/nginx-scgi;
"""

NGINX_CONF = NGINX_HEAD + """    upstream agui {{
        hash {key} consistent;
        server 127.0.0.1:{a} max_fails=1 fail_timeout=30s;
        server 127.0.0.1:{b} max_fails=1 fail_timeout=30s;
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://agui;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host localhost;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 60s;
            proxy_connect_timeout 2s;
        }}
    }}
}}
"""


class Fleet:
    def __init__(self, binary, nginx, work, extra=(), key="$http_x_iac_code_thread_id"):
        self.work = work
        self.pairs = [Pair(binary, work, "a", extra), Pair(binary, work, "b", extra)]
        self.port = free_port()
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(work=work, conns=1024, a=self.pairs[0].port, b=self.pairs[1].port,
                                      port=self.port, key=key))
        self.nlog = open(os.path.join(work, "nginx.out"), "w")
        self.nginx = subprocess.Popen([nginx, "-c", conf, "-p", work], stdout=self.nlog, stderr=self.nlog)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise Failure("FLEET FAILED: nginx did not start")
        self.n = 0

    def stop(self):
        for p in self.pairs:
            p.stop()
        if self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()

    def body(self, thread, text, run=None, resume=None):
        self.n += 1
        b = {"threadId": thread, "runId": run or f"run-{self.n}-{time.time_ns()}", "state": {}, "tools": [],
             "context": [], "messages": [] if resume else [{"id": f"m{self.n}", "role": "user", "content": text}],
             "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": self.work}}}
        if resume:
            b["resume"] = resume
        return b

    def get(self, port, path, headers):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        out = (r.status, json.loads(r.read()))
        c.close()
        return out

    def post(self, port, path, body, thread, timeout=30, on_event=None, headers=None):
        """POST through `port`; (status, events or error body, seconds to the first delta)."""
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        t0 = time.time()
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json", HEADER: thread, **(headers or {})})
        r = c.getresponse()
        if r.status != 200 or not r.getheader("Content-Type", "").startswith("text/event-stream"):
            raw = r.read()
            c.close()
            try:
                return r.status, json.loads(raw), None
            except ValueError:
                return r.status, raw.decode("utf-8", "replace"), None
        expect(r.getheader(HEADER) == thread, "the routing header was not echoed")
        events, first, buf = [], None, b""
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                for line in block.split(b"\n"):
                    if line.startswith(b"data: "):
                        e = json.loads(line[6:])
                        events.append(e)
                        if first is None and e["type"] == "TEXT_MESSAGE_CONTENT":
                            first = time.time() - t0
                        if on_event:
                            on_event(e)
        c.close()
        return 200, events, first

    def run(self, thread, text, **kw):
        return self.post(self.port, "/", self.body(thread, text, **kw), thread)

    def owner(self, thread, run, execution):
        """Which pair holds this run: ask each one directly with a replay subscription."""
        owners = []
        for i, p in enumerate(self.pairs):
            st, _, _ = self.post(p.port, f"/extensions/iac-code/v1/executions/{execution}/subscribe",
                                 {"threadId": thread, "runId": run, "rosInvocationId": "ros", "afterSequence": -1},
                                 thread)
            if st == 200:
                owners.append(i)
        expect(len(owners) == 1, f"thread {thread} is known to pairs {owners}")
        return owners[0]


def session(events):
    return next(e["value"] for e in events if e.get("name") == "iac-code.session.v1")


def last(events):
    return events[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--nginx", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="iac-agui-fleet-")
    fleet = None
    try:
        fleet = Fleet(args.bin, args.nginx, work)
        # 1. Affinity and spread: 16 threads, each an interrupt resumed through nginx.
        owners = {}
        for i in range(16):
            thread = f"fleet-{i}"
            body = fleet.body(thread, "permission please")
            st, ev, _ = fleet.post(fleet.port, "/", body, thread)
            expect(st == 200 and last(ev)["outcome"]["type"] == "interrupt", f"{thread}: {st} {ev}")
            intr = last(ev)["outcome"]["interrupts"][0]["id"]
            owners[thread] = fleet.owner(thread, body["runId"], session(ev)["executionId"])
            st, ev2, _ = fleet.run(thread, "", resume=[{"interruptId": intr, "status": "resolved",
                                                        "payload": {"decision": "allow_once"}}])
            expect(st == 200 and last(ev2)["outcome"]["type"] == "success",
                   f"{thread}: the resume through nginx failed: {st} {ev2 if st != 200 else last(ev2)}")
        spread = [list(owners.values()).count(i) for i in (0, 1)]
        expect(min(spread) > 0, f"threads did not spread over both pairs: {spread}")
        print(f"ok   affinity: 16 interrupts resumed through nginx; threads per pair {spread}", flush=True)
        # 2. No buffering: the first delta of a paced run arrives as soon as direct.
        thread_a = next(t for t, o in owners.items() if o == 0)
        _, _, direct = fleet.post(fleet.pairs[0].port, "/", fleet.body(thread_a, "pace 6 2"), thread_a)
        st, ev, proxied = fleet.run(thread_a, "pace 6 2")
        expect(st == 200 and direct is not None and proxied is not None, "paced runs failed")
        expect(proxied < direct + 0.3 and proxied < 1.5,
               f"first event through nginx after {proxied:.2f}s, direct {direct:.2f}s (buffered?)")
        print(f"ok   streaming: first delta direct {direct:.2f}s, through nginx {proxied:.2f}s", flush=True)
        # 3. A killed pair affects only its own threads: a paused interrupt there gets a clear
        #    error at once (nginx moves the thread to the live pair, which does not know it),
        #    never a hang; the other pair's threads keep working.
        thread_b = next(t for t, o in owners.items() if o == 1)
        st, ev, _ = fleet.run(thread_a, "permission please")
        lost = last(ev)["outcome"]["interrupts"][0]["id"]
        fleet.pairs[0].proc.kill()
        fleet.pairs[0].proc.wait()
        t0 = time.time()
        st, ev, _ = fleet.run(thread_a, "", resume=[{"interruptId": lost, "status": "resolved",
                                                     "payload": {"decision": "allow_once"}}])
        took = time.time() - t0
        failed = st != 200 or last(ev)["type"] == "RUN_ERROR"
        expect(failed and took < 5, f"the lost pair's thread: {st} {ev if st != 200 else last(ev)} after {took:.1f}s")
        what = ev["error"]["code"] if st != 200 and isinstance(ev, dict) else (st if st != 200 else last(ev)["code"])
        st, ev, _ = fleet.run(thread_b, "permission please")
        intr = last(ev)["outcome"]["interrupts"][0]["id"]
        st, ev, _ = fleet.run(thread_b, "", resume=[{"interruptId": intr, "status": "resolved",
                                                     "payload": {"decision": "allow_once"}}])
        expect(st == 200 and last(ev)["outcome"]["type"] == "success", f"the live pair's thread: {st}")
        print(f"ok   killed pair: its thread got {what} in {took:.2f}s; the other pair's threads work", flush=True)
        # 4. A pair drained with SIGTERM finishes its runs (and refuses new ones meanwhile).
        done = {}

        def long_run():
            done["r"] = fleet.run(thread_b, "pace 20 10")
        t = threading.Thread(target=long_run)
        t.start()
        time.sleep(0.5)
        fleet.pairs[1].proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        st, ev, _ = fleet.post(fleet.pairs[1].port, "/", fleet.body(thread_b + "-new", "hello"), thread_b + "-new")
        expect(st == 503 and ev["error"]["code"] == "SERVER_SHUTTING_DOWN", f"a new run while draining: {st} {ev}")
        t.join(30)
        st, ev, _ = done.get("r", (0, [], None))
        expect(st == 200 and last(ev)["type"] == "RUN_FINISHED", f"the drained pair's run: {st} {ev[-1:] if ev else ev}")
        code = fleet.pairs[1].proc.wait(30)
        expect(code == 0, f"the drained pair exited {code}")
        print("ok   drain: the run on the drained pair finished, new work got 503; it exited 0", flush=True)
        fleet.stop()
        fleet = None
        # 5. Routed by caller: nginx hashes on the identity header (what an authenticating proxy
        #    in front sets), so each caller's threads are on one pair and listed whole.
        by_user = os.path.join(work, "by-user")
        os.makedirs(by_user)
        fleet = Fleet(args.bin, args.nginx, by_user, extra=["--identity-header", "X-Forwarded-User"],
                      key="$http_x_forwarded_user")
        homes = {}
        for u in range(8):
            user = {"X-Forwarded-User": f"user-{u}"}
            for t in range(3):
                thread = f"u{u}-t{t}"
                st, ev, _ = fleet.post(fleet.port, "/", fleet.body(thread, "hello"), thread, headers=user)
                expect(st == 200 and last(ev)["type"] == "RUN_FINISHED", f"{thread}: {st}")
            st, listed = fleet.get(fleet.port, "/threads", user)
            got = sorted(x["threadId"] for x in listed["threads"])
            expect(st == 200 and got == [f"u{u}-t{t}" for t in range(3)], f"user-{u} lists {st} {got}")
            where = [i for i, p in enumerate(fleet.pairs)
                     if fleet.get(p.port, "/threads", user)[1]["threads"]]
            expect(len(where) == 1, f"user-{u}'s threads are on pairs {where}")
            homes[u] = where[0]
        spread = [list(homes.values()).count(i) for i in (0, 1)]
        expect(min(spread) > 0, f"callers did not spread over both pairs: {spread}")
        print(f"ok   by caller: 8 callers x 3 threads, each caller's on one pair and listed whole; callers per pair {spread}",
              flush=True)
        print("fleet: all checks passed", flush=True)
        fleet.stop()
        fleet = None
        shutil.rmtree(work, ignore_errors=True)
        return 0
    except Failure as f:
        print(str(f), file=sys.stderr, flush=True)
        print(f"logs kept in {work}", file=sys.stderr)
        return 1
    finally:
        if fleet:
            fleet.stop()


if __name__ == "__main__":
    sys.exit(main())
