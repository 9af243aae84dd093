//! The built-in demo kernel: a scripted A2A 1.0 server on its own loopback port.
//!
//! It speaks the real kernel's conventions as captured in `tests/fixtures/a2a/`: JSON-RPC on
//! `POST /`, `data: …\r\n\r\n` SSE frames wrapped as `{"result":…,"id":…,"jsonrpc":"2.0"}`,
//! proto-JSON (every number inside metadata is a double, `1.0`), `<taskId>-message` text
//! ids, an ordinary turn that ends in `input-required` after an `assistantFinal` status,
//! pipeline envelopes and the extension endpoints. `iac-agui --demo` runs it so a newcomer
//! sees complete AG-UI sessions with no LLM; the integration tests use it as their upstream.
//!
//! The script is chosen by keywords in the user's message (see [`SCRIPTS`]).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

use crate::ids;
use crate::server::http::{self, ChunkedDecoder, Framing};

/// Keyword → behaviour, checked in order against the lowercased user text.
pub const SCRIPTS: &[(&str, &str)] = &[
    (
        "fault-",
        "fault injection for tests (garbage, die, huge, wrongctx, noinputid, hang, http500, rpcerror, drip, wrongtask)",
    ),
    (
        "flood",
        "`flood N`: N small text deltas as fast as possible (benchmarks)",
    ),
    (
        "pace",
        "`pace N R`: N small text deltas at R per second (latency benchmarks)",
    ),
    (
        "pipeline",
        "a pipeline run: steps, a clarifying question, parallel candidates, custom events",
    ),
    (
        "question",
        "a question with options (ask_user_question) → interrupt → answer",
    ),
    (
        "permission",
        "thinking, text and a bash tool that needs permission → interrupt → allow/deny",
    ),
    ("fail", "a provider failure: the task fails"),
    ("slow", "a slow stream of ticks (try cancelling it)"),
    ("artifact", "a tool that produces a file artifact"),
    ("think", "raw thinking before the answer"),
    ("", "a plain streamed answer"),
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Demo kernel settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Required bearer token (`None`: no auth).
    pub token: Option<String>,
    /// Delay between scripted frames.
    pub frame_delay: Duration,
    /// Interval of the `slow` script's ticks.
    pub tick: Duration,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            token: None,
            frame_delay: Duration::from_millis(40),
            tick: Duration::from_millis(300),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    Plain,
    Think,
    Permission,
    Question,
    Pipeline,
    /// A pipeline that keeps working for a while (for guidance and cancellation).
    PipelineSlow,
    Fail,
    Slow,
    Artifact,
    Flood(u64),
    Pace(u64, u64),
    /// `wait N`: silence for N seconds, then a short answer (heartbeat and load tests).
    Wait(u64),
    Fault(Fault),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Garbage,
    Die,
    Huge,
    WrongContext,
    WrongTask,
    NoInputId,
    Hang,
    Http500,
    RpcError,
    Drip,
}

fn choose(text: &str, run_mode: Option<&str>) -> Script {
    let t = text.to_lowercase();
    let num = |after: &str, idx: usize, default: u64| {
        t.split(after)
            .nth(1)
            .and_then(|r| r.split_whitespace().nth(idx))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(default)
    };
    if let Some(rest) = t.split("fault-").nth(1) {
        let name = rest
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or("");
        let f = match name {
            "garbage" => Fault::Garbage,
            "die" => Fault::Die,
            "huge" => Fault::Huge,
            "wrongctx" => Fault::WrongContext,
            "wrongtask" => Fault::WrongTask,
            "noinputid" => Fault::NoInputId,
            "hang" => Fault::Hang,
            "http500" => Fault::Http500,
            "rpcerror" => Fault::RpcError,
            _ => Fault::Drip,
        };
        return Script::Fault(f);
    }
    if t.contains("flood") {
        return Script::Flood(num("flood", 0, 1000));
    }
    if t.contains("pace") {
        return Script::Pace(num("pace", 0, 100), num("pace", 1, 200).max(1));
    }
    if t.starts_with("wait") {
        return Script::Wait(num("wait", 0, 10));
    }
    if t.contains("pipeline") || run_mode == Some("pipeline") {
        return if t.contains("slow") {
            Script::PipelineSlow
        } else {
            Script::Pipeline
        };
    }
    for (kw, s) in [
        ("question", Script::Question),
        ("permission", Script::Permission),
        ("fail", Script::Fail),
        ("slow", Script::Slow),
        ("artifact", Script::Artifact),
        ("think", Script::Think),
    ] {
        if t.contains(kw) {
            return s;
        }
    }
    Script::Plain
}

/// What is waiting for the user.
#[derive(Debug, Clone)]
struct Pending {
    input: Value,
    kind: &'static str,
}

struct Task {
    id: String,
    context_id: String,
    session_id: String,
    script: Script,
    state: &'static str,
    last_message: Option<Value>,
    history: Vec<Value>,
    pending: Option<Pending>,
    answered: Vec<String>,
    /// The task has a producer running (a stream is open).
    live: bool,
    cancel: Arc<AtomicBool>,
    subscribers: Vec<SyncSender<Value>>,
    pipeline_events: Vec<Value>,
    pipeline_seq: u64,
    cwd: Option<String>,
}

struct Shared {
    cfg: DemoConfig,
    tasks: Mutex<HashMap<String, Task>>,
    sessions: Mutex<HashMap<String, String>>,
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// A running demo kernel.
pub struct DemoKernel {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl DemoKernel {
    /// Start on `127.0.0.1:0`.
    pub fn start(cfg: DemoConfig) -> io::Result<DemoKernel> {
        DemoKernel::start_on(0, cfg)
    }

