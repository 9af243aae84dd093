#!/usr/bin/env python3
"""Interop suite: iac-agui in front of the real iac-code 0.16.0 kernel, driven by a scripted
fake LLM, every AG-UI event validated with the official `ag_ui` models and the stream rules.

Usage: run.py --bin PATH --iac-code PATH [--mode managed|external] [--protocol 0.1|1.0]
Run it with a Python that has `ag-ui-protocol` (0.1.20, or 1.0.0 for --protocol 1.0).
iac-agui is started with no dialect flag (issue 57): `--protocol` is the generation of client the
suite's own requests act as — 1.0 declares `protocolVersion: "1.0"` in every run and subscribe
body (as the 1.0 SDKs do), 0.1 declares nothing (as CopilotKit 1.75 does) — and every stream
must be in that dialect, with no dialect warning in the server's log.
Any failure exits non-zero with "INTEROP FAILED [scenario]: what".
"""

import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from pydantic import TypeAdapter

try:
    from ag_ui.core import Event as AguiEvent
except ImportError:  # pragma: no cover
    from ag_ui.core.events import Event as AguiEvent

EVENTS = TypeAdapter(AguiEvent)
HERE = os.path.dirname(os.path.abspath(__file__))
PERMISSION_SCHEMA = {"type": "object", "properties": {"decision": {"type": "string", "enum": ["allow_once", "deny"]}},
                     "required": ["decision"], "additionalProperties": False}
SESSION_KEYS = ["schemaVersion", "threadId", "aguiRunId", "executionId", "contextId", "taskId", "rosInvocationId", "sessionId"]


class Failure(Exception):
    pass


def fail(scenario, what):
    raise Failure(f"INTEROP FAILED [{scenario}]: {what}")


