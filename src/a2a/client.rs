//! Blocking A2A 1.0 client (ureq), used only from worker threads.
//!
//! Every call carries `A2A-Version: 1.0` and the bearer token. Each run uses its own
//! [`Session`] (its own ureq agent), so the loop can abort that run's upstream I/O at once
//! with [`Session::aborter`] when the client goes away; other runs are unaffected.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::calls::CallPool;
use super::sse::{SseError, SseReader};
use super::transport::LeanConnector;
use super::types::{Payload, Template};
use crate::budget::Budget;
use crate::ids;
use crate::limits;
use crate::trace::{Kind, Span};

#[derive(Debug, Clone)]
pub struct A2aConfig {
    /// Normalised base URL ending with exactly one `/`.
    pub(crate) base_url: String,
    pub(crate) token: Option<String>,
    pub(crate) connect_timeout: Duration,
    /// An upstream that sends no byte (not even a keep-alive comment) for this long is dead.
    pub idle_timeout: Duration,
    pub max_event_bytes: usize,
}

impl A2aConfig {
    pub fn new(base_url: String, token: Option<String>) -> A2aConfig {
        A2aConfig {
            base_url,
            token: token.filter(|t| !t.is_empty()),
            connect_timeout: limits::A2A_CONNECT_TIMEOUT,
            idle_timeout: limits::A2A_IDLE_TIMEOUT,
            max_event_bytes: limits::MAX_EVENT_BYTES,
        }
    }
}

/// Why an upstream call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum A2aError {
    /// Transport failure, timeout, non-2xx status, unreadable body.
    Unavailable(String),
    /// The kernel answered with something this adapter cannot interpret.
    Protocol(String),
}

impl std::fmt::Display for A2aError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            A2aError::Unavailable(s) => write!(f, "A2A kernel unavailable: {s}"),
            A2aError::Protocol(s) => write!(f, "A2A protocol error: {s}"),
        }
    }
}

impl std::error::Error for A2aError {}

fn unavailable(e: impl std::fmt::Display) -> A2aError {
    A2aError::Unavailable(e.to_string())
}

/// Result of `POST /iac-code/session/ensure-restored`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    Current,
    Restored,
    NotFound,
    /// 409 `SESSION_BACKUP_NOT_READY`, with the kernel's message when it gave one.
    NotReady(Option<String>),
    /// 400 "Invalid session restore request.": bad ids or cwd, or a task the kernel does not
    /// know (a kernel that restarted without its sessions answers this).
    Invalid,
}

/// Accept only `http(s)://` URLs on 127.0.0.1, localhost or ::1 (reference §8.4); return the
/// normalised base URL ending with exactly one `/`.
pub(crate) fn loopback_base_url(raw: &str) -> Result<String, String> {
    const MSG: &str = "The AG-UI adapter may connect only to a loopback A2A HTTP(S) URL.";
    let raw = raw.trim();
    if raw
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    {
        return Err(format!(
            "{MSG} (https is not supported by this build: the kernel is on loopback, use http)"
        ));
    }
    let (authority, tail) = crate::authority::http_url(raw).ok_or(MSG)?;
    if authority.contains('@') {
        return Err(format!("{MSG} (credentials in the URL are not allowed)"));
    }
    let (host, port) = crate::authority::split(authority.as_bytes()).ok_or(MSG)?;
    if port.is_some_and(|p| p.is_empty() || !crate::authority::valid_port(p)) {
        return Err(format!("{MSG} (invalid port)"));
    }
    if !matches!(
        host.to_ascii_lowercase().as_slice(),
        b"127.0.0.1" | b"localhost" | b"[::1]"
    ) {
        return Err(MSG.into());
    }
    if tail.contains(['?', '#']) {
        return Err(format!("{MSG} (no query or fragment)"));
    }
    Ok(format!("{}/", raw.trim_end_matches('/')))
}

/// Shared, immutable client settings and the call threads; cheap to clone.
#[derive(Debug, Clone)]
pub struct A2aClient {
    cfg: Arc<A2aConfig>,
    calls: CallPool,
    /// Every session's agent settings, built once: ureq's builder starts from its defaults,
    /// which read the proxy variables of the environment each time (and no proxy is used).
    agent: Arc<ureq::config::Config>,
}