    /// Start on `127.0.0.1:port`.
    pub fn start_on(port: u16, cfg: DemoConfig) -> io::Result<DemoKernel> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        rustix::net::listen(&listener, crate::limits::LISTEN_BACKLOG)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            tasks: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("demo-kernel".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(DemoKernel { addr, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Task ids the kernel has seen (tests).
    pub fn task_ids(&self) -> Vec<String> {
        lock(&self.shared.tasks).keys().cloned().collect()
    }

    /// A task's normalised state name, e.g. `TASK_STATE_CANCELED` (tests).
    pub fn task_state(&self, id: &str) -> Option<String> {
        lock(&self.shared.tasks)
            .get(id)
            .map(|t| t.state.to_string())
    }

    /// Connections being served right now (tests check for leaks).
    pub fn open_connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Drop for DemoKernel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in lock(&self.shared.tasks).values() {
            t.cancel.store(true, Ordering::SeqCst);
        }
        // Unblock accept().
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let s = shared.clone();
        s.connections.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("demo-conn".into())
            .stack_size(512 * 1024)
            .spawn(move || {
                let _ = serve(conn, &s);
                s.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Largest request body the demo kernel reads (the adapter's bodies are far smaller).
const MAX_DEMO_BODY: usize = 64 << 20;

struct Req {
    head: http::RequestHead,
    body: Vec<u8>,
}

fn read_request(sock: &mut TcpStream) -> io::Result<Option<Req>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let (head, used) = loop {
        if let Ok(Some(h)) = http::parse_head(&buf) {
            break h;
        }
        if buf.len() > 64 * 1024 {
            return Ok(None);
        }
        let n = sock.read(&mut tmp)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let mut rest = buf.split_off(used);
    let mut body = Vec::new();
    match head.framing {
        Framing::Length(n) => {
            if n > MAX_DEMO_BODY as u64 {
                return Ok(None);
            }
            while (rest.len() as u64) < n {
                let k = sock.read(&mut tmp)?;
                if k == 0 {
                    return Ok(None);
                }
                rest.extend_from_slice(&tmp[..k]);
            }
            rest.truncate(n as usize);
            body = rest;
        }
        Framing::Chunked => {
            let mut dec = ChunkedDecoder::default();
            loop {
                dec.decode(&rest, &mut body, MAX_DEMO_BODY)
                    .map_err(|_| io::Error::other("bad chunked body"))?;
                if dec.is_done() {
                    break;
                }
                let k = sock.read(&mut tmp)?;
                if k == 0 {
                    return Ok(None);
                }
                rest = tmp[..k].to_vec();
            }
        }
    }
    Ok(Some(Req { head, body }))
}

fn respond(sock: &mut TcpStream, status: u16, body: &Value) -> io::Result<()> {
    let b = serde_json::to_vec(body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        http::reason(status),
        b.len()
    );
    sock.write_all(head.as_bytes())?;
    sock.write_all(&b)
}

fn serve(mut sock: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    let _ = sock.set_nodelay(true);
    let Some(req) = read_request(&mut sock)? else {
        return Ok(());
    };
    if let Some(tok) = &shared.cfg.token {
        let want = format!("Bearer {tok}");
        if req.head.header("authorization") != Some(want.as_bytes()) {
            return respond(&mut sock, 401, &json!({"error": "Unauthorized"}));
        }
    }
    let path = req.head.raw_path().to_string();
    match (req.head.method.as_str(), path.as_str()) {
        ("GET", "/health") => respond(
            &mut sock,
            200,
            &json!({"status": "healthy", "version": "0.16.0", "mode": "normal"}),
        ),
        ("GET", "/iac-code/pipeline/state") => pipeline_state(&mut sock, shared, &req),
        ("POST", "/iac-code/session/ensure-restored") => ensure_restored(&mut sock, shared, &req),
        ("POST", "/") => rpc(sock, shared, req),
        _ => respond(&mut sock, 404, &json!({"error": "Not Found"})),
    }
}

fn rpc_error(id: &Value, code: i64, message: &str, reason: &str) -> Value {
    json!({"error": {"code": code, "message": message, "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org", "metadata": {}}]}, "id": id, "jsonrpc": "2.0"})
}

fn rpc(mut sock: TcpStream, shared: &Arc<Shared>, req: Req) -> io::Result<()> {
    let Ok(v) = serde_json::from_slice::<Value>(&req.body) else {
        return respond(
            &mut sock,
            200,
            &json!({"error": {"code": -32700, "message": "Parse error"}, "id": null, "jsonrpc": "2.0"}),
        );
    };
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    if req.head.header("a2a-version") != Some(b"1.0") {
        return respond(
            &mut sock,
            200,
            &rpc_error(
                &id,
                -32009,
                "A2A version '0.3' is not supported by this handler. Expected version '1.0'.",
                "VERSION_NOT_SUPPORTED",
            ),
        );
    }
    let params = v.get("params").cloned().unwrap_or(Value::Null);
    match v.get("method").and_then(Value::as_str).unwrap_or("") {
        "SendStreamingMessage" => send_streaming(sock, shared, id, params),
        "SendMessage" => send_message(&mut sock, shared, id, params),
        "GetTask" => {
            let tid = params["id"].as_str().unwrap_or("");
            let body = match lock(&shared.tasks).get(tid) {
                Some(t) => json!({"result": snapshot(t), "id": id, "jsonrpc": "2.0"}),
                None => rpc_error(&id, -32001, "Task not found", "TASK_NOT_FOUND"),
            };
            respond(&mut sock, 200, &body)
        }
        "CancelTask" => {
            let tid = params["id"].as_str().unwrap_or("");
            let body = cancel_task(shared, tid, &id);
            respond(&mut sock, 200, &body)
        }
        "SubscribeToTask" => subscribe(sock, shared, id, params),
        _ => respond(
            &mut sock,
            200,
            &json!({"error": {"code": -32601, "message": "Method not found"}, "id": id, "jsonrpc": "2.0"}),
        ),
    }
}

/// RFC 3339 UTC with microseconds, as the kernel's protobuf timestamps.
pub fn rfc3339_micros(t: SystemTime) -> String {
    crate::rfc3339::format_micros(t)
}

fn now_ts() -> String {
    rfc3339_micros(SystemTime::now())
}

fn snapshot(t: &Task) -> Value {
    let mut status = json!({"state": t.state});
    if let Some(m) = &t.last_message {
        status["message"] = m.clone();
    }
    status["timestamp"] = now_ts().into();
    let mut iac = Map::new();
    iac.insert("iacCodeSessionId".into(), t.session_id.clone().into());
    if let Some(p) = &t.pending {
        iac.insert("input".into(), p.input.clone());
    }
    let mut v = json!({"id": t.id, "contextId": t.context_id, "status": status});
    let n = t.history.len();
    v["history"] = Value::Array(t.history[n.saturating_sub(100)..].to_vec());
    v["metadata"] = json!({"iac_code": iac});
    v
}

fn cancel_task(shared: &Arc<Shared>, tid: &str, id: &Value) -> Value {
    let mut tasks = lock(&shared.tasks);
    let Some(t) = tasks.get_mut(tid) else {
        return rpc_error(id, -32001, "Task not found", "TASK_NOT_FOUND");
    };
    let waiting_on_input = t.state == "TASK_STATE_INPUT_REQUIRED" && t.pending.is_some();
    let cancelable = t.live || waiting_on_input || t.state == "TASK_STATE_WORKING";
    if !cancelable || t.state == "TASK_STATE_CANCELED" {
        return rpc_error(id, -32002, "Task cannot be canceled", "TASK_NOT_CANCELABLE");
    }
    t.cancel.store(true, Ordering::SeqCst);
    if !t.live {
        t.state = "TASK_STATE_CANCELED";
        t.pending = None;
        t.last_message = Some(agent_message(t, &format!("{}-5", t.id), "Task canceled."));
    } else {
        // The producer emits the CANCELED status; report the outcome now.
        t.state = "TASK_STATE_CANCELED";
        t.last_message = Some(agent_message(t, &format!("{}-5", t.id), "Task canceled."));
    }
    json!({"result": snapshot(t), "id": id, "jsonrpc": "2.0"})
}

fn agent_message(t: &Task, message_id: &str, text: &str) -> Value {
    json!({"messageId": message_id, "contextId": t.context_id, "taskId": t.id, "role": "ROLE_AGENT", "parts": [{"text": text}]})
}

fn ensure_restored(sock: &mut TcpStream, shared: &Arc<Shared>, req: &Req) -> io::Result<()> {
    let v: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let tid = v["taskId"].as_str().unwrap_or("");
    let sid = v["sessionId"].as_str().unwrap_or("");
    let tasks = lock(&shared.tasks);
    match tasks.get(tid) {
        Some(t)
            if t.session_id == sid
                && v["cwd"]
                    .as_str()
                    .is_none_or(|c| Some(c) == t.cwd.as_deref()) =>
        {
            respond(sock, 200, &json!({"status": "current"}))
        }
        Some(_) => respond(sock, 404, &json!({"status": "not_found"})),
        None => respond(
            sock,
            400,
            &json!({"error": "Invalid session restore request."}),
        ),
    }
}

fn pipeline_state(sock: &mut TcpStream, shared: &Arc<Shared>, req: &Req) -> io::Result<()> {
    let q = req.head.query().unwrap_or("");
    let mut task_id = String::new();
    let mut after: i64 = 0;
    for kv in q.split('&') {
        if let Some((k, v)) = kv.split_once('=') {
            match k {
                "taskId" => task_id = http::percent_decode(v),
                "afterSequence" => match v.parse::<i64>() {
                    Ok(n) if n >= 0 => after = n,
                    _ => {
                        return respond(
                            sock,
                            400,
                            &json!({"error": "afterSequence must be a non-negative integer"}),
                        );
                    }
                },
                _ => {}
            }
        }
    }
    let tasks = lock(&shared.tasks);
    let Some(t) = tasks
        .get(&task_id)
        .filter(|t| matches!(t.script, Script::Pipeline | Script::PipelineSlow))
    else {
        return respond(sock, 404, &json!({"error": "A2A pipeline state not found"}));
    };
    let events: Vec<Value> = t
        .pipeline_events
        .iter()
        .filter(|e| e["sequence"].as_i64().unwrap_or(0) > after)
        .cloned()
        .collect();
    let status = match t.state {
        "TASK_STATE_INPUT_REQUIRED" => "waiting_input",
        "TASK_STATE_COMPLETED" => "completed",
        "TASK_STATE_FAILED" => "failed",
        "TASK_STATE_CANCELED" => "canceled",
        _ => "working",
    };
    let body = json!({
        "snapshot": {
            "contextId": t.context_id,
            "lastSequence": t.pipeline_seq,
            "pendingInput": t.pending.as_ref().map(|p| p.input.clone()),
            "pipelineName": "selling",
            "pipelineRunId": t.context_id,
            "schemaVersion": "1.2",
            "status": status,
            "taskId": t.id,
        },
        "events": events,
    });
    respond(sock, 200, &body)
}

/// Writes frames to one SSE response and to the task's subscribers.
struct Emitter<'a> {
    sock: &'a mut TcpStream,
    shared: &'a Arc<Shared>,
    task_id: String,
    context_id: String,
    session_id: String,
    req_id: Value,
    cancel: Arc<AtomicBool>,
    delay: Duration,
}

/// The stream must end now (cancelled, or the client went away).
struct Stop;

impl Emitter<'_> {
    fn frame(&mut self, result: Value) -> Result<(), Stop> {
        let v = json!({"result": result, "id": self.req_id, "jsonrpc": "2.0"});
        let subs = {
            let mut tasks = lock(&self.shared.tasks);
            match tasks.get_mut(&self.task_id) {
                Some(t) => {
                    t.subscribers.retain(|s| s.try_send(v.clone()).is_ok());
                    t.subscribers.len()
                }
                None => 0,
            }
        };
        let _ = subs;
        self.raw(&serde_json::to_vec(&v).unwrap_or_default())
    }

    fn raw(&mut self, data: &[u8]) -> Result<(), Stop> {
        let mut frame = Vec::with_capacity(data.len() + 10);
        frame.extend_from_slice(b"data: ");
        frame.extend_from_slice(data);
        frame.extend_from_slice(b"\r\n\r\n");
        write_chunk(self.sock, &frame).map_err(|_| Stop)
    }

    fn pause(&self, d: Duration) -> Result<(), Stop> {
        let mut left = d;
        while !left.is_zero() {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(Stop);
            }
            let step = left.min(Duration::from_millis(20));
            std::thread::sleep(step);
            left -= step;
        }
        if self.cancel.load(Ordering::SeqCst) {
            return Err(Stop);
        }
        Ok(())
    }

    fn status(
        &mut self,
        state: &'static str,
        message: Option<Value>,
        timestamp: bool,
        iac: Value,
    ) -> Result<(), Stop> {
        self.pause(self.delay)?;
        let mut st = json!({"state": state});
        if let Some(m) = &message {
            st["message"] = m.clone();
        }
        if timestamp {
            st["timestamp"] = now_ts().into();
        }
        {
            let mut tasks = lock(&self.shared.tasks);
            if let Some(t) = tasks.get_mut(&self.task_id) {
                if t.state != "TASK_STATE_CANCELED" {
                    t.state = state;
                }
                if let Some(m) = &message {
                    t.last_message = Some(m.clone());
                    t.history.push(m.clone());
                }
            }
        }
        let upd = json!({"statusUpdate": {"taskId": self.task_id, "contextId": self.context_id, "status": st, "metadata": {"iac_code": iac}}});
        self.frame(upd)
    }

    fn with_session(&self, mut iac: Value) -> Value {
        if let Some(o) = iac.as_object_mut() {
            o.insert("iacCodeSessionId".into(), self.session_id.clone().into());
        }
        iac
    }

    fn msg(&self, id_suffix: &str, text: &str) -> Value {
        json!({"messageId": format!("{}-{id_suffix}", self.task_id), "contextId": self.context_id, "taskId": self.task_id, "role": "ROLE_AGENT", "parts": [{"text": text}]})
    }

    fn text(&mut self, t: &str) -> Result<(), Stop> {
        let m = self.msg("message", t);
        let iac = self.with_session(json!({}));
        self.status("TASK_STATE_WORKING", Some(m), false, iac)
    }

    fn meta(&mut self, iac: Value) -> Result<(), Stop> {
        let iac = self.with_session(iac);
        self.status("TASK_STATE_WORKING", None, false, iac)
    }

    fn usage(&mut self, input: f64, output: f64) -> Result<(), Stop> {
        self.meta(json!({"usage": {"cachedInputTokens": 0.0, "outputTokens": output, "inputTokens": input, "totalTokens": input + output, "provider": "demo", "model": "demo-1"}}))
    }

    /// The end of an ordinary turn: the full text with `assistantFinal`, then input-required.
    fn finish_turn(&mut self, full_text: &str) -> Result<(), Stop> {
        let iac = self.with_session(json!({"assistantFinal": {"complete": true}}));
        let m = (!full_text.is_empty()).then(|| self.msg("2", full_text));
        self.status("TASK_STATE_WORKING", m, true, iac)?;
        let iac = self.with_session(json!({}));
        self.status("TASK_STATE_INPUT_REQUIRED", None, true, iac)
    }

    fn cancelled(&mut self) {
        let m = self.msg("5", "Task canceled.");
        let iac = self.with_session(json!({}));
        self.cancel.store(false, Ordering::SeqCst);
        let delay = std::mem::replace(&mut self.delay, Duration::ZERO);
        let _ = self.status("TASK_STATE_CANCELED", Some(m), true, iac);
        self.delay = delay;
    }

    // ---- pipeline envelopes ----

    fn envelope(
        &mut self,
        event_type: &str,
        scope: &str,
        status: &str,
        data: Value,
        extra: Value,
    ) -> Value {
        let seq = {
            let mut tasks = lock(&self.shared.tasks);
            match tasks.get_mut(&self.task_id) {
                Some(t) => {
                    t.pipeline_seq += 1;
                    t.pipeline_seq
                }
                None => 0,
            }
        };
        let mut env = json!({
            "schemaVersion": "1.0",
            "extensionUri": "urn:iac-code:a2a:pipeline-events:v1",
            "eventId": format!("evt-{}", ids::hex32()),
            "sequence": seq,
            "createdAt": now_ts(),
            "eventType": event_type,
            "scope": scope,
            "pipelineRunId": self.context_id,
            "taskId": self.task_id,
            "contextId": self.context_id,
            "pipelineName": "selling",
            "status": status,
            "data": data,
            "iacCodeSessionId": self.session_id,
        });
        if let (Some(e), Some(x)) = (env.as_object_mut(), extra.as_object()) {
            for (k, v) in x {
                e.insert(k.clone(), v.clone());
            }
        }
        if let Some(t) = lock(&self.shared.tasks).get_mut(&self.task_id) {
            t.pipeline_events.push(env.clone());
        }
        env
    }

    /// Send envelopes in one frame (a batch when more than one), numbers as doubles.
    /// One pipeline event on its own (no input request).
    fn emit(
        &mut self,
        event_type: &str,
        scope: &str,
        status: &str,
        data: Value,
        extra: Value,
    ) -> Result<(), Stop> {
        let e = self.envelope(event_type, scope, status, data, extra);
        self.pipeline(vec![e], None)
    }

    fn pipeline(&mut self, envs: Vec<Value>, input: Option<Value>) -> Result<(), Stop> {
        let last_status = envs
            .last()
            .and_then(|e| e["status"].as_str())
            .unwrap_or("working")
            .to_string();
        let state = match last_status.as_str() {
            "input_required" | "waiting_input" => "TASK_STATE_INPUT_REQUIRED",
            "failed" => "TASK_STATE_FAILED",
            "completed" => "TASK_STATE_COMPLETED",
            "canceled" => "TASK_STATE_CANCELED",
            _ => "TASK_STATE_WORKING",
        };
        let envs: Vec<Value> = envs.into_iter().map(doubles).collect();
        let mut iac = if envs.len() == 1 {
            json!({"pipeline": envs[0]})
        } else {
            json!({"pipelineBatch": {"schemaVersion": "1.0", "extensionUri": "urn:iac-code:a2a:pipeline-events:v1", "events": envs}})
        };
        if let Some(i) = input {
            iac["input"] = doubles(i);
        }
        self.status(state, None, false, iac)
    }
}

/// Proto-JSON: every number inside a Struct is a double.
fn doubles(v: Value) -> Value {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e15 {
                serde_json::from_str(&format!("{f:.1}")).unwrap_or(Value::Number(n))
            } else {
                Value::Number(n)
            }
        }
        Value::Array(a) => Value::Array(a.into_iter().map(doubles).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, doubles(v))).collect()),
        other => other,
    }
}

