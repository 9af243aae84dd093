#!/usr/bin/env python3
"""OTLP export, checked by the official protobuf models: iac-agui --demo with --otlp-endpoint
pointing at a loopback receiver here; every body it posts to /v1/traces must parse as an
`ExportTraceServiceRequest` (opentelemetry-proto's JSON mapping), and the spans of one run must
link request -> run -> kernel calls under the caller's trace. A malformed traceparent starts
a trace of its own. Then the collector dies, and a run still ends at once.

Usage: otlp_receiver.py --bin PATH   (with opentelemetry-proto importable)
"""

import argparse
import base64
import http.client
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
KIND_SERVER, KIND_CLIENT, KIND_INTERNAL = 2, 3, 1


class Failure(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failure(f"OTLP FAILED: {what}")


class Receiver(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.requests = []  # (content type, parsed ExportTraceServiceRequest)
        self.errors = []


ID_HEX = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def hex_ids_to_base64(v):
    """OTLP/JSON writes trace and span ids as hex where protobuf's own JSON mapping has base64
    (the specification's one deviation from it): checked as hex of the right length, then put
    in the form `json_format` reads, as a collector's OTLP/JSON decoder does."""
    if isinstance(v, list):
        return [hex_ids_to_base64(x) for x in v]
    if not isinstance(v, dict):
        return v
    out = {}
    for k, x in v.items():
        if k in ID_HEX and isinstance(x, str):
            if len(x) != ID_HEX[k] or x != x.lower() or not all(c in "0123456789abcdef" for c in x):
                raise ValueError(f"{k} is not {ID_HEX[k]} lowercase hex digits: {x!r}")
            out[k] = base64.b64encode(bytes.fromhex(x)).decode()
        else:
            out[k] = hex_ids_to_base64(x)
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        srv = self.server
        try:
            if self.path != "/v1/traces":
                raise ValueError(f"posted to {self.path}")
            msg = json_format.Parse(json.dumps(hex_ids_to_base64(json.loads(body))), ExportTraceServiceRequest())
            with srv.lock:
                srv.requests.append((self.headers.get("Content-Type"), msg))
        except Exception as e:  # noqa: BLE001 - any refusal is a test failure
            with srv.lock:
                srv.errors.append(f"{e}: {body[:300]!r}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def spans(rcv):
    out = []
    with rcv.lock:
        reqs = list(rcv.requests)
    for _, msg in reqs:
        for rs in msg.resource_spans:
            attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append((attrs, ss.scope.name, s))
    return out


def attr(span, key):
    for a in span.attributes:
        if a.key == key:
            return a.value.string_value or a.value.int_value
    return None


def start(bin_path, endpoint, work, log):
    env = dict(os.environ, IAC_CODE_AGUI_STATE_DIR=os.path.join(work, "state"), RUST_LOG="info")
    cmd = [bin_path, "--demo", "--port", "0", "--agui-protocol", "1.0", "--log-format", "json",
           "--disconnect-grace", "0", "--otlp-endpoint", endpoint]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + 60
    while time.time() < deadline and port is None:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == "listening" and rec.get("target") == "iac_agui":
            port = int(rec["url"].rsplit(":", 1)[1])
    expect(port, f"iac-agui did not start: {''.join(log)[-2000:]}")
    threading.Thread(target=lambda: [log.append(x) for x in proc.stderr], daemon=True).start()
    return proc, port


def run(port, thread, headers, timeout=60):
    body = {"threadId": thread, "runId": f"{thread}-r1", "state": {}, "tools": [], "context": [],
            "messages": [{"id": f"{thread}-m1", "role": "user", "content": "hello"}], "forwardedProps": {}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/", body=json.dumps(body), headers={"Content-Type": "application/json", **headers})
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    expect(r.status == 200, f"run {thread}: HTTP {r.status} {raw[:300]}")
    events = [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: ")]
    expect(events and events[-1]["type"] == "RUN_FINISHED", f"run {thread} ended {events[-1:]}")
    return events


def wait_until(f, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        v = f()
        if v:
            return v
        time.sleep(0.05)
    return f()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="iac-agui-otlp-")
    rcv = Receiver()
    threading.Thread(target=rcv.serve_forever, daemon=True).start()
    log = []
    proc, port = start(args.bin, f"http://127.0.0.1:{rcv.server_address[1]}", work, log)
    try:
        events = run(port, "traced", {"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "rojo=1"})
        sess = [e for e in events if e.get("name") == "iac-code.session.v1"][0]["value"]
        expect(sess.get("traceId") == TRACE, f"session event {sess}")

        def linked():
            got = [s for (_, _, s) in spans(rcv) if s.trace_id.hex() == TRACE]
            server = [s for s in got if s.kind == KIND_SERVER and s.parent_span_id.hex() == PARENT]
            if not server:
                return None
            runs = [s for s in got if s.kind == KIND_INTERNAL and s.parent_span_id == server[0].span_id]
            if not runs:
                return None
            calls = [s for s in got if s.kind == KIND_CLIENT and s.parent_span_id == runs[0].span_id]
            return (server[0], runs[0], calls) if calls else None

        found = wait_until(linked)
        expect(not rcv.errors, f"bodies that are not OTLP JSON: {rcv.errors}")
        expect(found, f"no request -> run -> kernel call chain under {TRACE}; spans: "
                      f"{[(s.name, s.kind, s.span_id.hex(), s.parent_span_id.hex()) for (_, _, s) in spans(rcv)]}")
        server, run_span, calls = found
        expect(all(ct == "application/json" for ct, _ in rcv.requests), "Content-Type")
        res, scope, _ = spans(rcv)[0]
        expect(res.get("service.name") == "iac-agui" and scope == "iac-agui", f"resource {res} scope {scope}")
        expect(attr(run_span, "agui.outcome") == "success", f"run outcome {attr(run_span, 'agui.outcome')}")
        expect(attr(run_span, "gen_ai.usage.input_tokens") is not None, "run usage")
        expect(any(attr(c, "rpc.method") == "SendStreamingMessage" for c in calls),
               f"kernel calls {[attr(c, 'rpc.method') for c in calls]}")
        expect(server.trace_state == "rojo=1", f"tracestate {server.trace_state!r}")
        expect(server.start_time_unix_nano <= run_span.start_time_unix_nano <= run_span.end_time_unix_nano
               <= server.end_time_unix_nano, "run inside its request")
        recs = [json.loads(l) for l in log if l.startswith("{")]
        access = [r for r in recs if r.get("target") == "iac_agui::access" and r.get("thread_id") == "traced"]
        expect(access and access[0].get("trace_id") == TRACE, f"access record {access}")

        # A trace its caller did not sample is passed on, not exported.
        unsampled = "5" * 32
        events = run(port, "unsampled", {"traceparent": f"00-{unsampled}-{PARENT}-00"})
        sess = [e for e in events if e.get("name") == "iac-code.session.v1"][0]["value"]
        expect(sess.get("traceId") == unsampled, f"unsampled session event {sess}")

        # A malformed traceparent is ignored: the request starts a trace of its own.
        events = run(port, "malformed", {"traceparent": f"00-{TRACE.upper()}-{PARENT}-01"})
        new = [e for e in events if e.get("name") == "iac-code.session.v1"][0]["value"]["traceId"]
        expect(new != TRACE and len(new) == 32, f"malformed traceparent kept {new}")
        root = wait_until(lambda: [s for (_, _, s) in spans(rcv) if s.trace_id.hex() == new and s.kind == KIND_SERVER])
        expect(root and not root[0].parent_span_id, f"new trace's request span {root}")
        # Spans leave in the order they ended: the later run's arrived, so the unsampled would have.
        expect(not [s for (_, _, s) in spans(rcv) if s.trace_id.hex() == unsampled], "an unsampled trace was exported")

        # The collector dies: runs are not slowed (the exporter drops and counts).
        rcv.shutdown()
        rcv.server_close()
        t0 = time.time()
        for i in range(3):
            run(port, f"dead-{i}", {})
        took = time.time() - t0
        expect(took < 10, f"three runs with a dead collector took {took:.1f}s")

        def counter(name):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
            return next((float(l.split()[1]) for l in text.splitlines() if l.startswith(name + " ")), 0.0)

        expect(counter("iac_agui_otlp_spans_exported_total") >= 6, "exported spans not counted")
        expect(wait_until(lambda: counter("iac_agui_otlp_spans_dropped_total") > 0),
               "spans lost to the dead collector are not counted in /metrics")
        print(f"ok   otlp export ({len(spans(rcv))} spans parsed; dead collector: 3 runs in {took:.2f}s)")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as f:
        print(str(f), file=sys.stderr)
        sys.exit(1)