impl A2aClient {
    pub fn new(cfg: A2aConfig) -> A2aClient {
        A2aClient::with_calls(cfg, CallPool::default())
    }

    fn with_calls(cfg: A2aConfig, calls: CallPool) -> A2aClient {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .no_delay(true)
            .timeout_connect(Some(cfg.connect_timeout))
            .timeout_per_read(Some(cfg.idle_timeout))
            .timeout_per_write(Some(cfg.idle_timeout))
            .user_agent(concat!("iac-agui/", env!("CARGO_PKG_VERSION")))
            .max_response_header_size(limits::A2A_MAX_RESPONSE_HEAD)
            .build();
        A2aClient {
            cfg: Arc::new(cfg),
            calls,
            agent: Arc::new(agent),
        }
    }

    /// The same kernel with short timeouts, for the readiness probe (`KERNEL_PROBE_TIMEOUT`).
    pub fn probe(&self) -> A2aClient {
        let mut cfg = (*self.cfg).clone();
        cfg.connect_timeout = cfg.connect_timeout.min(limits::KERNEL_PROBE_TIMEOUT);
        cfg.idle_timeout = limits::KERNEL_PROBE_TIMEOUT;
        A2aClient::with_calls(cfg, self.calls.clone())
    }

    /// The call threads this client's sessions make their requests on.
    pub(crate) fn calls(&self) -> CallPool {
        self.calls.clone()
    }

    /// A fresh session (its own connection pool) for one run or one call.
    pub fn session(&self) -> Session {
        // The buffers are LeanTransport's (transport.rs), not ureq's fixed ones.
        let agent = ureq::Agent::with_parts(
            (*self.agent).clone(),
            LeanConnector,
            ureq::unversioned::resolver::DefaultResolver::default(),
        );
        Session {
            agent,
            cfg: self.cfg.clone(),
            calls: self.calls.clone(),
            budget: None,
            aborted: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// One run's upstream connection(s). Every request a run makes goes out on a call thread
/// ([`CallPool`]); only the body of an open stream is read on the caller's thread. (The
/// health probe, made by the watcher thread, stays where it is called.)
#[derive(Clone)]
pub struct Session {
    agent: ureq::Agent,
    cfg: Arc<A2aConfig>,
    calls: CallPool,
    /// Each stream's large events wait for memory here (`None`: they do not wait).
    budget: Option<Arc<Budget>>,
    /// Set by the aborter: a stream waiting for memory gives up.
    aborted: Arc<AtomicBool>,
}

/// A stream of JSON-RPC payloads from a streaming method.
///
/// Its frames are read one of four ways, cheapest first, each counted on
/// `iac_agui_upstream_frames_total{read}`: checked against the burst's last text delta
/// (`template`, [`Template`]: 1.55–1.75 µs per event against 2.8–3.35 without it, issue 37),
/// the hand-written text-delta reader (`delta`, `a2a/delta.rs`: one small frame per level
/// where serde's derived read took ~4 KiB of stack), and any other shape as a `Value`, on the
/// worker when it nests at most 6 deep (`shallow`: 9 → 7 calls for a plain run) or on a call
/// thread (`deep`: the worker's stack stays 12 KiB). `tests/it/tuning.rs` and the benchmark's
/// "delta path share" fail when a text stream stops taking the first two.
pub struct EventStream {
    reader: Option<SseReader<Box<dyn Read + Send>>>,
    ready: VecDeque<Payload>,
    /// Where a frame of any other shape than a text delta is read (`None`: on the caller).
    calls: Option<CallPool>,
    /// The burst's last delta frame read in full (see [`Template`]).
    template: Template,
}

impl EventStream {
    /// The next payload; `Ok(None)` when the kernel closed the stream.
    pub fn next_payload(&mut self) -> Result<Option<Payload>, A2aError> {
        if let Some(p) = self.ready.pop_front() {
            return Ok(Some(p));
        }
        if !self.reader.as_ref().is_some_and(SseReader::has_ready) {
            // The read may wait: a waiting stream keeps no template.
            self.template.release();
        }
        let Some(data) = self.next_data()? else {
            return Ok(None);
        };
        match Payload::read_delta(data, &mut self.template) {
            Ok(p) => Ok(Some(p)),
            Err(data) => self.read_other(data).map(Some),
        }
    }

    /// A frame of any other shape than a text delta, read as a `Value`: a recursion as deep
    /// as the frame is nested (up to limits::MAX_JSON_DEPTH levels of ~650 B each). On a
    /// call thread, so that the worker's resident stack stays that of the delta path for the
    /// stream's whole life; such frames are the few per turn (snapshots, tools, states), not
    /// the text.
    ///
    /// A shallow frame (the kernel's task and status frames nest 4 to 6 deep) is read here:
    /// its recursion stays within the pages the delta path already holds, and a hand-off per
    /// such frame was most of a run's call-thread trips (issue 37, docs/performance.md).
    fn read_other(&self, data: Vec<u8>) -> Result<Payload, A2aError> {
        let shallow = crate::scan::json_depth_at_most(&data, limits::SHALLOW_FRAME_DEPTH);
        let read = move || json_of(&data).map(Payload::from_value);
        if shallow {
            crate::metrics::M.frames_shallow.inc();
        } else {
            crate::metrics::M.frames_deep.inc();
        }
        match &self.calls {
            Some(calls) if !shallow => calls.run(read),
            _ => read(),
        }
    }

    /// The next event's JSON as it came, without the typed read (tests that look at whole
    /// frames). Payloads queued by [`EventStream::from_payloads`] are not seen here.
    #[doc(hidden)]
    pub fn next_value(&mut self) -> Result<Option<Value>, A2aError> {
        match self.next_data()? {
            Some(data) => json_of(&data).map(Some),
            None => Ok(None),
        }
    }

    /// The next non-empty `data` of the upstream stream.
    fn next_data(&mut self) -> Result<Option<Vec<u8>>, A2aError> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            match reader.next_event() {
                Ok(Some(ev)) => {
                    if trim_ascii(&ev.data).is_empty() {
                        continue;
                    }
                    return Ok(Some(ev.data));
                }
                Ok(None) => {
                    self.reader = None;
                    return Ok(None);
                }
                Err(SseError::TooLarge) => {
                    return Err(A2aError::Protocol(
                        "an upstream event exceeds the size limit".into(),
                    ));
                }
                Err(SseError::Io(e)) => return Err(unavailable(e)),
            }
        }
    }

    /// The events returned so far are handled: give back the memory a large one held (see
    /// [`crate::budget::ReadHold`]). Before a wait that may be long (a client behind).
    pub(crate) fn settle_gate(&mut self) {
        if let Some(r) = self.reader.as_mut() {
            r.settle_gate();
        }
    }

    /// The next payload is already in hand (no upstream read needed to get it).
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty() || self.reader.as_ref().is_some_and(SseReader::has_ready)
    }