fn write_chunk(sock: &mut TcpStream, data: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    sock.write_all(&out)
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\nconnection: close\r\nx-accel-buffering: no\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";

fn user_text(message: &Value) -> String {
    message["parts"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn send_streaming(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    params: Value,
) -> io::Result<()> {
    let message = params["message"].clone();
    let iac = message["metadata"]["iac_code"].clone();
    if let Some(tid) = message["taskId"].as_str() {
        return resume(sock, shared, id, tid.to_string(), message);
    }
    let context_id = message["contextId"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("ctx-{}", &ids::hex32()[..12]));
    let text = user_text(&message);
    let run_mode = iac["run_mode"].as_str().or(iac["runMode"].as_str());
    let script = choose(&text, run_mode);
    match script {
        Script::Fault(Fault::Http500) => {
            return sock.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\nboom!");
        }
        Script::Fault(Fault::RpcError) => {
            return respond(
                &mut sock,
                200,
                &rpc_error(&id, -32603, "Internal error", "INTERNAL"),
            );
        }
        Script::Fault(Fault::Hang) => {
            let mut tmp = [0u8; 1];
            let _ = sock.set_read_timeout(Some(Duration::from_secs(600)));
            let _ = sock.read(&mut tmp);
            return Ok(());
        }
        _ => {}
    }
    let session_id = lock(&shared.sessions)
        .entry(context_id.clone())
        .or_insert_with(ids::uuid4)
        .clone();
    let task_id = ids::uuid4();
    let cancel = Arc::new(AtomicBool::new(false));
    let mut echo = message.clone();
    if let Some(o) = echo.as_object_mut() {
        o.insert("contextId".into(), context_id.clone().into());
        o.insert("taskId".into(), task_id.clone().into());
        if let Some(ic) = o
            .get_mut("metadata")
            .and_then(|m| m.get_mut("iac_code"))
            .and_then(Value::as_object_mut)
        {
            ic.remove("llm_headers");
        }
    }
    let echo = json!({"messageId": echo["messageId"], "contextId": context_id, "taskId": task_id, "role": "ROLE_USER", "parts": echo["parts"], "metadata": doubles(echo["metadata"].clone())});
    lock(&shared.tasks).insert(
        task_id.clone(),
        Task {
            id: task_id.clone(),
            context_id: context_id.clone(),
            session_id: session_id.clone(),
            script,
            state: "TASK_STATE_SUBMITTED",
            last_message: None,
            history: vec![echo.clone()],
            pending: None,
            answered: Vec::new(),
            live: true,
            cancel: cancel.clone(),
            subscribers: Vec::new(),
            pipeline_events: Vec::new(),
            pipeline_seq: 0,
            cwd: iac["cwd"].as_str().map(str::to_string),
        },
    );
    sock.write_all(SSE_HEAD)?;
    let delay = shared.cfg.frame_delay;
    let mut em = Emitter {
        sock: &mut sock,
        shared,
        task_id: task_id.clone(),
        context_id,
        session_id,
        req_id: id,
        cancel: cancel.clone(),
        delay,
    };
    let task = json!({"task": {"id": task_id, "contextId": em.context_id, "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [echo]}});
    let mut outcome = em.frame(task);
    if outcome.is_ok() {
        outcome = run_script(&mut em, script, &text);
    }
    if outcome.is_err() && cancel.load(Ordering::SeqCst) {
        em.cancelled();
    }
    finish_task(shared, &task_id);
    let _ = sock.write_all(http::LAST_CHUNK);
    Ok(())
}

fn finish_task(shared: &Arc<Shared>, task_id: &str) {
    if let Some(t) = lock(&shared.tasks).get_mut(task_id) {
        t.live = false;
        t.subscribers.clear();
    }
}

fn run_script(em: &mut Emitter<'_>, script: Script, text: &str) -> Result<(), Stop> {
    let pipeline = matches!(script, Script::Pipeline | Script::PipelineSlow);
    if !pipeline {
        em.meta_state("TASK_STATE_SUBMITTED")?;
        em.meta_state("TASK_STATE_WORKING")?;
    }
    match script {
        Script::Plain => {
            em.text("Hello")?;
            em.text("! This is the iac-agui demo kernel.")?;
            em.usage(120.0, 12.0)?;
            em.finish_turn("Hello! This is the iac-agui demo kernel.")
        }
        Script::Think => {
            em.meta(json!({"thinking": {"type": "raw_thinking", "text": "The user wants to see reasoning. "}}))?;
            em.meta(json!({"thinking": {"type": "raw_thinking", "text": "I will think out loud first."}}))?;
            em.meta(json!({"thinking": {"type": "summary", "text": "(summaries are not shown)"}}))?;
            em.text("Here is my answer after thinking.")?;
            em.usage(140.0, 30.0)?;
            em.finish_turn("Here is my answer after thinking.")
        }
        Script::Permission => permission_turn(em),
        Script::Question => question_turn(em),
        Script::Pipeline => pipeline_turn(em, text),
        Script::PipelineSlow => pipeline_slow(em),
        Script::Fail => {
            em.text("Working on it… ")?;
            let m = em.msg("message", "The provider failed: demo failure.");
            let iac = em.with_session(
                json!({"error": {"retryable": false, "errorId": &ids::hex32()[..12]}}),
            );
            em.status("TASK_STATE_FAILED", Some(m), true, iac)?;
            em.usage(50.0, 5.0)?;
            let iac = em.with_session(json!({}));
            em.status("TASK_STATE_INPUT_REQUIRED", None, true, iac)
        }
        Script::Slow => {
            let tick = em.shared.cfg.tick;
            for i in 1..=40 {
                em.pause(tick)?;
                em.text(&format!("tick {i}. "))?;
            }
            em.finish_turn("")
        }
        Script::Artifact => {
            let tool = format!("call_{}", &ids::hex32()[..8]);
            em.meta(
                json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "started"}}),
            )?;
            em.meta(json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "input_complete", "inputSummary": {"tool_name": "write_file"}, "toolInput": {"path": "template.yml"}}}))?;
            em.meta(json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "progress", "mcp": {"serverName": "demo", "toolName": "write_file", "progress": 1.0, "total": 2.0, "message": "writing"}}}))?;
            let art = ids::uuid4();
            let upd = json!({"artifactUpdate": {"taskId": em.task_id, "contextId": em.context_id, "artifact": {"artifactId": art, "name": "template.yml", "parts": [{"url": format!("iac-code-artifact://{art}/template.yml"), "filename": "template.yml", "mediaType": "application/yaml"}], "metadata": {"mediaType": "application/yaml", "byteSize": 42.0}}, "lastChunk": true}});
            em.pause(em.delay)?;
            em.frame(upd)?;
            em.meta(json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "completed", "result": "Wrote template.yml"}}))?;
            em.text("I wrote template.yml.")?;
            em.usage(100.0, 10.0)?;
            em.finish_turn("I wrote template.yml.")
        }
        Script::Flood(n) => {
            em.delay = Duration::ZERO;
            for _ in 0..n {
                em.text("x")?;
            }
            em.finish_turn("")
        }
        Script::Pace(n, rate) => {
            em.delay = Duration::ZERO;
            let gap = Duration::from_secs_f64(1.0 / rate as f64);
            for i in 0..n {
                em.pause(gap)?;
                let sent = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_micros())
                    .unwrap_or(0);
                em.text(&format!("{i}@{sent} "))?;
            }
            em.finish_turn("")
        }
        Script::Wait(secs) => {
            em.pause(Duration::from_secs(secs))?;
            em.text("Done waiting.")?;
            em.finish_turn("Done waiting.")
        }
        Script::Fault(f) => fault(em, f),
    }
}

