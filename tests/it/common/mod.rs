//! Shared helpers for black-box tests: start a server on port 0, talk raw HTTP/1.1 to it.
#![cfg_attr(
    not(feature = "demo"),
    allow(
        dead_code,
        reason = "a build without the demo kernel uses only part of the helpers"
    )
)]

pub mod procs;

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use iac_agui::app::{App, Backend};
use iac_agui::routes::RouteConfig;
use iac_agui::server::{Server, ServerConfig, ShutdownHandle, event_loop};

pub struct TestServer {
    pub addr: SocketAddr,
    pub shutdown: ShutdownHandle,
    join: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start(
        backend: Arc<dyn Backend>,
        auth: Option<&str>,
        cfg: ServerConfig,
        max_jobs: usize,
    ) -> TestServer {
        TestServer::start_with_clock(backend, auth, cfg, max_jobs, Arc::new(SystemClock))
    }

    /// A server whose loop (and application) take the time from `clock`.
    pub fn start_with_clock(
        backend: Arc<dyn Backend>,
        auth: Option<&str>,
        cfg: ServerConfig,
        max_jobs: usize,
        clock: Arc<dyn iac_agui::clock::Clock>,
    ) -> TestServer {
        TestServer::start_tuned(backend, auth, cfg, max_jobs, clock, |app| app)
    }

    /// `start` (no auth, the system clock), the application tuned by `tune`.
    pub fn start_app(
        backend: Arc<dyn Backend>,
        cfg: ServerConfig,
        max_jobs: usize,
        tune: impl FnOnce(App) -> App,
    ) -> TestServer {
        TestServer::start_tuned(backend, None, cfg, max_jobs, Arc::new(SystemClock), tune)
    }

    fn start_tuned(
        backend: Arc<dyn Backend>,
        auth: Option<&str>,
        cfg: ServerConfig,
        max_jobs: usize,
        clock: Arc<dyn iac_agui::clock::Clock>,
        tune: impl FnOnce(App) -> App,
    ) -> TestServer {
        let routes = RouteConfig::new(
            auth.map(str::to_string),
            iac_agui::cli::health_body(iac_agui::config::AguiProtocol::V0_1),
        )
        .with_extras(
            iac_agui::extras::worker_routes().iter().map(|w| w.find),
            iac_agui::extras::series(),
        );
        let app = tune(App::new(routes, backend, max_jobs).with_clock(clock.clone()));
        let server =
            Server::bind("127.0.0.1:0".parse().unwrap(), cfg, Arc::new(app), clock).unwrap();
        let addr = server.local_addr();
        let shutdown = server.shutdown_handle();
        let join = event_loop::spawn(server).unwrap();
        TestServer {
            addr,
            shutdown,
            join: Some(join),
        }
    }

    /// The loop has read what clients wrote so far and looked at its timers now.
    pub fn settle(&self) {
        assert!(
            self.shutdown.settle(Duration::from_secs(10)),
            "the loop did not turn"
        );
    }