    /// A stream that yields the given payloads (tests, and JSON answers to streaming calls).
    pub(crate) fn from_payloads(p: Vec<Payload>) -> EventStream {
        EventStream {
            reader: None,
            ready: p.into(),
            calls: None,
            template: Template::default(),
        }
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

fn json_of(data: &[u8]) -> Result<Value, A2aError> {
    serde_json::from_slice(trim_ascii(data))
        .map_err(|e| A2aError::Protocol(format!("an upstream event is not JSON: {e}")))
}

impl Session {
    /// Streams opened from now on read large events only once `budget` has room for them.
    pub(crate) fn gate_reads(&mut self, budget: Arc<Budget>) {
        self.budget = Some(budget);
    }

    /// A closure that aborts this session's I/O from another thread (blocked reads return).
    pub fn aborter(&self) -> Box<dyn FnOnce() + Send> {
        let agent = self.agent.clone();
        let aborted = self.aborted.clone();
        let budget = self.budget.clone();
        Box::new(move || {
            aborted.store(true, Ordering::SeqCst);
            // Reads waiting for room look at the flag.
            if let Some(b) = budget {
                b.wake_readers();
            }
            agent.shutdown()
        })
    }

    fn url(&self, path: &str) -> String {
        if path.is_empty() {
            self.cfg.base_url.clone()
        } else {
            format!("{}{}", self.cfg.base_url.trim_end_matches('/'), path)
        }
    }

    fn post(&self, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut r = self
            .agent
            .post(url)
            .header("A2A-Version", "1.0")
            .header("Content-Type", "application/json");
        if let Some(t) = &self.cfg.token {
            r = r.header("Authorization", format!("Bearer {t}"));
        }
        r = with_trace(r);
        r
    }

    fn envelope(method: &str, params: Value) -> Vec<u8> {
        let v = json!({"jsonrpc": "2.0", "id": ids::uuid4(), "method": method, "params": params});
        serde_json::to_vec(&v).unwrap_or_default()
    }

    fn read_json(resp: &mut ureq::http::Response<ureq::Body>) -> Result<Value, A2aError> {
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(limits::MAX_JSON_BODY)
            .read_to_vec()
            .map_err(unavailable)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| A2aError::Unavailable(format!("the kernel answered non-JSON: {e}")))
    }

    /// POST a JSON-RPC envelope and require a 2xx answer.
    fn call(
        &self,
        method: &str,
        params: Value,
    ) -> Result<ureq::http::Response<ureq::Body>, A2aError> {
        let body = Self::envelope(method, params);
        let resp = self
            .post(&self.url(""))
            .send(&body[..])
            .map_err(unavailable)?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(A2aError::Unavailable(format!(
                "{method} answered HTTP {status}"
            )));
        }
        Ok(resp)
    }