impl Emitter<'_> {
    fn meta_state(&mut self, state: &'static str) -> Result<(), Stop> {
        let iac = self.with_session(json!({}));
        self.status(state, None, true, iac)
    }
}

fn permission_input(em: &Emitter<'_>, tool: &str, command: &str) -> Value {
    json!({"options": [{"label": "Allow once", "id": "allow_once"}, {"label": "Deny", "id": "deny"}], "title": "Run a local shell command", "safeSummary": format!("bash: {{\"command\":\"{command}\"}}"), "isReadOnly": false, "kind": "permission", "language": "en", "inputId": format!("permission-{}", ids::hex32()), "requestTaskId": em.task_id, "target": format!("the current local workspace; command: {command}"), "required": true, "schemaVersion": 1.0, "effect": "local_execution", "contextId": em.context_id, "purpose": "Execute a local command needed for the requested infrastructure task.", "toolName": "bash", "toolUseId": tool, "prompt": "Run a local shell command Allow once?"})
}

fn wait_for_input(
    em: &mut Emitter<'_>,
    input: Value,
    kind: &'static str,
    extra: Value,
) -> Result<(), Stop> {
    if let Some(t) = lock(&em.shared.tasks).get_mut(&em.task_id) {
        t.pending = Some(Pending {
            input: input.clone(),
            kind,
        });
    }
    let mut iac = em.with_session(extra);
    iac["input"] = input;
    em.status("TASK_STATE_INPUT_REQUIRED", None, false, iac)
}