    /// The loop has read every byte `client` wrote (and turned since): on Linux the kernel's
    /// socket table shows the bytes acknowledged on the client's side and none left queued on
    /// the server's. A plain `settle` cannot promise that: a loopback write may be handed to
    /// the server's socket a moment later (a softirq deferred under load), after the turns it
    /// waited for. Elsewhere this is a `settle`.
    pub fn settle_read(&self, client: &TcpStream) {
        let (Ok(here), Ok(there)) = (client.local_addr(), client.peer_addr()) else {
            return self.settle();
        };
        let deadline = SystemClock.now() + Duration::from_secs(10);
        loop {
            self.settle();
            match tcp_queues(here.port(), there.port()) {
                None => return,
                Some((0, 0)) => return self.settle(),
                Some(_) => {}
            }
            assert!(
                SystemClock.now() < deadline,
                "the loop did not read what the client wrote"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Stop the server at once (a second signal ends the drain) and wait for its loop.
    pub fn stop(mut self) {
        self.shutdown.shutdown();
        self.shutdown.shutdown();
        if let Some(j) = self.join.take() {
            j.join().unwrap().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.shutdown();
        self.shutdown.shutdown();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }

    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub fn error_message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// Reads HTTP responses off one connection, keeping leftover bytes for the next one.
pub struct Reader {
    pub sock: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    pub fn new(sock: TcpStream) -> Reader {
        Reader {
            sock,
            buf: Vec::new(),
        }
    }

    fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 65536];
        loop {
            match self.sock.read(&mut tmp) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return true;
                }
                // A signal meant for the server under test (it shares this process) can land
                // on this thread: not an error of the read.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => panic!("read failed: {e}"),
            }
        }
    }

    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn exact(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// The head of the next response (status and headers).
    pub fn head(&mut self) -> Option<(u16, Vec<(String, String)>)> {
        let status_line = self.line()?;
        let status: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let l = self.line()?;
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':')?;
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        Some((status, headers))
    }

    /// The next complete response (`head_only` for answers to HEAD).
    pub fn response(&mut self, head_only: bool) -> Option<Resp> {
        let (status, headers) = self.head()?;
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        // A 204 has no body and no length (RFC 9110 §8.6).
        let body = if head_only || status == 100 || status == 204 {
            Vec::new()
        } else if get("transfer-encoding").as_deref() == Some("chunked") {
            let mut body = Vec::new();
            loop {
                let size = usize::from_str_radix(self.line()?.trim(), 16).ok()?;
                if size == 0 {
                    self.line()?;
                    break;
                }
                body.extend(self.exact(size)?);
                self.line()?;
            }
            body
        } else if let Some(n) = get("content-length") {
            self.exact(n.parse().ok()?)?
        } else {
            let mut all = std::mem::take(&mut self.buf);
            self.sock.read_to_end(&mut all).ok()?;
            all
        };
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// The next response: whole, or only its head when it is a stream (chunked), which is
    /// then read with `chunk`.
    pub fn answer_or_stream(&mut self) -> Option<Resp> {
        let (status, headers) = self.head()?;
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let body = match get("content-length") {
            _ if get("transfer-encoding").as_deref() == Some("chunked") => Vec::new(),
            Some(n) => self.exact(n.parse().ok()?)?,
            None => Vec::new(),
        };
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// Read one chunk of a chunked body: `None` at the end of the stream.
    pub fn chunk(&mut self) -> Option<Vec<u8>> {
        let size = usize::from_str_radix(self.line()?.trim(), 16).ok()?;
        if size == 0 {
            self.line()?;
            return None;
        }
        let data = self.exact(size)?;
        self.line()?;
        Some(data)
    }

    /// Read chunks until the session event arrived: the bytes read (whole chunks) and the
    /// event's `value`.
    pub fn until_session(&mut self) -> (Vec<u8>, serde_json::Value) {
        let mut raw = Vec::new();
        loop {
            raw.extend(self.chunk().expect("the stream goes on"));
            if let Some(e) = sse_events(&raw)
                .0
                .into_iter()
                .find(|e| e["name"] == "iac-code.session.v1")
            {
                return (raw, e["value"].clone());
            }
        }
    }

    /// Whether the server has closed the connection already (reads what is there, never
    /// waits): after `TestServer::settle`, a close the loop decided has arrived.
    pub fn closed_now(&mut self) -> bool {
        self.sock.set_nonblocking(true).unwrap();
        let mut tmp = [0u8; 4096];
        let closed = loop {
            match self.sock.read(&mut tmp) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        self.sock.set_nonblocking(false).unwrap();
        closed
    }

    /// True when the server closed the connection (EOF) within the read timeout.
    pub fn closed(&mut self) -> bool {
        let mut tmp = [0u8; 4096];
        loop {
            match self.sock.read(&mut tmp) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// Send raw bytes on a fresh connection and read one response.
pub fn raw(addr: SocketAddr, bytes: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A server may answer (413, 401, …) and close before reading everything: keep going.
    let _ = s.write_all(bytes);
    let head_only = bytes.starts_with(b"HEAD ");
    Reader::new(s).response(head_only).expect("a response")
}

/// Build a request with the usual headers.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\n");
    // A loopback listener answers only loopback Host names (DNS-rebinding rule).
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        r.push_str("Host: 127.0.0.1\r\n");
    }
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        r.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    r.push_str("\r\n");
    let mut out = r.into_bytes();
    out.extend_from_slice(body);
    out
}

pub fn post_json(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    raw(addr, &request("POST", path, &h, body))
}

/// Parse an SSE body into its `data:` JSON payloads (and count heartbeats). An event may
/// carry an `id:` line (iac-agui numbers every event; the reference's captures do not).
pub fn sse_events(body: &[u8]) -> (Vec<serde_json::Value>, usize) {
    let (events, _, heartbeats) = sse_parse(body);
    (events, heartbeats)
}

/// The `id:` of every event, in order (`None` for an event without one).
pub fn sse_ids(body: &[u8]) -> Vec<Option<u64>> {
    sse_parse(body).1
}

/// A complete stream's events are numbered 0..n-1, without gaps.
pub fn check_ids(body: &[u8]) -> Result<(), String> {
    let ids = sse_ids(body);
    for (i, id) in ids.iter().enumerate() {
        if *id != Some(i as u64) {
            return Err(format!("event {i} has id {id:?}: {ids:?}"));
        }
    }
    Ok(())
}

fn sse_parse(body: &[u8]) -> (Vec<serde_json::Value>, Vec<Option<u64>>, usize) {
    let text = String::from_utf8_lossy(body);
    let mut events = Vec::new();
    let mut ids = Vec::new();
    let mut heartbeats = 0;
    for block in text.split("\n\n") {
        if block.is_empty() {
            continue;
        }
        if block == ": heartbeat" {
            heartbeats += 1;
            continue;
        }
        let (id, rest) = match block.strip_prefix("id: ") {
            Some(r) => {
                let (n, rest) = r.split_once('\n').unwrap_or((r, ""));
                (
                    Some(n.parse::<u64>().unwrap_or_else(|_| panic!("bad id {n:?}"))),
                    rest,
                )
            }
            None => (None, block),
        };
        let data = rest
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("unexpected SSE block {block:?}"));
        events.push(serde_json::from_str(data).unwrap());
        ids.push(id);
    }
    (events, ids, heartbeats)
}

/// Wait until `f` holds or the deadline passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = SystemClock.now() + timeout;
    while SystemClock.now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

// The full AG-UI stack in front of the demo kernel (the scripted upstream most suites use);
// a build without the `demo` feature has none.
#[cfg(feature = "demo")]
mod stack;
#[cfg(feature = "demo")]
pub use stack::Stack;

use iac_agui::a2a::client::{A2aClient, A2aConfig};
use iac_agui::adapter::env::SystemEnv;
use iac_agui::adapter::threads::Registry;
use iac_agui::adapter::{AguiBackend, Shared};
use iac_agui::config::AguiProtocol;
use iac_agui::store::files::FileStore;
use std::path::PathBuf;

pub fn types(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_string())
        .collect()
}

pub fn last(events: &[serde_json::Value]) -> &serde_json::Value {
    events.last().unwrap()
}

pub fn session_event(events: &[serde_json::Value]) -> &serde_json::Value {
    events
        .iter()
        .find(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.session.v1")
        .map(|e| &e["value"])
        .expect("a session event")
}

pub fn interrupts(events: &[serde_json::Value]) -> Vec<serde_json::Value> {
    last(events)["outcome"]["interrupts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The AG-UI stream rules: RUN_STARTED first, exactly one terminal event and it is last,
/// balanced TEXT_MESSAGE/REASONING/TOOL_CALL/STEP spans, nothing after the terminal event.
pub fn check_stream(events: &[serde_json::Value]) -> Result<(), String> {
    use std::collections::HashSet;
    let t = |e: &serde_json::Value| e["type"].as_str().unwrap_or("").to_string();
    if events.first().map(t).as_deref() != Some("RUN_STARTED") {
        return Err("the first event is not RUN_STARTED".into());
    }
    let terminals = events
        .iter()
        .filter(|e| matches!(t(e).as_str(), "RUN_FINISHED" | "RUN_ERROR"))
        .count();
    if terminals != 1 {
        return Err(format!("{terminals} terminal events"));
    }
    if !matches!(
        t(events.last().unwrap()).as_str(),
        "RUN_FINISHED" | "RUN_ERROR"
    ) {
        return Err("the terminal event is not last".into());
    }
    // An input request with nothing to answer leaves a console stuck.
    let end = events.last().unwrap();
    if end["outcome"]["type"] == "interrupt"
        && end["outcome"]["interrupts"]
            .as_array()
            .is_none_or(|a| a.is_empty())
    {
        return Err("an interrupt outcome with an empty interrupt list".into());
    }
    let mut text = HashSet::new();
    let mut reasoning = HashSet::new();
    let mut reasoning_msg = HashSet::new();
    let mut tools = HashSet::new();
    let mut steps = HashSet::new();
    for (i, e) in events.iter().enumerate() {
        let id = |k: &str| e[k].as_str().unwrap_or("").to_string();
        let ok = match t(e).as_str() {
            "RUN_STARTED" => i == 0,
            "TEXT_MESSAGE_START" => text.insert(id("messageId")),
            "TEXT_MESSAGE_CONTENT" => text.contains(&id("messageId")),
            "TEXT_MESSAGE_END" => text.remove(&id("messageId")),
            "REASONING_START" => reasoning.insert(id("messageId")),
            "REASONING_MESSAGE_START" => {
                reasoning.contains(&id("messageId")) && reasoning_msg.insert(id("messageId"))
            }
            "REASONING_MESSAGE_CONTENT" => reasoning_msg.contains(&id("messageId")),
            "REASONING_MESSAGE_END" => reasoning_msg.remove(&id("messageId")),
            "REASONING_END" => {
                !reasoning_msg.contains(&id("messageId")) && reasoning.remove(&id("messageId"))
            }
            "TOOL_CALL_START" => tools.insert(id("toolCallId")),
            "TOOL_CALL_ARGS" => tools.contains(&id("toolCallId")),
            "TOOL_CALL_END" => tools.remove(&id("toolCallId")),
            "STEP_STARTED" => steps.insert(id("stepName")),
            "STEP_FINISHED" => steps.remove(&id("stepName")),
            "RUN_FINISHED" | "RUN_ERROR" => {
                if !(text.is_empty()
                    && reasoning.is_empty()
                    && tools.is_empty()
                    && steps.is_empty())
                {
                    return Err(format!(
                        "spans open at the terminal event: text {text:?} reasoning {reasoning:?} tools {tools:?} steps {steps:?}"
                    ));
                }
                true
            }
            _ => true,
        };
        if !ok {
            return Err(format!("event {i} ({}) breaks span rules", t(e)));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ script kernel

/// A kernel that answers requests in a fixed order with canned responses, recording each
/// request as (method or path, body).
pub struct ScriptKernel {
    pub url: String,
    pub requests: Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>,
}

/// One canned answer: what the request must be (JSON-RPC method or path prefix), then the
/// status, content type and body.
pub struct Canned {
    pub expect: String,
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

pub fn sse_body(frames: &[serde_json::Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(b"data: ");
        out.extend(
            serde_json::to_vec(&serde_json::json!({"result": f, "id": "req", "jsonrpc": "2.0"}))
                .unwrap(),
        );
        out.extend_from_slice(b"\r\n\r\n");
    }
    out
}

impl ScriptKernel {
    pub fn start(script: Vec<Canned>) -> ScriptKernel {
        ScriptKernel::start_paced(script.into_iter().map(|c| (c, Duration::ZERO)).collect())
    }

    /// Like `start`, each answer sent only after its delay (a kernel still thinking).
    pub fn start_paced(script: Vec<(Canned, Duration)>) -> ScriptKernel {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let reqs = requests.clone();
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let mut buf = Vec::new();
                let mut tmp = [0u8; 65536];
                let (head, body) = loop {
                    let n = s.read(&mut tmp).unwrap_or(0);
                    if n == 0 {
                        break (String::new(), Vec::new());
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_string();
                        let cl = head
                            .to_lowercase()
                            .lines()
                            .find_map(|l| {
                                l.strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= i + 4 + cl {
                            break (head, buf[i + 4..i + 4 + cl].to_vec());
                        }
                    }
                };
                if head.is_empty() {
                    continue;
                }
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                let json: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                let what = json["method"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or(path.clone());
                reqs.lock().unwrap().push((what.clone(), json));
                let Some((c, delay)) = script.next() else {
                    let _ = s.write_all(
                        b"HTTP/1.1 500 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    continue;
                };
                assert!(
                    what.starts_with(&c.expect),
                    "script expected {} but got {what}",
                    c.expect
                );
                std::thread::sleep(delay);
                let head = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    c.status,
                    c.content_type,
                    c.body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(&c.body);
            }
        });
        ScriptKernel { url, requests }
    }
}

/// The adapter in front of any kernel URL, with its own state directory.
pub fn adapter_for(kernel_url: &str, dir: &std::path::Path) -> TestServer {
    let store = FileStore::open(&dir.join("state")).unwrap();
    let shared = Arc::new(
        Shared::new(
            Registry::files(Arc::new(store)),
            A2aClient::new(A2aConfig::new(kernel_url.to_string(), None)),
            Arc::new(SystemEnv),
            vec![dir.to_path_buf()],
            None,
            AguiProtocol::V0_1,
        )
        .with_worker_routes(iac_agui::extras::worker_routes()),
    );
    TestServer::start(
        Arc::new(AguiBackend { shared }),
        None,
        ServerConfig::default(),
        16,
    )
}

/// The name the harness gives test `test` of the module `module` (its `module_path!()`): its
/// path below the crate, `http_server::slow_reader…`, which `--exact` takes to run it alone.
pub fn test_path(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, m)) => format!("{m}::{test}"),
        None => test.to_string(),
    }
}

/// Run the calling test again, alone, in a process of its own: true in that process, false
/// in the one that ran it (after it passed there). For a test that measures the process as a
/// whole — its counters in `/metrics`, its threads, its file descriptors, its peak memory —
/// which the other tests of this binary would disturb. `module` is the caller's
/// `module_path!()`, `test` its function's name.
pub fn alone_in_a_process(module: &str, test: &str) -> bool {
    let path = test_path(module, test);
    if iac_agui::config::Environ::capture()
        .get("IAC_AGUI_TEST_ALONE")
        .as_deref()
        == Some(path.as_str())
    {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([path.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env("IAC_AGUI_TEST_ALONE", &path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{path} alone failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "{path} did not run alone:\n{text}"
    );
    // What it printed (figures), for `--nocapture`.
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    false
}

/// A fresh, canonical directory under the temp dir, unique to this process and `name`. All
/// the suites share one process: a name taken twice would give two tests one directory (each
/// wiping the other's), so the second call panics.
pub fn tempdir(name: &str) -> PathBuf {
    static TAKEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let fresh = TAKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.to_string());
    assert!(
        fresh,
        "the temporary directory {name:?} is asked for twice in this process: give each use a name of its own"
    );
    let dir = std::env::temp_dir().join(format!("iac-agui-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(dir).unwrap()
}

/// (bytes the client's socket has not had acknowledged, bytes the server's socket holds unread)
/// for the loopback connection between two ports, from `/proc/net/tcp`; `None` when the table
/// cannot be read or lacks either side.
fn tcp_queues(client_port: u16, server_port: u16) -> Option<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let (mut tx, mut rx) = (None, None);
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(queues)) = (f.get(1), f.get(2), f.get(4)) else {
            continue;
        };
        let port = |a: &str| u16::from_str_radix(a.rsplit(':').next()?, 16).ok();
        let (tx_q, rx_q) = queues.split_once(':')?;
        let (tx_q, rx_q) = (
            u64::from_str_radix(tx_q, 16).ok()?,
            u64::from_str_radix(rx_q, 16).ok()?,
        );
        match (port(local), port(remote)) {
            (Some(l), Some(r)) if l == client_port && r == server_port => tx = Some(tx_q),
            (Some(l), Some(r)) if l == server_port && r == client_port => rx = Some(rx_q),
            _ => {}
        }
    }
    Some((tx?, rx?))
}