def no_dialect_warning(scenario, path):
    """The official clients declare a version the server reads: its log has no dialect warning."""
    with open(path, encoding="utf-8", errors="replace") as f:
        warned = [line for line in f if "is not a version this server reads" in line]
    if warned:
        fail(scenario, f"the server warned about a client's protocolVersion: {warned[0].strip()[:300]}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(port, path, token=None, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            c.request("GET", path, headers=headers)
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def ready_url(line):
    """The URL of iac-agui's ready line in either log format (text, or the JSON record)."""
    line = line.strip()
    if line.startswith("{"):
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        return rec.get("url") if rec.get("msg") == "listening" and rec.get("target") == "iac_agui" else None
    if line.startswith("iac-agui ") and " listening on http://" in line and "kernel" not in line:
        return line.split(" listening on ", 1)[1]
    return None


def parse_sse(raw, scenario, first_id=0):
    """Events of an SSE body; each must be `id: N` + `data: …`, numbered from `first_id`."""
    events = []
    for block in raw.decode("utf-8").split("\n\n"):
        if not block or block == ": heartbeat":
            continue
        head, _, data = block.partition("\n")
        if not head.startswith("id: ") or not data.startswith("data: ") or "\r" in block:
            fail(scenario, f"bad SSE framing: {block[:80]!r}")
        want = first_id + len(events)
        if head != f"id: {want}":
            fail(scenario, f"event id {head!r}, expected {want}")
        events.append(json.loads(data[6:]))
    return events


STRICT_V1 = False


def extra_keys(model, path):
    """Keys a pydantic model kept as extras, at any depth (lists of models included)."""
    from pydantic import BaseModel
    out = [f"{path}.{k}" for k in (getattr(model, "model_extra", None) or {})]
    for name in type(model).model_fields:
        v = getattr(model, name)
        items = v if isinstance(v, list) else [v]
        for j, x in enumerate(items):
            if isinstance(x, BaseModel):
                out += extra_keys(x, f"{path}.{name}" + (f"[{j}]" if isinstance(v, list) else ""))
    return out


def check_stream(scenario, events):
    """Official models + stream rules; the message names the offending event."""
    if not events:
        fail(scenario, "empty stream")
    for i, e in enumerate(events):
        try:
            model = EVENTS.validate_python(e)
        except Exception as ex:  # noqa: BLE001
            fail(scenario, f"event {i} {e.get('type')} is rejected by the official AG-UI models: {str(ex).splitlines()[0]}")
        # The 1.0 models allow extra keys; strict 1.0 means none (0.1 mode keeps the
        # reference's bytes, extras included).
        if STRICT_V1:
            unknown = extra_keys(model, e.get("type", "event"))
            if unknown:
                fail(scenario, f"event {i} {e.get('type')} has keys the AG-UI 1.0 models do not know: {unknown}")
        for k, v in e.items():
            if v is None:
                fail(scenario, f"event {i} {e.get('type')} carries null in {k}")
    if events[0]["type"] != "RUN_STARTED":
        fail(scenario, f"event 0 is {events[0]['type']}, not RUN_STARTED")
    # Served in the dialect the request declared (the server has no dialect flag).
    declared = events[0].get("protocolVersion")
    if declared != ("1.0" if STRICT_V1 else None):
        fail(scenario, f"RUN_STARTED protocolVersion {declared!r}: not the dialect the request declared")
    terminals = [i for i, e in enumerate(events) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
    if len(terminals) != 1 or terminals[0] != len(events) - 1:
        fail(scenario, f"terminal events at {terminals} of {len(events)}")
    open_spans = {"text": set(), "reasoning": set(), "tool": set(), "step": set()}
    kinds = {
        "TEXT_MESSAGE_START": ("text", "messageId", "open"), "TEXT_MESSAGE_CONTENT": ("text", "messageId", "in"),
        "TEXT_MESSAGE_END": ("text", "messageId", "close"),
        "REASONING_START": ("reasoning", "messageId", "open"), "REASONING_END": ("reasoning", "messageId", "close"),
        "TOOL_CALL_START": ("tool", "toolCallId", "open"), "TOOL_CALL_ARGS": ("tool", "toolCallId", "in"),
        "TOOL_CALL_END": ("tool", "toolCallId", "close"),
        "STEP_STARTED": ("step", "stepName", "open"), "STEP_FINISHED": ("step", "stepName", "close"),
    }
    for i, e in enumerate(events):
        k = kinds.get(e["type"])
        if not k:
            continue
        span, key, op = k
        ident = e.get(key)
        spans = open_spans[span]
        if op == "open" and ident in spans or op != "open" and ident not in spans:
            fail(scenario, f"event {i} {e['type']} {ident!r} breaks {span} span balance")
        if op == "open":
            spans.add(ident)
        elif op == "close":
            spans.discard(ident)
    left = {k: v for k, v in open_spans.items() if v}
    if left:
        fail(scenario, f"spans still open at the terminal event {events[-1]['type']}: {left} (a missing *_END event)")


class Adapter:
    def __init__(self, args, work, kernel_url=None, kernel_token=None, extra=(), state="state"):
        self.args, self.work = args, work
        env = dict(os.environ)
        env.update(work.env)
        env["IAC_CODE_AGUI_STATE_DIR"] = os.path.join(work.dir, state)
        env["RUST_LOG"] = "info"
        # --default-cwd: stock clients (the validator) send no iacCode; the scenarios that do are
        # validated as sent. No dialect flag: each request declares its own (issue 57).
        cmd = [args.bin, "--port", "0", "--log-format", args.log_format,
               "--default-cwd", work.ws, *extra]
        if kernel_url:
            cmd += ["--a2a-url", kernel_url]
            env["IAC_CODE_AGUI_A2A_TOKEN"] = kernel_token
        elif args.kernel_beside_bin:
            # The installed layout: iac-agui must find the iac-code beside it by itself.
            env.pop("IAC_CODE_AGUI_KERNEL_CMD", None)
        else:
            env["IAC_CODE_AGUI_KERNEL_CMD"] = args.iac_code
        self.log = open(os.path.join(work.dir, f"agui-{time.time():.0f}.log"), "w")
        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=self.log, text=True)
        deadline = time.time() + 90
        self.port = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.write(line)
            url = ready_url(line)
            if url:
                self.port = int(url.rsplit(":", 1)[1])
                break
        if not self.port:
            raise Failure(f"INTEROP FAILED [startup]: iac-agui did not start (exit {self.proc.poll()}); see {self.log.name}")
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.write(line)

    def stop(self):
        self.proc.terminate()
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure("INTEROP FAILED [shutdown]: iac-agui ignored SIGTERM")
        if code != 0:
            raise Failure(f"INTEROP FAILED [shutdown]: iac-agui exited {code}")
        self.drain.join(10)
        self.log.flush()
        no_dialect_warning("shutdown", self.log.name)
        if self.args.check_json_log:
            self.check_json_log()

    def check_json_log(self):
        """With --log-format json every line iac-agui wrote on stderr (the kernel's relayed
        output included) is one JSON object with ts, level and msg."""
        self.drain.join(10)  # the last lines are read after the exit, until the pipe closes
        self.log.flush()
        n = 0
        with open(self.log.name, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    raise Failure(f"INTEROP FAILED [json-log]: not a JSON line: {line[:200]!r}")
                if not all(isinstance(rec.get(k), str) for k in ("ts", "level", "msg")):
                    raise Failure(f"INTEROP FAILED [json-log]: a record without ts/level/msg: {line[:200]!r}")
                n += 1
        if n == 0:
            raise Failure("INTEROP FAILED [json-log]: no log lines")

    def request(self, path, body, timeout=120, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
        return c, c.getresponse()

    def post(self, scenario, body, headers=None):
        c, r = self.request("/", body, headers=headers)
        raw = r.read()
        c.close()
        if r.status != 200:
            return r.status, json.loads(raw)
        events = parse_sse(raw, scenario)
        check_stream(scenario, events)
        return 200, events

    def get_json(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        out = r.status, json.loads(r.read())
        c.close()
        return out

    def subscribe(self, scenario, execution_id, body, first_id=0):
        if STRICT_V1:
            body = dict(body, protocolVersion="1.0")
        c, r = self.request(f"/extensions/iac-code/v1/executions/{execution_id}/subscribe", body)
        raw = r.read()
        c.close()
        if r.status != 200:
            return r.status, json.loads(raw)
        events = parse_sse(raw, scenario, first_id)
        return 200, events

    def cancel(self, execution_id, thread, ros):
        c, r = self.request(f"/extensions/iac-code/v1/executions/{execution_id}/cancel",
                            {"threadId": thread, "rosInvocationId": ros})
        body = json.loads(r.read())
        c.close()
        return r.status, body


class Work:
    def __init__(self, llm_port):
        self.dir = tempfile.mkdtemp(prefix="iac-agui-interop-")
        self.ws = os.path.join(self.dir, "ws")
        os.makedirs(self.ws)
        home = os.path.join(self.dir, "home")
        os.makedirs(home)
        self.env = {
            "HOME": home, "IAC_CODE_CONFIG_DIR": os.path.join(home, ".iac-code"),
            "IAC_CODE_PROVIDER": "OpenAI Compatible", "IAC_CODE_BASE_URL": f"http://127.0.0.1:{llm_port}/v1",
            "IAC_CODE_API_KEY": "fake-key", "IAC_CODE_MODEL": "fake-model",
            "DISABLE_TELEMETRY": "1", "IAC_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "IAC_CODE_AGUI_ALLOWED_CWDS": self.dir, "NO_PROXY": "*",
        }
        self.n = 0

    def body(self, thread, text, run=None, resume=None, **props):
        self.n += 1
        iac = {"schemaVersion": 1, "rosInvocationId": "ros-interop", "cwd": self.ws}
        iac.update(props)
        b = {"threadId": thread, "runId": run or f"run-{self.n}", "state": {}, "tools": [], "context": [],
             "messages": [{"id": f"m-{self.n}", "role": "user", "content": text}] if resume is None else [],
             "forwardedProps": {"iacCode": iac}}
        if resume is not None:
            b["resume"] = resume
        if STRICT_V1:
            b["protocolVersion"] = "1.0"
        return b


def session(scenario, events, thread):
    s = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "iac-code.session.v1"]
    if len(s) != 1:
        fail(scenario, f"{len(s)} session events")
    v = s[0]["value"]
    # 1.0 adds the request's W3C trace id (docs/protocol.md #86); 0.1 is the reference's.
    keys = SESSION_KEYS + (["traceId"] if STRICT_V1 else [])
    if list(v.keys()) != keys:
        fail(scenario, f"session event keys {list(v.keys())}")
    if STRICT_V1 and not (len(v["traceId"]) == 32 and all(c in "0123456789abcdef" for c in v["traceId"])):
        fail(scenario, f"session traceId {v['traceId']!r}")
    ctx = "agui-" + hashlib.sha256(thread.encode()).hexdigest()[:40]
    if v["contextId"] != ctx or v["threadId"] != thread:
        fail(scenario, f"session identities {v}")
    return v


def outcome(events):
    e = events[-1]
    if e["type"] == "RUN_ERROR":
        return "error:" + e["code"]
    return e["outcome"]["type"]


def expect(scenario, cond, what):
    if not cond:
        fail(scenario, what)


def check_usage(scenario, events):
    usage = events[-1].get("usage")
    expect(scenario, usage, "no usage on the terminal event")
    for u in usage:
        for k in ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens"):
            expect(scenario, isinstance(u.get(k), int), f"usage {k} missing in {u}")


def permission_interrupt(scenario, events):
    expect(scenario, outcome(events) == "interrupt", f"expected an interrupt, got {outcome(events)}")
    intr = events[-1]["outcome"]["interrupts"][0]
    expect(scenario, intr["reason"] == "tool_call", f"reason {intr['reason']}")
    expect(scenario, intr["responseSchema"] == PERMISSION_SCHEMA, f"schema {intr['responseSchema']}")
    expect(scenario, [o["id"] for o in intr["metadata"]["standardOptions"]] == ["allow_once", "deny"], "options")
    expect(scenario, intr.get("toolCallId"), "no toolCallId")
    return intr["id"]


def scenario_plain(a, w):
    s = "plain answer"
    st, ev = a.post(s, w.body("plain", "hello there"))
    expect(s, st == 200 and outcome(ev) == "success", f"got {st} {ev if st != 200 else outcome(ev)}")
    session(s, ev, "plain")
    text = "".join(e["delta"] for e in ev if e["type"] == "TEXT_MESSAGE_CONTENT")
    expect(s, text == "Hello from the fake model.", f"text {text!r}")
    check_usage(s, ev)
    # A next turn: new execution, same context.
    st, ev2 = a.post(s, w.body("plain", "hello again"))
    expect(s, session(s, ev2, "plain")["executionId"] != session(s, ev, "plain")["executionId"], "no rotation")


def scenario_thinking(a, w):
    s = "thinking"
    st, ev = a.post(s, w.body("think", "please think"))
    expect(s, outcome(ev) == "success", outcome(ev))
    expect(s, any(e["type"] == "REASONING_MESSAGE_CONTENT" for e in ev), "no reasoning events")


def scenario_permission(a, w):
    for decision, status in (("allow_once", "resolved"), ("deny", "resolved"), ("deny", "cancelled")):
        s = f"permission {status} {decision}"
        thread = f"perm-{decision}-{status}"
        st, ev = a.post(s, w.body(thread, "please run bash"))
        pid = permission_interrupt(s, ev)
        entry = {"interruptId": pid, "status": status}
        if status == "resolved":
            entry["payload"] = {"decision": decision}
        st, ev2 = a.post(s, w.body(thread, "", resume=[entry]))
        expect(s, st == 200 and outcome(ev2) == "success", f"resume: {st} {ev2 if st != 200 else outcome(ev2)}")
        sess = session(s, ev2, thread)
        expect(s, sess["executionId"] == session(s, ev, thread)["executionId"], "the resume changed execution")
        result = [e for e in ev2 if e["type"] == "TOOL_CALL_RESULT"]
        expect(s, result, "no tool result after the resume")
        if decision == "deny":
            expect(s, "denied" in result[0]["content"], f"deny result {result[0]['content']!r}")
        else:
            expect(s, os.path.exists(os.path.join(w.ws, "created.txt")), "the tool did not run")
        if s == "permission resolved allow_once":
            s2 = "repeated resume"
            st, ev3 = a.post(s2, w.body(thread, "", resume=[entry]))
            expect(s2, outcome(ev3) == "error:RESUME_ALREADY_APPLIED", outcome(ev3))


def scenario_admission(a, w):
    s = "duplicate and conflicting runIds"
    b = w.body("dup", "hello", run="fixed-run")
    st, ev = a.post(s, b)
    expect(s, st == 200, st)
    st, err = a.post(s, b)
    expect(s, st == 409 and err["error"]["code"] == "DUPLICATE_RUN_ID", f"{st} {err}")
    st, err = a.post(s, w.body("dup", "something else", run="fixed-run"))
    expect(s, st == 409 and err["error"]["code"] == "RUN_ID_CONFLICT", f"{st} {err}")
    s = "binding conflict"
    other = os.path.join(w.dir, "other-ws")
    st, err = a.post(s, w.body("dup", "hello", cwd=other))
    expect(s, st == 409 and err["error"]["code"] == "THREAD_BINDING_CONFLICT", f"{st} {err}")


def start_slow(a, w, thread):
    """Start a slow run and read until its session event; return (conn, response, events, session)."""
    c, r = a.request("/", w.body(thread, "slow please"))
    buf, events = b"", []
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            fail("slow run", "stream ended before the session event")
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            if block.startswith(b"id: "):
                events.append(json.loads(block.split(b"\n", 1)[1][6:]))
        sess = [e for e in events if e.get("name") == "iac-code.session.v1"]
        if sess and any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events):
            return c, r, events, sess[0]["value"], buf


def scenario_busy_and_cancel(a, w):
    s = "THREAD_BUSY and cancel of a slow run"
    c, r, events, sess, rest = start_slow(a, w, "slow1")
    st, err = a.post(s, w.body("slow1", "hello"))
    expect(s, st == 409 and err["error"]["code"] == "THREAD_BUSY", f"{st} {err}")
    st, body = a.cancel(sess["executionId"], "slow1", "ros-interop")
    expect(s, st == 200 and body["status"] == "cancelled", f"cancel {st} {body}")
    raw = rest + r.read()
    c.close()
    events += parse_sse(raw, s, len(events))
    check_stream(s, events)
    want = "cancelled" if a.args.protocol == "1.0" else "error:CANCELLED"
    expect(s, outcome(events) == want, outcome(events))
    st, body = a.cancel(sess["executionId"], "slow1", "ros-interop")
    expect(s, body.get("status") == "already_terminal", f"second cancel {body}")
    st, ev = a.post(s, w.body("slow1", "hello"))
    expect(s, outcome(ev) == "success", "the thread is not usable after the cancel")


def scenario_cancel_paused(a, w):
    s = "cancel of a paused run"
    st, ev = a.post(s, w.body("paused", "please run bash"))
    permission_interrupt(s, ev)
    st, body = a.cancel(session(s, ev, "paused")["executionId"], "paused", "ros-interop")
    expect(s, st == 200 and body["status"] == "cancelled", f"{st} {body}")
    st, ev = a.post(s, w.body("paused", "hello"))
    expect(s, outcome(ev) == "success", outcome(ev))


def scenario_disconnect(a, w):
    s = "client disconnect"
    c, r, events, sess, _ = start_slow(a, w, "gone")
    c.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        st, ev = a.post(s, w.body("gone", "hello"))
        if st == 200:
            expect(s, outcome(ev) == "success", outcome(ev))
            return
        time.sleep(0.2)
    fail(s, "the thread stayed busy after the client left")


def scenario_ts_client(a, w):
    """The official AG-UI TypeScript client pipeline accepts iac-agui's streams (ids included)
    for a plain answer, thinking, a permission interrupt and its resume."""
    script = os.environ.get("IAC_AGUI_TS_CLIENT")
    if not script:
        fail("ts client", "IAC_AGUI_TS_CLIENT is not set (tests/interop/run.sh installs the client)")
    url = f"http://127.0.0.1:{a.port}/"

    def run(s, body):
        p = subprocess.run(["node", script, url, json.dumps(body)], capture_output=True, text=True, timeout=120)
        expect(s, p.returncode == 0, (p.stderr or p.stdout).strip()[-400:])
        return p.stdout

    run("ts client: plain", w.body("ts-plain", "hello"))
    run("ts client: thinking", w.body("ts-think", "think about it"))
    out = run("ts client: permission", w.body("ts-perm", "please run bash"))
    expect("ts client: permission", "RUN_FINISHED" in out, out)
    st, ev = a.post("ts client", w.body("ts-perm2", "please run bash"))
    pid = permission_interrupt("ts client", ev)
    run("ts client: resume", w.body("ts-perm2", "", resume=[{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]))


STOP_THEN_SEND_ROUNDS = int(os.environ.get("IAC_AGUI_INTEROP_STOP_ROUNDS", "20"))


def scenario_stop_then_send(a, w):
    """A slow answer stopped after its first events, by a dropped connection and by the cancel
    route, then the next turn sent at once: it must succeed (the kernel is still stopping the
    old task meanwhile). Repeated so that a race shows up."""
    for i in range(STOP_THEN_SEND_ROUNDS):
        for how in ("disconnect", "cancel"):
            s = f"stop then send ({how}, round {i + 1})"
            thread = f"stop-{how}-{i}"
            c, r, events, sess, rest = start_slow(a, w, thread)
            if how == "disconnect":
                c.close()
            else:
                st, body = a.cancel(sess["executionId"], thread, "ros-interop")
                expect(s, (st, body.get("status")) in ((200, "cancelled"), (202, "cancelling")),
                       f"cancel {st} {body}")
                raw = rest + r.read()
                c.close()
                events += parse_sse(raw, s, len(events))
                check_stream(s, events)
                want = "cancelled" if a.args.protocol == "1.0" else "error:CANCELLED"
                expect(s, outcome(events) == want, f"the stopped run ended {outcome(events)}")
            st, ev = a.post(s, w.body(thread, "hello"))
            expect(s, st == 200, f"the next turn was refused: {st} {ev}")
            expect(s, outcome(ev) == "success", f"the next turn ended {outcome(ev)}")


def scenario_llm_error(a, w):
    s = "LLM error"
    st, ev = a.post(s, w.body("llmerr", "trigger llm-error now"))
    expect(s, outcome(ev).startswith("error:") or outcome(ev) == "success", outcome(ev))
    if outcome(ev) == "success":
        # The kernel reports retryable provider errors as a finished turn with an explanation.
        expect(s, any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in ev), "a silent success")


def metrics(a, s):
    """Every sample of /metrics, parsed by prometheus_client's text-format parser."""
    from prometheus_client.parser import text_string_to_metric_families
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
    c.request("GET", "/metrics")
    r = c.getresponse()
    text = r.read().decode("utf-8")
    c.close()
    expect(s, r.status == 200, f"/metrics answered {r.status}")
    expect(s, r.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8", r.getheader("Content-Type"))
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return out


def scenario_metrics(a, w):
    s = "metrics parsed by prometheus_client"
    before = metrics(a, s)
    st, ev = a.post(s, w.body("metrics", "hello"))
    expect(s, st == 200 and outcome(ev) == "success", f"{st}")
    after = metrics(a, s)
    version = [k for k in after if k[0] == "iac_agui_build_info"]
    expect(s, version and dict(version[0][1]).get("version"), "no build_info version")
    grew = lambda name, labels=(): after.get((name, labels), 0) - before.get((name, labels), 0)
    expect(s, grew("iac_agui_runs_total", (("outcome", "success"),)) >= 1, "runs_total did not move")
    expect(s, grew("iac_agui_events_sent_total") >= len(ev), "events_sent_total did not move")
    expect(s, grew("iac_agui_run_duration_seconds_count") >= 1, "no run duration observed")
    expect(s, grew("iac_agui_time_to_first_event_seconds_count") >= 1, "no first-event time observed")
    expect(s, after.get(("iac_agui_kernel_up", ())) == 1, "kernel_up is not 1")
    labels = {l for k in after for l in k[1]}
    expect(s, not any(v == "metrics" for _, v in labels), "a client-chosen id became a label")


def scenario_replay_finished(a, w):
    s = "re-attach to a finished run replays it"
    body = w.body("replay", "hello")
    st, ev = a.post(s, body)
    expect(s, st == 200 and outcome(ev) == "success", f"{st} {ev if st != 200 else outcome(ev)}")
    sess = session(s, ev, "replay")
    ids = {"threadId": "replay", "runId": body["runId"], "rosInvocationId": sess["rosInvocationId"]}
    st, again = a.subscribe(s, sess["executionId"], dict(ids, afterSequence=-1))
    expect(s, st == 200 and again == ev, "the replay differs from the stream")
    st, tail = a.subscribe(s, sess["executionId"], dict(ids, afterSequence=len(ev) - 2), first_id=len(ev) - 1)
    expect(s, st == 200 and [e["type"] for e in tail] == [ev[-1]["type"]], f"tail {tail}")
    st, err = a.subscribe(s, sess["executionId"], dict(ids, rosInvocationId="other"))
    expect(s, st == 409 and err["error"]["code"] == "EXECUTION_IDENTITY_MISMATCH", f"{st} {err}")


def start_kernel(args, w, port, token):
    """The real kernel on `port` with `token` (external mode), once its /health answers."""
    env = dict(os.environ)
    env.update(w.env)
    env["IACCODE_A2A_HTTP_TOKEN"] = token
    env["IACCODE_A2A_ALLOWED_CWDS"] = w.dir
    klog = open(os.path.join(w.dir, f"kernel-{time.time():.0f}.log"), "w")
    kernel = subprocess.Popen([args.iac_code, "a2a", "--host", "127.0.0.1", "--port", str(port),
                               "--thinking-exposure", "all"], env=env, stdout=klog, stderr=klog)
    if not wait_http(port, "/health", token, timeout=90):
        raise Failure("INTEROP FAILED [startup]: the iac-code kernel did not become ready")
    return kernel


def scenario_kernel_restart(a, w, args, kernel, port, token):
    """The real kernel SIGKILLed and restarted between an interrupt and its resume (it keeps
    session backups on disk): the resume either continues (restored) or ends once with
    EXECUTION_LOST, never A2A_UNAVAILABLE; the thread's next turn works either way."""
    s = "kernel SIGKILL + restart between interrupt and resume"
    thread = "kernel-restart"
    st, ev = a.post(s, w.body(thread, "please run bash"))
    pid = permission_interrupt(s, ev)
    kernel.kill()
    kernel.wait(10)
    kernel = start_kernel(args, w, port, token)
    expect(s, wait_http(a.port, "/health", timeout=30), "/health did not come back")
    entry = {"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}
    st, ev2 = a.post(s, w.body(thread, "", resume=[entry]))
    expect(s, st == 200, f"resume: {st} {ev2}")
    out = outcome(ev2)
    expect(s, out in ("success", "error:EXECUTION_LOST"), f"resume after the kernel restart: {out}")
    if out == "success":
        expect(s, any(e["type"] == "TOOL_CALL_RESULT" for e in ev2), "restored, but no tool result")
    st, ev3 = a.post(s, w.body(thread, "hello"))
    expect(s, st == 200 and outcome(ev3) == "success", f"next turn: {st} {outcome(ev3) if st == 200 else ev3}")
    print(f"     kernel restart: resume {out}, next turn success"
          f"{' (new session)' if any(e.get('name') == 'iac-code.session.reset.v1' for e in ev3) else ''}",
          flush=True)
    return kernel


def kernel_task_state(kernel_url, token, task_id):
    """`GetTask` straight to the kernel: the task's state."""
    host, port = kernel_url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("POST", "/", body=json.dumps({"jsonrpc": "2.0", "id": "probe", "method": "GetTask",
                                              "params": {"id": task_id}}),
              headers={"Content-Type": "application/json", "A2A-Version": "1.0",
                       "Authorization": f"Bearer {token}"})
    body = json.loads(c.getresponse().read())
    c.close()
    return ((body.get("result") or {}).get("status") or {}).get("state")


def scenario_sigterm_mid_resume(a, w, args, kernel_url, token):
    """SIGTERM twice (stop at once) a few ms after a resume's RUN_STARTED, then a restart and
    the same answer again: the retry never fails (the kernel may already have the answer) and
    never runs the tool twice."""
    a_execution = {}
    for i, delay in enumerate((0.0, 0.02, 0.04, 0.08)):
        s = f"SIGTERM {int(delay * 1000)} ms into a resume, restart, retry"
        thread = f"mid-resume-{i}"
        created = os.path.join(w.ws, "created.txt")
        if os.path.exists(created):
            os.remove(created)
        st, ev = a.post(s, w.body(thread, "please run bash"))
        pid = permission_interrupt(s, ev)
        a_execution[thread] = session(s, ev, thread)["executionId"]
        task_id = session(s, ev, thread)["taskId"]
        entry = {"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
        c.request("POST", "/", body=json.dumps(w.body(thread, "", resume=[entry])),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read1(64)  # RUN_STARTED is the first event
        time.sleep(delay)
        a.proc.send_signal(15)
        a.proc.send_signal(15)
        try:
            code = a.proc.wait(20)
        except subprocess.TimeoutExpired:
            a.proc.kill()
            fail(s, "iac-agui ignored two SIGTERMs")
        expect(s, code == 0, f"exit {code}")
        c.close()
        a = Adapter(args, w, kernel_url, token)
        # The retry runs on its own thread: when the first try's answer reached the kernel and
        # the kernel's turn died with that try's stream (seen with iac-code 0.16.0: the task
        # stays WORKING with `permissionAck` and never moves), following it never ends.
        result = {}

        def go(adapter=a, body=w.body(thread, "", resume=[entry])):
            try:
                result["r"] = adapter.post(s, body)
            except Failure as f:
                result["err"] = f

        retry = threading.Thread(target=go, daemon=True)
        retry.start()
        retry.join(20)
        stuck = retry.is_alive()
        if stuck:
            st, ev = a.post(s, w.body(thread + "-probe", "hello"))  # the adapter still serves
            expect(s, st == 200 and outcome(ev) == "success", "the adapter stopped serving")
            st, body = a.cancel(a_execution[thread], thread, "ros-interop")
            expect(s, st in (200, 202), f"cancel of the stuck execution: {st} {body}")
            retry.join(30)
            expect(s, not retry.is_alive(), "the cancelled retry did not end")
        if "err" in result:
            raise result["err"]
        st, ev2 = result["r"]
        # Applied before the stop (its acceptance was recorded): the reference's answer to a
        # repeated resume, RESUME_ALREADY_APPLIED. In doubt or not delivered: the retry goes on.
        allowed = ("success", "error:RESUME_ALREADY_APPLIED") + (("error:CANCELLED", "cancelled") if stuck else ())
        kernel_failed = False
        if st == 200 and outcome(ev2).startswith("error:") and outcome(ev2) not in allowed:
            # A failed retry is allowed only when the kernel's turn died with the first try's
            # cut stream: its task FAILED, or WORKING for good (the retry followed it to the
            # end of the kernel's subscription and stopped it); never while the task completed
            # or still waits for the answer.
            state = kernel_task_state(kernel_url, token, task_id)
            kernel_failed = state in ("TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_WORKING",
                                      "TASK_STATE_CANCELED")
            expect(s, kernel_failed, f"{outcome(ev2)} while the kernel's task is {state}")
        expect(s, st == 200 and (outcome(ev2) in allowed or kernel_failed),
               f"the retry failed: {st} {outcome(ev2) if st == 200 else ev2}")
        st, ev3 = a.post(s, w.body(thread, "hello"))
        expect(s, st == 200 and outcome(ev3) == "success", f"next turn {outcome(ev3) if st == 200 else ev3}")
        # (A kernel turn that died with the first try's stream may not have run the tool.)
        expect(s, stuck or kernel_failed or os.path.exists(created), "the tool never ran")
        note = (" (the kernel left the delivered answer WORKING; cancelled)" if stuck else
                " (the kernel's turn died when the first try's stream was cut)" if kernel_failed else "")
        print(f"     {int(delay * 1000)} ms: retry {outcome(ev2)}{note}", flush=True)
    return a


def scenario_ts_agent_v1(a, w):
    """`HttpAgent` from @ag-ui/client 1.0.0 drives plain, permission → resume, question →
    answer, fail and cancel flows with no console.warn/error, every event strict 1.0, and
    the post-approval text as its own assistant message."""
    s = "ts HttpAgent 1.0"
    script = os.environ.get("IAC_AGUI_TS_AGENT_V1")
    if not script:
        fail(s, "IAC_AGUI_TS_AGENT_V1 is not set (tests/interop/run.sh installs the client)")
    p = subprocess.run(["node", script, f"http://127.0.0.1:{a.port}/", w.ws], capture_output=True, text=True,
                       timeout=300)
    out = (p.stdout + p.stderr).strip()
    expect(s, p.returncode == 0 and "ts-agent-v1 ok" in out, out[-1500:])


def run_node(s, script, url, ok):
    """A Node script of the suite against `url`: it must exit 0 and print `ok`."""
    p = subprocess.run(["node", script, url], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(script))
    out = (p.stdout + p.stderr).strip()
    expect(s, p.returncode == 0 and ok in out, out[-1500:])


def stop_demo(demo):
    """SIGTERM, then SIGKILL past 10 s; its log must hold no dialect warning."""
    demo.terminate()
    try:
        demo.wait(10)
    except subprocess.TimeoutExpired:
        demo.kill()
        demo.wait(5)
    time.sleep(0.2)  # the log's drain thread writes the last lines
    demo.log.flush()
    no_dialect_warning("demo", demo.log.name)


def start_demo(s, args, w, name):
    """`iac-agui --demo` with no dialect flag (the 1.0 clients declare theirs): the process and
    its URL (with a trailing slash)."""
    log = open(os.path.join(w.dir, f"demo-{name}.log"), "w")
    demo = subprocess.Popen([args.bin, "--demo", "--port", "0"],
                            stderr=subprocess.PIPE, stdout=log, text=True)
    demo.log = log
    url, deadline = None, time.time() + 30
    while not url and time.time() < deadline:
        line = demo.stderr.readline()
        if not line:
            break
        log.write(line)
        url = ready_url(line)
    if not url:
        demo.kill()
        fail(s, "the demo did not start")
    threading.Thread(target=lambda: [log.write(x) for x in demo.stderr], daemon=True).start()
    return demo, url.strip() + "/"


def scenario_ts_stop_v1(args, w):
    """docs/clients.md's Stop for `HttpAgent` 1.0, on `--demo` (a 30 s disconnect grace) as the
    guide says: `abortRun()` alone leaves the thread busy (409), the guide's `stoppable` block
    (taken verbatim) frees it at once."""
    s = "ts HttpAgent 1.0 stop"
    script = os.environ.get("IAC_AGUI_TS_STOP_V1")
    if not script:
        fail(s, "IAC_AGUI_TS_STOP_V1 is not set (tests/interop/run.sh installs the client)")
    demo, url = start_demo(s, args, w, "stop")
    try:
        run_node(s, script, url, "ts-stop-v1 ok")
    finally:
        # A second signal stops at once: the run abortRun alone left going would hold a drain
        # for its grace.
        demo.terminate()
        time.sleep(0.2)
        stop_demo(demo)


def py_sdk_listed(s, port, thread, interrupt):
    """The thread's page names its pending interrupt whole: without the `kind` and `summary`
    beside it, the SDK 1.0's `Interrupt` model reads it (every warning an error) as the one
    RUN_FINISHED carried."""
    import warnings
    from ag_ui.core import Interrupt
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", f"/threads/{thread}")
    page = json.loads(c.getresponse().read())
    c.close()
    found = page.get("interrupts") or []
    expect(s, len(found) == 1, f"{thread}: the page's interrupts {found}")
    rest = {k: v for k, v in found[0].items() if k not in ("kind", "summary")}
    expect(s, found[0].get("kind") == interrupt["metadata"].get("kind") and found[0].get("summary"),
           f"{thread}: kind and summary {found[0]}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            read = Interrupt.model_validate(rest).model_dump(mode="json", by_alias=True, exclude_none=True)
        except Exception as ex:  # noqa: BLE001
            fail(s, f"{thread}: the SDK refused or warned on the listed interrupt: {ex}")
    expect(s, read == interrupt, f"{thread}: listed {read} is not {interrupt}")


def py_sdk_turn(s, port, body, path):
    """One run posted as the Python SDK 1.0 serializes it, its SSE kept at `path` (for
    ag-ui-validate); each event parsed by the SDK's own models with every warning an error."""
    import warnings
    from ag_ui.core import PROTOCOL_VERSION, RunAgentInput
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            # The SDK leaves the declaration to its caller (a 1.0 consumer MUST send it).
            body = dict(body, protocolVersion=PROTOCOL_VERSION)
            raw_body = RunAgentInput.model_validate(body).model_dump_json(by_alias=True, exclude_none=True)
        except Exception as ex:  # noqa: BLE001
            fail(s, f"the SDK refused or warned on its own RunAgentInput: {ex}")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/", body=raw_body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        c.close()
        expect(s, r.status == 200, f"{r.status} {raw[:300]!r}")
        with open(path, "wb") as f:
            f.write(raw)
        events = parse_sse(raw, s)
        try:
            check_stream(s, events)
        except Warning as ex:
            fail(s, f"the SDK warned while parsing the stream: {ex}")
    return events


def scenario_input_kinds_v1(args, w):
    """Issue 47 with the official 1.0 clients, on `--demo`: a cloud resource selection, a
    candidate choice and a deployment confirmation each end a run in an interrupt with a reason of its own, parsed (strict)
    by `HttpAgent` and by the Python SDK's models (a warning from either fails), then resumed,
    `selected`, to success; each Python stream is also clean for ag-ui-validate. Each pending
    interrupt is also read back from the thread listing and page by both clients (issue 47:
    "parse every new interrupt and listing")."""
    s = "input kinds with the 1.0 clients"
    script = os.environ.get("IAC_AGUI_TS_KINDS_V1")
    tool = os.environ.get("IAC_AGUI_VALIDATOR")
    if not script or not tool:
        fail(s, "IAC_AGUI_TS_KINDS_V1 or IAC_AGUI_VALIDATOR is not set (tests/interop/run.sh installs them)")
    demo, url = start_demo(s, args, w, "kinds")
    try:
        run_node(s, script, url, "ts-kinds-v1 ok")
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/capabilities")
        selector = json.loads(c.getresponse().read())["custom"]["iacCode"]["resourceSelector"]
        c.close()
        props = {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros-kinds", "resourceSelector": selector}}
        flows = [("py-select", "select a vswitch", "cloud_resource_selection",
                  lambda i: {"status": "selected", "value": "vsw-py1", "label": "Py"}),
                 ("py-candidates", "compare candidates", "candidate_selection",
                  lambda i: {"selectedId": i["metadata"]["standardOptions"][0]["id"]}),
                 ("py-pipeline-select", "pipeline: select a vswitch", "cloud_resource_selection",
                  lambda i: {"status": "selected", "value": "vsw-py2"}),
                 ("py-confirm", "pipeline: confirm the deployment", "deployment_confirmation",
                  lambda i: {"action": i["metadata"]["standardOptions"][0]["id"]})]
        for thread, text, reason, payload in flows:
            first = {"threadId": thread, "runId": thread + "-r1", "forwardedProps": props,
                     "messages": [{"id": thread + "-m1", "role": "user", "content": text}]}
            ev = py_sdk_turn(s, port, first, os.path.join(w.dir, f"{thread}-1.sse"))
            expect(s, outcome(ev) == "interrupt", f"{thread}: {outcome(ev)}")
            intr = ev[-1]["outcome"]["interrupts"]
            expect(s, len(intr) == 1 and intr[0]["reason"] == reason, f"{thread}: {intr}")
            py_sdk_listed(s, port, thread, intr[0])
            resume = {"threadId": thread, "runId": thread + "-r2", "forwardedProps": props, "messages": [],
                      "resume": [{"interruptId": intr[0]["id"], "status": "resolved", "payload": payload(intr[0])}]}
            ev = py_sdk_turn(s, port, resume, os.path.join(w.dir, f"{thread}-2.sse"))
            expect(s, outcome(ev) == "success", f"{thread} resumed: {outcome(ev)} {ev[-1]}")
            for n in (1, 2):
                f = os.path.join(w.dir, f"{thread}-{n}.sse")
                r = subprocess.run([tool, f, "--no-color"], capture_output=True, text=True, timeout=60)
                o = r.stdout + r.stderr
                expect(s, r.returncode == 0 and "no conformance violations" in o, f"{f}: exit {r.returncode}: {o[-800:]}")
    finally:
        stop_demo(demo)


def scenario_copilotkit(args, w, kernel_url, token):
    """CopilotKit 1.75's runtime with docs/clients.md's `IacCodeAgent` registered, driven by
    CopilotKit's own client core: plain, permission → resume, Stop then the next turn. Its own
    adapter keeps runs through a disconnect (`--disconnect-grace`, as `--demo` does), so Stop
    frees the thread only through the cancel route the agent calls."""
    s = "CopilotKit runtime"
    script = os.environ.get("IAC_AGUI_COPILOTKIT")
    if not script:
        fail(s, "IAC_AGUI_COPILOTKIT is not set (tests/interop/run.sh installs CopilotKit)")
    a = Adapter(args, w, kernel_url, token, extra=["--disconnect-grace", "120"],
                state="state-copilotkit")
    try:
        # The agent sets iacCode itself: a workspace other than the server's --default-cwd shows it.
        ws = os.path.join(w.dir, "copilotkit-ws")
        os.makedirs(ws, exist_ok=True)
        p = subprocess.run(["node", script, f"http://127.0.0.1:{a.port}/", ws], capture_output=True, text=True,
                           timeout=300, cwd=os.path.dirname(script))
        out = (p.stdout + p.stderr).strip()
        expect(s, p.returncode == 0 and "copilotkit ok" in out, out[-1500:])
        expect(s, os.path.exists(os.path.join(ws, "created.txt")), "the approved command did not run in the agent's cwd")
    finally:
        a.stop()


def scenario_python_sdk_v1(a, w):
    """The Python SDK 1.0's own serialized RunAgentInput (`model_dump_json(by_alias=True,
    exclude_none=True)`: no empty state, tools or context) runs, with iacCode properties and
    without them (the server's --default-cwd)."""
    s = "Python SDK 1.0 RunAgentInput"
    lib = os.environ.get("IAC_AGUI_PY_SDK_V1")
    if not lib:
        fail(s, "IAC_AGUI_PY_SDK_V1 is not set (tests/interop/run.sh installs ag-ui-protocol 1.0)")
    # A 1.0 client declares its version (the SDK leaves it to its caller); as a 0.1 client, not.
    code = (
        "import json, sys\n"
        "from ag_ui.core import PROTOCOL_VERSION, RunAgentInput, UserMessage\n"
        "thread, run, text, props = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])\n"
        "kw = {'forwarded_props': props} if props is not None else {}\n"
        "if sys.argv[5] == '1': kw['protocol_version'] = PROTOCOL_VERSION\n"
        "print(RunAgentInput(thread_id=thread, run_id=run, messages=[UserMessage(id=run + '-m', role='user',"
        " content=text)], **kw).model_dump_json(by_alias=True, exclude_none=True))\n"
    )
    iac = {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros-interop", "cwd": w.ws}}
    for thread, props in (("py-sdk-iac", iac), ("py-sdk-bare", None)):
        p = subprocess.run([sys.executable, "-c", code, thread, thread + "-r1", "hello", json.dumps(props),
                            "1" if STRICT_V1 else "0"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=lib), timeout=60)
        expect(s, p.returncode == 0, p.stderr[-500:])
        body = json.loads(p.stdout)
        expect(s, "state" not in body and "tools" not in body, f"the SDK body changed: {body}")
        st, ev = a.post(s, body)
        expect(s, st == 200 and outcome(ev) == "success", f"{thread}: {st} {ev if st != 200 else outcome(ev)}")


def scenario_validator(a, w):
    """The community validator (ag-ui-validate 0.4) in live mode with its own RunAgentInput
    (no iacCode: the server's --default-cwd) finds no conformance violation."""
    s = "ag-ui-validate live mode"
    tool = os.environ.get("IAC_AGUI_VALIDATOR")
    if not tool:
        fail(s, "IAC_AGUI_VALIDATOR is not set (tests/interop/run.sh installs the validator)")
    r = subprocess.run([tool, f"http://127.0.0.1:{a.port}/", "--timeout", "90", "--no-color"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    expect(s, r.returncode == 0 and "no conformance violations" in out, f"exit {r.returncode}: {out[-800:]}")
    if not STRICT_V1:
        return
    # Live mode's own input declares no version (the 0.1 dialect): 1.0 streams, from requests
    # that declare it, are recorded and validated as files.
    s = "ag-ui-validate on 1.0 streams"
    for thread, text in (("validate-v1", "hello there"), ("validate-v1-perm", "please run bash")):
        c, r = a.request("/", w.body(thread, text))
        raw = r.read()
        c.close()
        expect(s, r.status == 200, f"{thread}: {r.status} {raw[:300]!r}")
        check_stream(s, parse_sse(raw, s))
        path = os.path.join(w.dir, f"{thread}.sse")
        with open(path, "wb") as f:
            f.write(raw)
        r = subprocess.run([tool, path, "--no-color"], capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        expect(s, r.returncode == 0 and "no conformance violations" in out, f"{path}: exit {r.returncode}: {out[-800:]}")


def scenario_profile_hash(a, w):
    """The resource-selector profile hash iac-agui publishes (`KERNEL_PROFILE_HASH`, written by
    hand) is the installed kernel's `PROFILE_HASH`, and the payload `tests/it/kernel_pin.rs`
    hashes is the kernel's own `_hash_payload()`: a kernel bump without both fails here."""
    s = "profile hash of the pinned kernel"
    from iac_code.resource_selector import profiles
    st, caps = a.get_json("/capabilities")
    published = caps.get("custom", {}).get("iacCode", {}).get("resourceSelector", {}).get("profileHash")
    expect(s, st == 200 and published == profiles.PROFILE_HASH,
           f"iac-agui publishes {published}, the kernel's PROFILE_HASH is {profiles.PROFILE_HASH}")
    with open(os.path.join(HERE, "..", "fixtures", "kernel", "resource_profiles.json"), encoding="utf-8") as f:
        captured = json.load(f)
    expect(s, captured["payload"] == json.loads(json.dumps(profiles._hash_payload())),
           "tests/fixtures/kernel/resource_profiles.json is not the installed kernel's _hash_payload(): recapture it")


def scenario_capabilities(a, w):
    """`GET /capabilities` is an AG-UI 1.0 `AgentCapabilities` with no key the model does not
    know (the generated models allow extras, so they are looked for explicitly)."""
    s = "capabilities parse as AG-UI 1.0 AgentCapabilities"
    from ag_ui.core import AgentCapabilities
    from pydantic import BaseModel
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
    c.request("GET", "/capabilities")
    r = c.getresponse()
    body = json.loads(r.read())
    expect(s, r.status == 200, f"status {r.status}")
    caps = AgentCapabilities.model_validate(body)

    def extras(m, path):
        out = [f"{path}.{k}" for k in (m.model_extra or {})]
        for name in type(m).model_fields:
            v = getattr(m, name)
            if isinstance(v, BaseModel):
                out += extras(v, f"{path}.{name}")
        return out
    unknown = extras(caps, "capabilities")
    expect(s, not unknown, f"keys the 1.0 model does not know: {unknown}")
    expect(s, caps.transport.streaming and caps.human_in_the_loop.interrupts, str(caps))
    # Each declaration holds against the real kernel: tool calls are streamed, reasoning too,
    # and context reaches the model (scenario_context).
    expect(s, caps.tools.supported and not caps.tools.client_provided, str(caps.tools))
    st, ev = a.post(s, w.body("caps-tools", "please run bash"))
    expect(s, st == 200 and any(e["type"] == "TOOL_CALL_START" for e in ev), f"no tool call streamed: {st}")
    expect(s, caps.reasoning.supported and caps.reasoning.streaming, str(caps.reasoning))
    st, ev = a.post(s, w.body("caps-think", "think about it"))
    expect(s, st == 200 and any(e["type"].startswith("REASONING") for e in ev), f"no reasoning streamed: {st}")
    # A default server: requests that declare nothing get 0.1, a 1.0 client gets 1.0 (issue 57).
    iac = body["custom"]["iacCode"]
    expect(s, iac["protocolMode"] == "0.1" and iac["dialects"]["1.0"]["contextForwarded"] is True
           and iac["dialects"]["0.1"]["contextForwarded"] is False, str(iac))


def scenario_history(a, w):
    """The thread's stored conversation (issue 39) with the real kernel: a plain turn, a
    permission and its resume; `GET /threads/{id}/messages` holds them in the client's shape
    (in 1.0 mode each parses as the Python SDK 1.0's own `Message`, no unknown key), the listing
    names the thread, and in 1.0 mode a run that restates less gets `MESSAGES_SNAPSHOT` (the
    stream check parses it with the SDK)."""
    s = "stored conversation"
    # The fake model keys on the first user message: bash first, a plain turn after it.
    st, ev = a.post(s, w.body("hist", "please run bash"))
    pid = permission_interrupt(s, ev)
    st, ev = a.post(s, w.body("hist", "", resume=[{"interruptId": pid, "status": "resolved",
                                                   "payload": {"decision": "allow_once"}}]))
    expect(s, st == 200 and outcome(ev) == "success", f"{st}")
    st, ev = a.post(s, w.body("hist", "thanks"))
    expect(s, st == 200 and outcome(ev) == "success", f"{st}")
    if STRICT_V1:
        snap = [e for e in ev if e["type"] == "MESSAGES_SNAPSHOT"]
        expect(s, len(snap) == 1 and ev[1] is snap[0], "no MESSAGES_SNAPSHOT right after RUN_STARTED")
        expect(s, snap[0]["messages"][0]["content"] == "please run bash", snap[0])
    st, body = a.get_json("/threads/hist/messages")
    expect(s, st == 200, f"{st} {body}")
    msgs = body["messages"]
    roles = [m["role"] for m in msgs]
    users = [m["content"] for m in msgs if m["role"] == "user"]
    expect(s, users == ["please run bash", "thanks"], roles)
    calls = [m for m in msgs if m.get("toolCalls")]
    tools = [m for m in msgs if m["role"] == "tool"]
    expect(s, calls and tools and tools[0]["toolCallId"] == calls[0]["toolCalls"][0]["id"], roles)
    expect(s, msgs.index(tools[0]) == msgs.index(calls[0]) + 1, "the tool result is not right after its call")
    expect(s, roles[-1] == "assistant" and msgs[-1]["content"], "no answer after the approval")
    if STRICT_V1:
        from ag_ui.core import Message
        from pydantic import TypeAdapter
        adapter = TypeAdapter(Message)
        for m in msgs:
            unknown = extra_keys(adapter.validate_python(m), m["role"])
            expect(s, not unknown, f"keys the SDK does not know: {unknown}")
    st, listed = a.get_json("/threads?limit=200")
    mine = [t for t in listed["threads"] if t["threadId"] == "hist"]
    expect(s, st == 200 and mine and mine[0]["messageCount"] == len(msgs) and mine[0]["status"] == "idle", listed)
    expect(s, mine[0]["title"] == "please run bash", mine)


def scenario_restart(a, w, args, kernel_url, token):
    s = "adapter restart between interrupt and resume"
    body = w.body("restart", "please run bash")
    st, ev = a.post(s, body)
    pid = permission_interrupt(s, ev)
    st, before = a.get_json("/threads/restart/messages")
    expect(s, st == 200 and before["messages"], f"{st} {before}")
    a.stop()
    b = Adapter(args, w, kernel_url, token)
    # Re-attach after the restart: a snapshot with the same pending interrupt.
    s2 = "snapshot after an adapter restart"
    sess = session(s2, ev, "restart")
    st, snap = b.subscribe(s2, sess["executionId"], {"threadId": "restart", "runId": body["runId"],
                                                     "rosInvocationId": sess["rosInvocationId"]})
    expect(s2, st == 200, f"{st} {snap}")
    check_stream(s2, snap)
    expect(s2, [e["type"] for e in snap] == ["RUN_STARTED", "CUSTOM", "CUSTOM", "RUN_FINISHED"], [e["type"] for e in snap])
    expect(s2, snap[2]["name"] == "iac-code.subscription.v1" and snap[2]["value"]["mode"] == "snapshot", snap[2])
    expect(s2, snap[-1]["outcome"]["interrupts"] == ev[-1]["outcome"]["interrupts"], "other interrupts than before")
    st, ev2 = b.post(s, w.body("restart", "", resume=[{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]))
    expect(s, st == 200 and outcome(ev2) == "success", f"{st} {ev2 if st != 200 else outcome(ev2)}")
    # The conversation survived the restart, and the resume's part follows it (in both dialects
    # the answer after the approval is a message of its own, after the tool result).
    st, after = b.get_json("/threads/restart/messages")
    ids = lambda c: [m["id"] for m in c["messages"]]
    n = len(before["messages"])
    expect(s, st == 200 and ids(after)[:n] == ids(before) and after["messages"][0] == before["messages"][0]
           and any(m["role"] == "tool" for m in after["messages"]), f"the conversation after the restart: {after}")
    return b


def scenario_pipeline(a, w):
    s = "pipeline clarifying question"
    st, ev = a.post(s, w.body("pipe", "deploy something for me", runMode="pipeline", pipelineName="selling"))
    expect(s, st == 200, f"{st} {ev}")
    if outcome(ev) != "interrupt":
        fail(s, f"expected the clarifying question, got {outcome(ev)}")
    intr = ev[-1]["outcome"]["interrupts"][0]
    expect(s, intr["reason"] == "input_required", intr["reason"])
    expect(s, any(e["type"] == "STEP_STARTED" for e in ev), "no pipeline step")
    option = intr["metadata"]["standardOptions"][0]["id"]
    st, ev2 = a.post(s, w.body("pipe", "", resume=[{"interruptId": intr["id"], "status": "resolved", "payload": {"selectedId": option}}],
                                runMode="pipeline", pipelineName="selling"))
    expect(s, st == 200, f"{st} {ev2}")
    # The answered question lets the intent step conclude (the fake model's conclusion fits the
    # step's schema), so the pipeline ends: a failure here is a defect, not the model's.
    expect(s, outcome(ev2) == "success", outcome(ev2))
    expect(s, any(e["type"] == "TOOL_CALL_RESULT" for e in ev2), "the answer produced no tool result")
    expect(s, any(e["type"] == "STEP_FINISHED" for e in ev2), "the step did not finish")


def scenario_context(a, w):
    """AG-UI 1.0 `context[]` SHOULD reach the model: the fake model echoes the user turn it
    was given, which must hold each entry after the user's own text."""
    s = "context reaches the model"
    b = w.body("ctx", "echo the turn please")
    b["context"] = [{"description": "Selected stack", "value": "vpc-prod-7d1e"},
                    {"description": "Region", "value": "cn-hangzhou"}]
    st, ev = a.post(s, b)
    expect(s, st == 200 and outcome(ev) == "success", f"got {st} {ev if st != 200 else outcome(ev)}")
    text = "".join(e["delta"] for e in ev if e["type"] == "TEXT_MESSAGE_CONTENT")
    expect(s, text.startswith("echo the turn please"), f"the turn {text!r}")
    # (the fake model reads the turn lower-cased)
    expect(s, "- selected stack: vpc-prod-7d1e" in text and "- region: cn-hangzhou" in text,
           f"the context did not reach the model: {text!r}")


class RecordingProxy:
    """A loopback TCP relay in front of the kernel that keeps every byte the adapter sends it."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.seen = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(up, client, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(client, up, True), daemon=True).start()

    def _pipe(self, src, dst, record):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if record:
                    with self.lock:
                        self.seen += b
                dst.sendall(b)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.sock.close()

    def trace_headers(self):
        """(traceparent, tracestate) of each request head the kernel got."""
        with self.lock:
            text = self.seen.decode("latin-1")
        out = []
        for head in text.split("\r\n\r\n"):
            fields = {}
            for line in head.split("\r\n"):
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
            if "traceparent" in fields:
                out.append((fields["traceparent"], fields.get("tracestate")))
        return out


def scenario_trace_context(args, w, kernel_url, token):
    """The real kernel gets the caller's trace on each call (under the adapter's own span id,
    with the tracestate) and still serves the run."""
    s = "trace context"
    trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    proxy = RecordingProxy(int(kernel_url.rstrip("/").rsplit(":", 1)[1]))
    b = Adapter(args, w, f"http://127.0.0.1:{proxy.port}/", token, state="state-trace")
    try:
        st, ev = b.post(s, w.body("traced", "hello there"),
                        headers={"traceparent": f"00-{trace}-{parent}-01", "tracestate": "rojo=1"})
        expect(s, st == 200 and outcome(ev) == "success", f"got {st} {ev if st != 200 else outcome(ev)}")
        v = session(s, ev, "traced")
        if STRICT_V1:
            expect(s, v["traceId"] == trace, f"session traceId {v['traceId']}")
        calls = proxy.trace_headers()
        expect(s, calls, "no kernel request carried a traceparent")
        for tp, ts in calls:
            parts = tp.split("-")
            expect(s, len(parts) == 4 and parts[0] == "00" and parts[1] == trace and parts[3] == "01", f"traceparent {tp}")
            expect(s, parts[2] != parent and len(parts[2]) == 16, f"the kernel's parent is the caller's: {tp}")
            expect(s, ts == "rojo=1", f"tracestate {ts!r}")
    finally:
        b.stop()
        proxy.close()


def kernel_rpc(kernel_url, token, method, params):
    """One JSON-RPC call to the kernel: its status and body. A streaming method's answer is
    the first SSE `data:` payload (an error comes that way or as a plain JSON body)."""
    host, port = kernel_url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request("POST", "/", body=json.dumps({"jsonrpc": "2.0", "id": "probe", "method": method, "params": params}),
              headers={"Content-Type": "application/json", "A2A-Version": "1.0",
                       "Accept": "text/event-stream, application/json",
                       "Authorization": f"Bearer {token}"})
    r = c.getresponse()
    if "text/event-stream" in (r.getheader("Content-Type") or ""):
        body = b""
        for line in r:
            if line.startswith(b"data:"):
                body = line[5:].strip()
                break
    else:
        body = r.read()
    c.close()
    return r.status, body


def scenario_answer_validation(a, w, kernel_url, token):
    """A blank free-text answer: iac-agui refuses it before the kernel sees it
    (RESUME_PAYLOAD_INVALID, the question still open), because the real kernel refuses it
    with JSON-RPC invalid params (which iac-agui would report as RESUME_REJECTED, never
    A2A_UNAVAILABLE); then a real answer goes through."""
    s = "answer validation"
    props = {"runMode": "pipeline", "pipelineName": "selling"}
    st, ev = a.post(s, w.body("answers", "deploy something for me", **props))
    expect(s, st == 200 and outcome(ev) == "interrupt", f"{st} {outcome(ev) if st == 200 else ev}")
    intr = ev[-1]["outcome"]["interrupts"][0]
    free = [o["properties"]["freeText"] for o in intr["responseSchema"].get("oneOf", [])
            if "freeText" in o.get("properties", {})]
    expect(s, free and free[0].get("pattern") == "\\S", f"the advertised free-text schema {intr['responseSchema']}")
    sess = session(s, ev, "answers")
    blank = [{"interruptId": intr["id"], "status": "resolved", "payload": {"freeText": "   "}}]
    st, ev2 = a.post(s, w.body("answers", "", resume=blank, **props))
    expect(s, st == 200 and ev2[-1]["type"] == "RUN_ERROR" and ev2[-1]["code"] == "RESUME_PAYLOAD_INVALID",
           f"a blank answer: {ev2[-1] if st == 200 else ev2}")
    # What the real kernel does with the same answer, sent as iac-agui sends answers
    # (SendStreamingMessage, as `driver/resume.rs` does).
    msg = {"messageId": "interop-blank-answer", "role": "ROLE_USER", "parts": [{"text": "   "}],
           "contextId": sess["contextId"], "taskId": sess["taskId"],
           "metadata": {"iac_code": {"cwd": w.ws, "run_mode": "pipeline", "pipeline_name": "selling"}}}
    status, raw = kernel_rpc(kernel_url, token, "SendStreamingMessage",
                             {"message": msg, "configuration": {"acceptedOutputModes": ["text/plain"]}})
    err = json.loads(raw).get("error") if status == 200 else None
    expect(s, err is not None and err.get("code") == -32602,
           f"the kernel took a blank answer: {status} {raw[:300]!r}")
    option = intr["metadata"]["standardOptions"][0]["id"]
    good = [{"interruptId": intr["id"], "status": "resolved", "payload": {"selectedId": option}}]
    st, ev3 = a.post(s, w.body("answers", "", resume=good, **props))
    expect(s, st == 200 and outcome(ev3) == "success", f"the real answer: {outcome(ev3) if st == 200 else ev3}")


def scenario_resource_selection(args, w):
    """Issue 47: the real kernel with its resource selector on (and Alibaba Cloud credentials,
    which it needs to offer the tool; nothing reaches the cloud) raises a cloud resource
    selection for a request that advertises the capability `/capabilities` gives; iac-agui
    shows it as its own interrupt and answers with the kernel's structured `inputResponse`:
    a wrong value refused by the kernel itself (RESUME_REJECTED, the task ended), then
    `selected` and `canceled` taken."""
    s = "cloud resource selection"
    extra = {"IAC_CODE_A2A_RESOURCE_SELECTOR_ENABLED": "1", "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIinteropfake",
             "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "interop-fake-secret", "ALIBABA_CLOUD_REGION_ID": "cn-hangzhou"}
    saved = dict(w.env)
    w.env.update(extra)
    port, token = free_port(), "interop-selector-token"
    kernel = start_kernel(args, w, port, token)
    a = None
    try:
        a = Adapter(args, w, f"http://127.0.0.1:{port}/", token, state="state-selector")
        st, caps = a.get_json("/capabilities")
        selector = caps["custom"]["iacCode"]["resourceSelector"]
        kinds = caps["custom"]["iacCode"]["interruptKinds"]
        expect(s, st == 200 and kinds.get("cloud_resource_selection") == "cloud_resource_selection", f"{caps}")

        def ask(thread):
            st, ev = a.post(s, w.body(thread, "pick a vswitch", resourceSelector=selector))
            expect(s, st == 200 and outcome(ev) == "interrupt", f"{st} {outcome(ev) if st == 200 else ev}")
            intr = ev[-1]["outcome"]["interrupts"]
            expect(s, len(intr) == 1 and intr[0]["reason"] == "cloud_resource_selection", f"{intr}")
            sel = intr[0]["metadata"].get("selector") or {}
            expect(s, sel.get("id") == "vpc.vswitch" and sel.get("profileHash") == selector["profileHash"], f"{sel}")
            expect(s, intr[0]["id"].startswith("resource-"), f"{intr[0]['id']}")
            return intr[0]["id"]

        def answer(thread, iid, status, payload=None):
            entry = {"interruptId": iid, "status": status}
            if payload is not None:
                entry["payload"] = payload
            return a.post(s, w.body(thread, "", resume=[entry], resourceSelector=selector))

        def result(ev):
            return " ".join(e.get("content", "") for e in ev if e["type"] == "TOOL_CALL_RESULT")

        iid = ask("sel-wrong")
        st, ev = answer("sel-wrong", iid, "resolved", {"status": "selected", "value": "subnet-1"})
        expect(s, st == 200 and outcome(ev) == "error:RESUME_REJECTED"
               and "resource_selection_resume_invalid: selector value is invalid" in ev[-1]["message"],
               f"a value the profile refuses: {ev[-1] if st == 200 else ev}")
        iid = ask("sel-ok")
        st, ev = answer("sel-ok", iid, "resolved", {"status": "selected", "value": "vsw-interop1", "label": "Interop"})
        expect(s, st == 200 and outcome(ev) == "success" and '"value": "vsw-interop1"' in result(ev)
               and '"label": "Interop"' in result(ev), f"selected: {ev[-1] if st == 200 else ev}: {result(ev) if st == 200 else ''}")
        iid = ask("sel-cancel")
        st, ev = answer("sel-cancel", iid, "cancelled")
        expect(s, st == 200 and outcome(ev) == "success" and '"status": "canceled"' in result(ev),
               f"canceled: {ev[-1] if st == 200 else ev}: {result(ev) if st == 200 else ''}")
        a.stop()
        a = None
    finally:
        if a is not None:
            a.proc.kill()
        kernel.terminate()
        kernel.wait(10)
        w.env.clear()
        w.env.update(saved)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--iac-code", required=True)
    p.add_argument("--mode", choices=["managed", "external"], default="managed")
    p.add_argument("--protocol", choices=["0.1", "1.0"], default="0.1")
    p.add_argument("--only", default="")
    p.add_argument("--log-format", choices=["text", "json"], default="text")
    p.add_argument("--check-json-log", action="store_true",
                   help="at shutdown, every stderr line of iac-agui must be a JSON record")
    p.add_argument("--sidecar", action="store_true",
                   help="the build without the default features: the reference's scenarios only "
                        "(no stored threads, so no history, SDK listing or CopilotKit connect; no demo "
                        "kernel; no OTLP exporter)")
    p.add_argument("--kernel-beside-bin", action="store_true",
                   help="managed mode without IAC_CODE_AGUI_KERNEL_CMD: iac-agui finds iac-code itself")
    args = p.parse_args()
    global STRICT_V1
    STRICT_V1 = args.protocol == "1.0"
    llm = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_llm.py")], stdout=subprocess.PIPE, text=True)
    llm_port = int(llm.stdout.readline())
    w = Work(llm_port)
    kernel = None
    token = None
    kernel_url = None
    try:
        if args.mode == "external":
            port, token = free_port(), "interop-token"
            kernel = start_kernel(args, w, port, token)
            kernel_url = f"http://127.0.0.1:{port}/"
        a = Adapter(args, w, kernel_url, token)
        scenarios = [scenario_plain, scenario_thinking, scenario_permission, scenario_admission,
                     scenario_busy_and_cancel, scenario_cancel_paused, scenario_disconnect, scenario_llm_error,
                     scenario_pipeline, scenario_replay_finished, scenario_metrics, scenario_validator,
                     scenario_python_sdk_v1, scenario_history, scenario_profile_hash]
        if args.mode == "managed":
            scenarios += [scenario_ts_client, scenario_stop_then_send]
        if args.protocol == "1.0":
            scenarios = [scenario_plain, scenario_permission, scenario_busy_and_cancel, scenario_capabilities,
                         scenario_validator, scenario_ts_agent_v1, scenario_python_sdk_v1, scenario_history,
                         scenario_context, scenario_profile_hash]
        if args.sidecar:
            # The reference's job: what needs an extra (the thread routes, which the history
            # scenario and the SDK's listing read) is left out, and so is every scenario below
            # that starts the demo kernel or an OTLP collector.
            scenarios = [sc for sc in scenarios if sc not in (scenario_history, scenario_python_sdk_v1)]
        for sc in scenarios:
            if args.only and not any(o in sc.__name__ for o in args.only.split(",")):
                continue
            t0 = time.time()
            sc(a, w)
            print(f"ok   {sc.__name__} ({time.time() - t0:.1f}s)", flush=True)
        if args.protocol == "1.0" and not args.sidecar and (not args.only or "ts_stop" in args.only):
            t0 = time.time()
            scenario_ts_stop_v1(args, w)
            print(f"ok   scenario_ts_stop_v1 ({time.time() - t0:.1f}s)", flush=True)
        if args.protocol == "1.0" and not args.sidecar and (not args.only or "input_kinds" in args.only):
            t0 = time.time()
            scenario_input_kinds_v1(args, w)
            print(f"ok   scenario_input_kinds_v1 ({time.time() - t0:.1f}s)", flush=True)
        # CopilotKit's connect loads the thread's stored conversation (the threads extra).
        if args.mode == "external" and args.protocol == "0.1" and not args.sidecar \
                and (not args.only or "copilotkit" in args.only):
            t0 = time.time()
            scenario_copilotkit(args, w, kernel_url, token)
            print(f"ok   scenario_copilotkit ({time.time() - t0:.1f}s)", flush=True)
        if args.mode == "external" and (not args.only or "answer_validation" in args.only):
            t0 = time.time()
            scenario_answer_validation(a, w, kernel_url, token)
            print(f"ok   scenario_answer_validation ({time.time() - t0:.1f}s)", flush=True)
        if args.mode == "external" and (not args.only or "resource_selection" in args.only):
            t0 = time.time()
            scenario_resource_selection(args, w)
            print(f"ok   scenario_resource_selection ({time.time() - t0:.1f}s)", flush=True)
        if args.mode == "external" and not args.sidecar and (not args.only or "trace_context" in args.only):
            t0 = time.time()
            scenario_trace_context(args, w, kernel_url, token)
            print(f"ok   scenario_trace_context ({time.time() - t0:.1f}s)", flush=True)
        if args.mode == "external" and not args.sidecar and not args.only:
            a = scenario_restart(a, w, args, kernel_url, token)
            print("ok   scenario_restart", flush=True)
        # Kernel-level faults once, in 0.1 mode (the dialect does not change them).
        faults = args.mode == "external" and args.protocol == "0.1"
        if faults and (not args.only or "sigterm_mid_resume" in args.only):
            t0 = time.time()
            a = scenario_sigterm_mid_resume(a, w, args, kernel_url, token)
            print(f"ok   scenario_sigterm_mid_resume ({time.time() - t0:.1f}s)", flush=True)
        if faults and (not args.only or "kernel_restart" in args.only):
            t0 = time.time()
            kernel = scenario_kernel_restart(a, w, args, kernel, port, token)
            print(f"ok   scenario_kernel_restart ({time.time() - t0:.1f}s)", flush=True)
        a.stop()
        print(f"interop {args.mode} {args.protocol}: all scenarios passed", flush=True)
    except Failure as f:
        print(str(f), file=sys.stderr, flush=True)
        print(f"logs kept in {w.dir}", file=sys.stderr)
        return 1
    finally:
        llm.terminate()
        if kernel:
            kernel.terminate()
            kernel.wait(10)
    shutil.rmtree(w.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