fn permission_turn(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.meta(json!({"thinking": {"type": "raw_thinking", "text": "The user wants a file. "}}))?;
    em.meta(json!({"thinking": {"type": "raw_thinking", "text": "I will use bash."}}))?;
    em.text("I'll create it.")?;
    let tool = format!("call_{}", &ids::hex32()[..12]);
    em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "started"}}))?;
    em.meta(
        json!({"tool": {"partialJsonLength": 19.0, "toolUseId": tool, "status": "input_delta"}}),
    )?;
    em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "input_complete", "inputSummary": {"tool_name": "bash", "fields": {"command": {"type": "str"}}}, "toolInput": {"command": "touch created.txt"}}}))?;
    em.usage(120.0, 12.0)?;
    let input = permission_input(em, &tool, "touch created.txt");
    let perm = json!({"permission": {"autoApproved": false, "toolUseId": tool, "toolName": "bash", "pending": true}});
    wait_for_input(em, input, "permission", perm)
}

fn question_turn(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.text("Which region should I use?")?;
    let tool = format!("call_{}", &ids::hex32()[..12]);
    em.meta(
        json!({"tool": {"name": "ask_user_question", "toolUseId": tool, "status": "started"}}),
    )?;
    let input = json!({"schemaVersion": 1.0, "kind": "ask_user_question", "requestTaskId": em.task_id, "contextId": em.context_id, "inputId": format!("ask-{tool}"), "prompt": "Which region should I use?", "required": true, "toolUseId": tool, "allowFreeText": true, "freeTextPrompt": "Or type a region id", "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}], "language": "en"});
    wait_for_input(em, input, "question", json!({}))
}

fn step(id: &str, index: f64) -> Value {
    json!({"runId": format!("step-{id}-1"), "index": index, "total": 3.0, "id": id, "attempt": 1.0})
}

fn pipeline_turn(em: &mut Emitter<'_>, text: &str) -> Result<(), Stop> {
    em.emit("pipeline_started", "pipeline", "working", json!({"userRequest": text, "pipelineType": "selling", "totalSteps": 3, "stepNames": ["intent_parsing", "evaluate_candidates", "deploying"]}), json!({}))?;
    let s1 = step("intent_parsing", 1.0);
    em.emit(
        "step_started",
        "step",
        "working",
        json!({"name": "intent_parsing"}),
        json!({"step": s1}),
    )?;
    em.emit(
        "thinking_delta",
        "step",
        "working",
        json!({"type": "raw_thinking", "text": "Need to clarify the goal."}),
        json!({"step": s1}),
    )?;
    let e1 = em.envelope(
        "text_delta",
        "step",
        "working",
        json!({"text": "Let me ask "}),
        json!({"step": s1}),
    );
    let e2 = em.envelope(
        "text_delta",
        "step",
        "working",
        json!({"text": "one question."}),
        json!({"step": s1}),
    );
    em.pipeline(vec![e1, e2], None)?;
    em.emit("usage", "step", "working", json!({"cachedInputTokens": 0, "provider": "demo", "model": "demo-1", "inputTokens": 300, "outputTokens": 20, "totalTokens": 320}), json!({"step": s1}))?;
    let input = json!({"freeTextPrompt": "Describe it", "kind": "ask_user_question", "requestTaskId": em.task_id, "contextId": em.context_id, "schemaVersion": 1, "toolUseId": "call_ask1", "allowFreeText": true, "inputId": format!("ask-call_ask1-{}", &em.task_id[..8]), "required": true, "options": [{"label": "A website", "id": "website"}, {"label": "An API", "id": "api"}], "prompt": "What do you want to deploy?"});
    if let Some(t) = lock(&em.shared.tasks).get_mut(&em.task_id) {
        t.pending = Some(Pending {
            input: doubles(input.clone()),
            kind: "pipeline-question",
        });
    }
    let e = em.envelope(
        "input_required",
        "step",
        "input_required",
        json!({"kind": "ask_user_question", "prompt": "What do you want to deploy?"}),
        json!({"step": s1, "input": input}),
    );
    em.pipeline(vec![e], Some(input))
}

fn pipeline_slow(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.emit(
        "pipeline_started",
        "pipeline",
        "working",
        json!({"totalSteps": 1}),
        json!({}),
    )?;
    let s1 = step("deploying", 1.0);
    em.emit(
        "step_started",
        "step",
        "working",
        json!({"name": "deploying"}),
        json!({"step": s1}),
    )?;
    let tick = em.shared.cfg.tick;
    for i in 1..=30 {
        em.pause(tick)?;
        em.emit(
            "text_delta",
            "step",
            "working",
            json!({"text": format!("progress {i}. ")}),
            json!({"step": s1}),
        )?;
    }
    em.emit(
        "step_completed",
        "step",
        "working",
        json!({}),
        json!({"step": s1}),
    )?;
    em.emit(
        "pipeline_completed",
        "pipeline",
        "completed",
        json!({"totalSteps": 1}),
        json!({}),
    )
}

fn pipeline_continue(em: &mut Emitter<'_>, answer: &str) -> Result<(), Stop> {
    let s1 = step("intent_parsing", 1.0);
    em.emit(
        "input_received",
        "step",
        "working",
        json!({"kind": "ask_user_question", "selectedLabel": answer}),
        json!({"step": s1}),
    )?;
    em.emit(
        "step_completed",
        "step",
        "working",
        json!({"conclusionField": "intent"}),
        json!({"step": s1}),
    )?;
    let s2 = step("evaluate_candidates", 2.0);
    em.emit(
        "step_started",
        "step",
        "working",
        json!({"name": "evaluate_candidates"}),
        json!({"step": s2}),
    )?;
    let cands: Vec<Value> = (1..=2)
        .map(|i| json!({"id": format!("cand-{i}"), "runId": format!("candidate-cand-{i}-{i}-1"), "index": i as f64, "attempt": 1.0, "name": format!("Option {i}")}))
        .collect();
    for c in &cands {
        em.emit(
            "candidate_started",
            "candidate",
            "working",
            json!({"name": c["name"]}),
            json!({"step": s2, "candidate": c}),
        )?;
    }
    for (i, c) in cands.iter().enumerate() {
        let cs = json!({"id": "design", "runId": format!("{}-design-1", c["runId"].as_str().unwrap_or("")), "attempt": 1.0});
        em.emit(
            "candidate_step_started",
            "candidate_step",
            "working",
            json!({}),
            json!({"step": s2, "candidate": c, "candidateStep": cs}),
        )?;
        em.emit("text_delta", "candidate_step", "working", json!({"text": format!("Candidate {} uses {}. ", i + 1, if i == 0 { "ECS" } else { "serverless" })}), json!({"step": s2, "candidate": c, "candidateStep": cs}))?;
    }
    for c in &cands {
        let cs = json!({"id": "design", "runId": format!("{}-design-1", c["runId"].as_str().unwrap_or("")), "attempt": 1.0});
        em.emit(
            "candidate_step_completed",
            "candidate_step",
            "working",
            json!({}),
            json!({"step": s2, "candidate": c, "candidateStep": cs}),
        )?;
        em.emit(
            "candidate_completed",
            "candidate",
            "working",
            json!({"summary": "ok"}),
            json!({"step": s2, "candidate": c}),
        )?;
    }
    em.emit(
        "stack_progress",
        "step",
        "working",
        json!({"stackName": "demo-stack", "status": "CREATE_IN_PROGRESS", "progress": 50}),
        json!({"step": s2}),
    )?;
    em.emit(
        "step_completed",
        "step",
        "working",
        json!({}),
        json!({"step": s2}),
    )?;
    em.emit(
        "pipeline_completed",
        "pipeline",
        "completed",
        json!({"earlyExit": false, "totalSteps": 3}),
        json!({}),
    )?;
    em.emit(
        "backup_committed",
        "pipeline",
        "completed",
        json!({"committedEventType": "pipeline_completed"}),
        json!({"visibility": "committed"}),
    )
}

fn fault(em: &mut Emitter<'_>, f: Fault) -> Result<(), Stop> {
    em.text("Starting… ")?;
    match f {
        Fault::Garbage => em.raw(b"this is not json"),
        Fault::Die => {
            let _ = em.sock.shutdown(std::net::Shutdown::Both);
            Err(Stop)
        }
        Fault::Huge => {
            let big = "y".repeat(20 * 1024 * 1024);
            em.text(&big)
        }
        Fault::WrongContext => {
            let upd = json!({"statusUpdate": {"taskId": em.task_id, "contextId": "agui-0000000000000000000000000000000000000000", "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": {"iacCodeSessionId": em.session_id}}}});
            em.frame(upd)
        }
        Fault::WrongTask => {
            let upd = json!({"statusUpdate": {"taskId": ids::uuid4(), "contextId": em.context_id, "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": {"iacCodeSessionId": em.session_id}}}});
            em.frame(upd)
        }
        Fault::NoInputId => {
            let tool = "call_noid";
            let mut input = permission_input(em, tool, "ls");
            if let Some(o) = input.as_object_mut() {
                o.remove("inputId");
            }
            let iac = em.with_session(json!({"input": input}));
            em.status("TASK_STATE_INPUT_REQUIRED", None, false, iac)
        }
        Fault::Drip => {
            let frame = serde_json::to_vec(&json!({"result": {"statusUpdate": {"taskId": em.task_id, "contextId": em.context_id, "status": {"state": "TASK_STATE_WORKING", "message": em.msg("message", "drip")}, "metadata": {"iac_code": {"iacCodeSessionId": em.session_id}}}}, "id": em.req_id, "jsonrpc": "2.0"})).unwrap_or_default();
            let mut all = b"data: ".to_vec();
            all.extend(frame);
            all.extend_from_slice(b"\r\n\r\n");
            for b in all {
                em.pause(Duration::from_millis(8))?;
                write_chunk(em.sock, &[b]).map_err(|_| Stop)?;
            }
            em.finish_turn("")
        }
        Fault::Hang | Fault::Http500 | Fault::RpcError => Ok(()),
    }
}