    /// `f` with this session, on a call thread, as a client span of the run's trace (the
    /// kernel's `traceparent` names this span).
    fn on_call_thread<T: Send + 'static>(
        &self,
        name: &'static str,
        f: impl FnOnce(&Session) -> Result<T, A2aError> + Send + 'static,
    ) -> Result<T, A2aError> {
        let mut span = Span::child_of_current(format!("a2a {name}"), Kind::Client);
        span.str("rpc.system", "jsonrpc");
        span.str("rpc.method", name);
        let ctx = Some(span.ctx.clone());
        let s = self.clone();
        let r = self
            .calls
            .run(move || crate::trace::with_current(ctx, || f(&s)));
        if let Err(e) = &r {
            span.fail(e.to_string());
        }
        span.end();
        r
    }

    /// A non-streaming JSON-RPC call; returns the whole response object.
    pub(crate) fn rpc(&self, method: &'static str, params: Value) -> Result<Value, A2aError> {
        self.on_call_thread(method, move |s| s.rpc_here(method, params))
    }

    fn rpc_here(&self, method: &str, params: Value) -> Result<Value, A2aError> {
        let mut resp = self.call(method, params)?;
        let v = Self::read_json(&mut resp)?;
        if !v.is_object() {
            return Err(A2aError::Unavailable(format!(
                "{method} answered a non-object"
            )));
        }
        Ok(v)
    }

    /// A streaming JSON-RPC call. An `application/json` answer (an error before the first
    /// event) becomes a one-item stream holding that payload.
    pub(crate) fn stream(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<EventStream, A2aError> {
        self.on_call_thread(method, move |s| s.stream_here(method, params))
    }

    fn stream_here(&self, method: &str, params: Value) -> Result<EventStream, A2aError> {
        let mut resp = self.call(method, params)?;
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if ct.starts_with("application/json") {
            let v = Self::read_json(&mut resp)?;
            return Ok(EventStream::from_payloads(vec![Payload::from_value(v)]));
        }
        if !ct.starts_with("text/event-stream") {
            return Err(A2aError::Unavailable(format!(
                "{method} answered content type {ct:?}"
            )));
        }
        let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
        let mut reader = SseReader::new(reader, self.cfg.max_event_bytes);
        if let Some(budget) = &self.budget {
            reader.set_gate(budget.read_hold(self.aborted.clone()));
        }
        Ok(EventStream {
            reader: Some(reader),
            ready: VecDeque::new(),
            calls: Some(self.calls.clone()),
            template: Template::default(),
        })
    }

    pub fn send_streaming_message(&self, params: Value) -> Result<EventStream, A2aError> {
        self.stream("SendStreamingMessage", params)
    }

    pub fn send_message(&self, params: Value) -> Result<Payload, A2aError> {
        self.rpc("SendMessage", params).map(Payload::from_value)
    }

    pub fn get_task(&self, task_id: &str) -> Result<Payload, A2aError> {
        self.rpc("GetTask", json!({"id": task_id, "historyLength": 100}))
            .map(Payload::from_value)
    }

    pub fn cancel_task(&self, task_id: &str) -> Result<Payload, A2aError> {
        self.rpc("CancelTask", json!({"id": task_id}))
            .map(Payload::from_value)
    }

    pub fn subscribe(&self, task_id: &str) -> Result<EventStream, A2aError> {
        self.stream("SubscribeToTask", json!({"id": task_id}))
    }

    /// `POST /iac-code/session/ensure-restored` (reference §4.4).
    pub fn ensure_restored(
        &self,
        cwd: Option<&str>,
        session_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Result<Restore, A2aError> {
        let mut body = serde_json::Map::new();
        for (k, v) in [("cwd", cwd), ("sessionId", session_id), ("taskId", task_id)] {
            if let Some(v) = v {
                body.insert(k.into(), Value::String(v.into()));
            }
        }
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        self.on_call_thread("ensure-restored", move |s| s.ensure_restored_here(&bytes))
    }

    fn ensure_restored_here(&self, bytes: &[u8]) -> Result<Restore, A2aError> {
        let mut resp = self
            .post(&self.url("/iac-code/session/ensure-restored"))
            .send(bytes)
            .map_err(unavailable)?;
        let status = resp.status().as_u16();
        match status {
            404 => Ok(Restore::NotFound),
            400 => Ok(Restore::Invalid),
            409 => {
                let v = Self::read_json(&mut resp).unwrap_or(Value::Null);
                let err = &v["error"];
                if err["code"] == "SESSION_BACKUP_NOT_READY" && err["retryable"] == true {
                    Ok(Restore::NotReady(
                        err["message"].as_str().map(str::to_string),
                    ))
                } else {
                    Err(A2aError::Unavailable("ensure-restored answered 409".into()))
                }
            }
            200..=299 => {
                let v = Self::read_json(&mut resp)?;
                match v["status"].as_str() {
                    Some("current") => Ok(Restore::Current),
                    Some("restored") => Ok(Restore::Restored),
                    _ => Err(A2aError::Unavailable(
                        "ensure-restored answered an unknown status".into(),
                    )),
                }
            }
            s => Err(A2aError::Unavailable(format!(
                "ensure-restored answered HTTP {s}"
            ))),
        }
    }

    /// `GET /iac-code/pipeline/state` (reference §4.4): `None` on 404.
    pub fn pipeline_state(&self, task_id: &str, after: i64) -> Result<Option<Value>, A2aError> {
        let url = format!(
            "{}?taskId={}&afterSequence={}",
            self.url("/iac-code/pipeline/state"),
            percent_encode(task_id),
            after.max(0)
        );
        self.on_call_thread("pipeline-state", move |s| s.pipeline_state_here(&url))
    }

    fn pipeline_state_here(&self, url: &str) -> Result<Option<Value>, A2aError> {
        let mut r = self.agent.get(url).header("A2A-Version", "1.0");
        if let Some(t) = &self.cfg.token {
            r = r.header("Authorization", format!("Bearer {t}"));
        }
        r = with_trace(r);
        let mut resp = r.call().map_err(unavailable)?;
        match resp.status().as_u16() {
            404 => Ok(None),
            200..=299 => {
                let v = Self::read_json(&mut resp)?;
                if v.is_object() {
                    Ok(Some(v))
                } else {
                    Err(A2aError::Unavailable(
                        "the pipeline state is not an object".into(),
                    ))
                }
            }
            s => Err(A2aError::Unavailable(format!(
                "pipeline state answered HTTP {s}"
            ))),
        }
    }

    /// `GET /health`: the HTTP status.
    pub(crate) fn health(&self) -> Result<u16, A2aError> {
        let mut r = self.agent.get(self.url("/health"));
        if let Some(t) = &self.cfg.token {
            r = r.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = r.call().map_err(unavailable)?;
        let _ = resp
            .body_mut()
            .with_config()
            .limit(limits::A2A_MAX_HEALTH_BODY)
            .read_to_vec();
        Ok(resp.status().as_u16())
    }
}

/// `r` carrying the span in force on this thread (a kernel call's) as the kernel's parent,
/// and the caller's `tracestate` unchanged.
fn with_trace<B>(mut r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
    if let Some((parent, state)) = crate::trace::outgoing() {
        r = r.header("traceparent", parent);
        if let Some(state) = state {
            r = r.header("tracestate", state.to_string());
        }
    }
    r
}

/// Percent-encode everything but RFC 3986 unreserved characters.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_rule() {
        for ok in [
            "http://127.0.0.1:41242",
            "http://127.0.0.1:41242/",
            "http://localhost:1//",
            "HTTP://LOCALHOST:8080/",
            "http://[::1]:8080/",
            "http://127.0.0.1:41242/a2a",
        ] {
            assert!(loopback_base_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            loopback_base_url("http://127.0.0.1:41242/a2a").unwrap(),
            "http://127.0.0.1:41242/a2a/"
        );
        assert_eq!(
            loopback_base_url("http://localhost:1//").unwrap(),
            "http://localhost:1/"
        );
        for bad in [
            "http://127.0.0.2:1/",
            "http://10.0.0.1:1/",
            "http://example.com/",
            "ftp://127.0.0.1/",
            "127.0.0.1:8080",
            "http://user:pw@127.0.0.1:1/",
            "http://localhost.evil.com/",
            "http://127.0.0.1:x/",
            "http://127.0.0.1:1/?q=1",
            "https://127.0.0.1:1/",
        ] {
            assert!(loopback_base_url(bad).is_err(), "{bad}");
        }
    }

    /// The kernel's text delta frame, as SSE.
    fn delta_frame(t: &str) -> String {
        format!(
            "data: {{\"result\":{{\"statusUpdate\":{{\"taskId\":\"t\",\"contextId\":\"c\",\"status\":{{\"state\":\"TASK_STATE_WORKING\",\"message\":{{\"messageId\":\"m\",\"role\":\"ROLE_AGENT\",\"parts\":[{{\"text\":\"{t}\"}}]}}}}}}}},\"id\":\"1\",\"jsonrpc\":\"2.0\"}}\r\n\r\n"
        )
    }

    /// The delta frames of a burst are read against a template; the read that may wait
    /// (here the end of the stream) finds it released.
    #[test]
    fn a_burst_of_deltas_keeps_a_template_and_a_wait_holds_none() {
        let burst = [delta_frame("a"), delta_frame("bb"), delta_frame("ccc")].concat();
        let reader: Box<dyn Read + Send> =
            Box::new(crate::a2a::sse::Pieces(VecDeque::from(
                [burst.into_bytes()],
            )));
        let mut st = EventStream {
            reader: Some(SseReader::new(reader, 1 << 20)),
            ready: VecDeque::new(),
            calls: None,
            template: Template::default(),
        };
        for want in ["a", "bb", "ccc"] {
            let Some(Payload::Event(e)) = st.next_payload().unwrap() else {
                panic!("a delta");
            };
            assert_eq!(e.status_message().unwrap().text, want);
            assert!(st.template.held() > 0, "the burst keeps its template");
        }
        assert!(st.next_payload().unwrap().is_none());
        assert_eq!(
            st.template.held(),
            0,
            "no template across a read that may wait"
        );
    }

    #[test]
    fn a_large_delta_is_not_kept_as_a_template() {
        let big = "x".repeat(1 << 20);
        let burst = [delta_frame("a"), delta_frame(&big), delta_frame("b")].concat();
        let reader: Box<dyn Read + Send> =
            Box::new(crate::a2a::sse::Pieces(VecDeque::from(
                [burst.into_bytes()],
            )));
        let mut st = EventStream {
            reader: Some(SseReader::new(reader, 4 << 20)),
            ready: VecDeque::new(),
            calls: None,
            template: Template::default(),
        };
        for (want, kept) in [("a", true), (big.as_str(), false), ("b", true)] {
            let Some(Payload::Event(e)) = st.next_payload().unwrap() else {
                panic!("a delta");
            };
            assert_eq!(e.status_message().unwrap().text, want);
            let held = st.template.held();
            assert_eq!(held > 0, kept, "template of {} bytes: {held}", want.len());
            assert!(held < 64 * 1024, "{held}");
        }
    }

    #[test]
    fn percent_encoding() {
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
        assert_eq!(percent_encode("task-1_x.y~"), "task-1_x.y~");
    }
}