fn resume(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    tid: String,
    message: Value,
) -> io::Result<()> {
    let (context_id, session_id, script, pending, cancel, known_ctx) = {
        let mut tasks = lock(&shared.tasks);
        let Some(t) = tasks.get_mut(&tid) else {
            return respond(
                &mut sock,
                200,
                &rpc_error(
                    &id,
                    -32001,
                    &format!("Task {tid} not found"),
                    "TASK_NOT_FOUND",
                ),
            );
        };
        let known_ctx = message["contextId"]
            .as_str()
            .is_none_or(|c| c == t.context_id);
        (
            t.context_id.clone(),
            t.session_id.clone(),
            t.script,
            t.pending.clone(),
            t.cancel.clone(),
            known_ctx,
        )
    };
    if !known_ctx {
        return respond(
            &mut sock,
            200,
            &rpc_error(
                &id,
                -32602,
                "Context does not match the task.",
                "INVALID_PARAMS",
            ),
        );
    }
    let data = message["parts"]
        .as_array()
        .and_then(|ps| {
            ps.iter()
                .find_map(|p| p.get("data").filter(|d| d.is_object()))
        })
        .cloned();
    let text = user_text(&message);
    let delay = shared.cfg.frame_delay;
    // A duplicate permission answer is acknowledged and nothing runs again.
    if let Some(d) = &data {
        let input_id = d["inputId"].as_str().unwrap_or("").to_string();
        let already = lock(&shared.tasks)
            .get(&tid)
            .is_some_and(|t| t.answered.contains(&input_id));
        if already {
            sock.write_all(SSE_HEAD)?;
            let mut em = Emitter {
                sock: &mut sock,
                shared,
                task_id: tid.clone(),
                context_id,
                session_id,
                req_id: id,
                cancel,
                delay,
            };
            // An acknowledgement only: the task's own state does not change.
            let upd = json!({"statusUpdate": {"taskId": em.task_id, "contextId": em.context_id, "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": {"inputReceived": {"kind": "permission", "inputId": input_id, "toolUseId": d["toolUseId"], "decision": d["decision"], "recovered": true, "duplicate": true}}}}});
            let _ = em.frame(upd);
            let _ = sock.write_all(http::LAST_CHUNK);
            return Ok(());
        }
    }
    let Some(pending) = pending else {
        // Not waiting: guidance into a live pipeline, or a new message on an idle task.
        sock.write_all(SSE_HEAD)?;
        let mut em = Emitter {
            sock: &mut sock,
            shared,
            task_id: tid.clone(),
            context_id,
            session_id,
            req_id: id,
            cancel,
            delay,
        };
        if script == Script::Pipeline {
            let _ = em.emit(
                "interrupt_received",
                "interrupt",
                "working",
                json!({"text": text}),
                json!({}),
            );
            let _ = em.emit(
                "interrupt_classified",
                "interrupt",
                "working",
                json!({"classification": "guidance"}),
                json!({}),
            );
        }
        let _ = sock.write_all(http::LAST_CHUNK);
        return Ok(());
    };
    if pending.kind == "permission" {
        let Some(d) =
            data.filter(|d| d["kind"] == "permission" && d["inputId"] == pending.input["inputId"])
        else {
            return respond(
                &mut sock,
                200,
                &rpc_error(
                    &id,
                    -32602,
                    "Permission response payload fields do not match schemaVersion 1.",
                    "INVALID_PARAMS",
                ),
            );
        };
        let decision = d["decision"].as_str().unwrap_or("deny").to_string();
        if !matches!(decision.as_str(), "allow_once" | "deny") {
            return respond(
                &mut sock,
                200,
                &rpc_error(
                    &id,
                    -32602,
                    "Permission response payload fields do not match schemaVersion 1.",
                    "INVALID_PARAMS",
                ),
            );
        }
        {
            let mut tasks = lock(&shared.tasks);
            if let Some(t) = tasks.get_mut(&tid) {
                t.pending = None;
                t.live = true;
                t.answered
                    .push(d["inputId"].as_str().unwrap_or("").to_string());
            }
        }
        sock.write_all(SSE_HEAD)?;
        let mut em = Emitter {
            sock: &mut sock,
            shared,
            task_id: tid.clone(),
            context_id,
            session_id,
            req_id: id,
            cancel: cancel.clone(),
            delay,
        };
        let tool = d["toolUseId"].as_str().unwrap_or("").to_string();
        let r = (|| -> Result<(), Stop> {
            em.status("TASK_STATE_WORKING", None, false, json!({"inputReceived": {"inputId": d["inputId"], "kind": "permission", "toolUseId": tool}}))?;
            if decision == "allow_once" {
                em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "completed", "result": "Exit code: 0"}}))?;
                em.text("Created the ")?;
                em.text("file.")?;
                em.usage(130.0, 8.0)?;
                em.finish_turn("I'll create it.Created the file.")
            } else {
                em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "failed", "result": "The user explicitly denied this tool operation. Do not retry it."}}))?;
                em.text("Understood, I did not run the command.")?;
                em.usage(130.0, 8.0)?;
                em.finish_turn("I'll create it.Understood, I did not run the command.")
            }
        })();
        if r.is_err() && cancel.load(Ordering::SeqCst) {
            em.cancelled();
        }
        finish_task(shared, &tid);
        let _ = sock.write_all(http::LAST_CHUNK);
        return Ok(());
    }
    // Question answers arrive as text.
    if text.trim().is_empty() {
        return respond(
            &mut sock,
            200,
            &rpc_error(&id, -32602, "An answer is required.", "INVALID_PARAMS"),
        );
    }
    {
        let mut tasks = lock(&shared.tasks);
        if let Some(t) = tasks.get_mut(&tid) {
            t.pending = None;
            t.live = true;
            if let Some(i) = pending.input["inputId"].as_str() {
                t.answered.push(i.to_string());
            }
            t.history.push(json!({"messageId": message["messageId"], "contextId": t.context_id, "taskId": t.id, "role": "ROLE_USER", "parts": message["parts"]}));
        }
    }
    sock.write_all(SSE_HEAD)?;
    let mut em = Emitter {
        sock: &mut sock,
        shared,
        task_id: tid.clone(),
        context_id,
        session_id,
        req_id: id,
        cancel: cancel.clone(),
        delay,
    };
    let r = if pending.kind == "pipeline-question" {
        pipeline_continue(&mut em, &text)
    } else {
        (|| -> Result<(), Stop> {
            let tool = pending.input["toolUseId"]
                .as_str()
                .unwrap_or("")
                .to_string();
            em.meta(json!({"tool": {"name": "ask_user_question", "toolUseId": tool, "status": "completed", "result": text}}))?;
            em.text(&format!("Using {text}. "))?;
            em.text("Done.")?;
            em.usage(90.0, 6.0)?;
            em.finish_turn(&format!("Which region should I use?Using {text}. Done."))
        })()
    };
    if r.is_err() && cancel.load(Ordering::SeqCst) {
        em.cancelled();
    }
    finish_task(shared, &tid);
    let _ = sock.write_all(http::LAST_CHUNK);
    Ok(())
}

fn send_message(
    sock: &mut TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    params: Value,
) -> io::Result<()> {
    // Only sideband permission answers use SendMessage; acknowledge like the kernel does.
    let message = &params["message"];
    let data = message["parts"][0]["data"].clone();
    let tid = message["taskId"].as_str().unwrap_or("");
    let ctx = {
        let mut tasks = lock(&shared.tasks);
        let Some(t) = tasks.get_mut(tid) else {
            return respond(
                sock,
                200,
                &rpc_error(&id, -32001, "Task not found", "TASK_NOT_FOUND"),
            );
        };
        if let Some(i) = data["inputId"].as_str() {
            t.answered.push(i.to_string());
        }
        t.context_id.clone()
    };
    let ack = json!({"result": {"message": {"messageId": format!("permission-ack-{}", ids::hex32()), "contextId": ctx, "taskId": tid, "role": "ROLE_AGENT", "parts": [{"data": {"toolUseId": data["toolUseId"], "accepted": true, "schemaVersion": 1.0, "inputId": data["inputId"], "decision": data["decision"], "kind": "permission_ack"}, "mediaType": "application/json"}]}}, "id": id, "jsonrpc": "2.0"});
    respond(sock, 200, &ack)
}

fn subscribe(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    params: Value,
) -> io::Result<()> {
    let tid = params["id"].as_str().unwrap_or("").to_string();
    let rx: Receiver<Value>;
    let snap = {
        let mut tasks = lock(&shared.tasks);
        let Some(t) = tasks.get_mut(&tid) else {
            return respond(
                &mut sock,
                200,
                &rpc_error(
                    &id,
                    -32001,
                    &format!("Task {tid} not found"),
                    "TASK_NOT_FOUND",
                ),
            );
        };
        if !t.live {
            return respond(
                &mut sock,
                200,
                &rpc_error(
                    &id,
                    -32001,
                    &format!("Task {tid} is not active"),
                    "TASK_NOT_FOUND",
                ),
            );
        }
        let (tx, r) = sync_channel(1024);
        t.subscribers.push(tx);
        rx = r;
        snapshot(t)
    };
    sock.write_all(SSE_HEAD)?;
    let first = json!({"result": {"task": snap}, "id": id, "jsonrpc": "2.0"});
    let mut frame = b"data: ".to_vec();
    frame.extend(serde_json::to_vec(&first).unwrap_or_default());
    frame.extend_from_slice(b"\r\n\r\n");
    write_chunk(&mut sock, &frame)?;
    while let Ok(mut v) = rx.recv() {
        v["id"] = id.clone();
        let state = v["result"]["statusUpdate"]["status"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let mut frame = b"data: ".to_vec();
        frame.extend(serde_json::to_vec(&v).unwrap_or_default());
        frame.extend_from_slice(b"\r\n\r\n");
        if write_chunk(&mut sock, &frame).is_err() {
            return Ok(());
        }
        if matches!(
            state.as_str(),
            "TASK_STATE_INPUT_REQUIRED"
                | "TASK_STATE_COMPLETED"
                | "TASK_STATE_FAILED"
                | "TASK_STATE_CANCELED"
                | "TASK_STATE_REJECTED"
        ) {
            break;
        }
    }
    let _ = sock.write_all(http::LAST_CHUNK);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_micros() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_997_807_849_123);
        assert_eq!(rfc3339_micros(t), "2026-11-30T00:16:47.849123Z");
        assert_eq!(
            rfc3339_micros(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn numbers_become_doubles() {
        let v = doubles(json!({"a": 1, "b": [2, 2.5], "c": "3"}));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"a":1.0,"b":[2.0,2.5],"c":"3"}"#
        );
    }

    #[test]
    fn script_keywords() {
        assert_eq!(choose("hello", None), Script::Plain);
        assert_eq!(choose("please ask a QUESTION", None), Script::Question);
        assert_eq!(choose("hi", Some("pipeline")), Script::Pipeline);
        assert_eq!(choose("flood 42", None), Script::Flood(42));
        assert_eq!(choose("pace 10 500", None), Script::Pace(10, 500));
        assert_eq!(choose("fault-die now", None), Script::Fault(Fault::Die));
    }
}
