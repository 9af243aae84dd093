//! The AG-UI application on top of the generic server: routing decisions on the loop thread,
//! then one worker thread per request (bounded), JSON parsing and the checks of reference
//! §1.4 steps 5–7 and §1.6, and a [`Backend`] that does the AG-UI work.
//!
//! A panic in a backend is contained here: before the stream starts it becomes a 500 JSON
//! error; after it, a `RUN_ERROR` terminal event, so the client always sees one terminal.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::agui::events::Stamped;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::{self, Lang};
use crate::limits;
use crate::logging::Field;
use crate::routes::{self, ROUTE_CANCEL, ROUTE_RUN, Route, RouteConfig};
use crate::server::http::{self, RequestHead, Response};
use crate::server::job::{Outbox, Reply, StopFlag, StopReason, Stopped};
use crate::server::{Handler, HeadDecision, Request};

/// A parsed `POST /` body with the languages decided so far.
pub struct RunRequest {
    pub body: Value,
    /// From Accept-Language (or the server default).
    pub header_lang: Lang,
    /// `forwardedProps.iacCode.preferredLanguage`, else the header language.
    pub payload_lang: Lang,
}

/// A validated cancel request (reference §1.6).
pub struct CancelRequest {
    pub execution_id: String,
    pub thread_id: String,
    pub ros_invocation_id: String,
    pub(crate) lang: Lang,
}

/// The AG-UI work behind the routes. Called on a worker thread; may block.
pub trait Backend: Send + Sync + 'static {
    fn run(&self, req: RunRequest, stream: &mut RunStream<'_>);
    fn cancel(&self, req: CancelRequest) -> Response;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamState {
    NotStarted,
    Open,
    Done,
}

/// The worker's view of one `POST /` exchange: reject it, or start the SSE stream, send
/// events and end it. Tracks enough to finish cleanly if the backend panics.
pub struct RunStream<'a> {
    outbox: &'a Outbox,
    state: StreamState,
    terminal_sent: bool,
    /// The id of the next event (`id:` line).
    next_id: u64,
    /// Headers every answer of this request carries (the routing key echoed).
    echo: Vec<(&'static str, String)>,
    /// For the access log: the SSE stream started (not answered with an error).
    streamed: bool,
    execution_id: Option<String>,
    outcome: Option<String>,
    thread_id: String,
    run_id: String,
    lang: Lang,
}

impl<'a> RunStream<'a> {
    pub(crate) fn new(outbox: &'a Outbox, body: &Value, lang: Lang) -> RunStream<'a> {
        let (thread_id, run_id) = crate::agui::input::run_ids(body);
        RunStream {
            outbox,
            state: StreamState::NotStarted,
            terminal_sent: false,
            next_id: 0,
            echo: Vec::new(),
            streamed: false,
            execution_id: None,
            outcome: None,
            thread_id,
            run_id,
            lang,
        }
    }

    /// Answer with an error response instead of a stream.
    pub fn reject(&mut self, response: Response) {
        if self.state == StreamState::NotStarted {
            self.state = StreamState::Done;
            let mut r = response;
            for (k, v) in &self.echo {
                r = r.with_header(k, v.clone());
            }
            let _ = self.outbox.send(Reply::Response(r));
        }
    }

    /// Send the SSE head.
    pub fn start(&mut self) -> Result<(), Stopped> {
        if self.state != StreamState::NotStarted {
            return Ok(());
        }
        self.state = StreamState::Open;
        self.streamed = true;
        self.outbox.send(Reply::StartStream(self.echo.clone()))
    }

    /// Send one event given as compact JSON, framed here as `id: N\ndata: …\n\n`: every
    /// event of a stream is numbered, `RUN_STARTED` 0, then +1 (heartbeats carry no id).
    pub fn event(&mut self, json: &[u8]) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        let id = self.take_id().to_string();
        let mut data = Vec::with_capacity(json.len() + id.len() + 12);
        data.extend_from_slice(b"id: ");
        data.extend_from_slice(id.as_bytes());
        data.extend_from_slice(b"\ndata: ");
        data.extend_from_slice(json);
        data.extend_from_slice(b"\n\n");
        self.outbox.send(Reply::Event(data))
    }

    /// Send one event, framed with the stream's next id in one allocation.
    pub(crate) fn stamped_event(&mut self, ev: &Stamped) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        let id = self.take_id();
        self.outbox.send(Reply::Event(ev.to_sse(id)))
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Send the terminal event and end the stream. Only the first terminal counts.
    pub fn terminal(&mut self, json: &[u8]) -> Result<(), Stopped> {
        if self.terminal_sent {
            return Ok(());
        }
        let r = self.event(json);
        self.terminal_sent = true;
        self.end();
        r
    }

    fn end(&mut self) {
        if self.state == StreamState::Open {
            self.state = StreamState::Done;
            let _ = self.outbox.send(Reply::EndStream);
        }
    }

    pub fn stop_flag(&self) -> StopFlag {
        self.outbox.stop_flag()
    }

    /// Record the run's execution and outcome for its access-log line.
    pub(crate) fn note_outcome(&mut self, execution_id: &str, outcome: &str) {
        self.execution_id = Some(execution_id.to_string());
        self.outcome = Some(outcome.to_string());
    }

    fn log_fields(&self) -> Vec<(&'static str, Field)> {
        if !self.streamed {
            return Vec::new();
        }
        let mut f = vec![
            ("thread_id", Field::Str(self.thread_id.clone())),
            ("run_id", Field::Str(self.run_id.clone())),
        ];
        if let Some(e) = &self.execution_id {
            f.push(("execution_id", Field::Str(e.clone())));
        }
        let outcome = self.outcome.clone().unwrap_or_else(|| "aborted".into());
        f.push(("outcome", Field::Str(outcome)));
        f
    }

    /// The client went away (EOF, error, stalled output).
    pub(crate) fn client_gone(&self) -> bool {
        self.outbox.stop_reason() == Some(StopReason::ClientGone)
    }

    /// The server is shutting down.
    pub(crate) fn shutting_down(&self) -> bool {
        self.outbox.stop_reason() == Some(StopReason::Shutdown)
    }

    /// Run `hook` when the client goes away or the server shuts down.
    pub(crate) fn on_stop(&self, hook: Box<dyn FnOnce() + Send>) {
        self.outbox.on_stop(hook);
    }

    /// After a panic or a backend that returned without finishing: close the exchange.
    fn finish_abnormally(&mut self) {
        match self.state {
            StreamState::NotStarted => self
                .reject(ApiError::new(Code::InternalError, Msg::InternalError).response(self.lang)),
            StreamState::Open => {
                let ev = run_error_json(
                    Code::A2aUnavailable,
                    Msg::InternalError.text(self.lang),
                    &self.thread_id,
                    &self.run_id,
                );
                let _ = self.terminal(&ev);
            }
            StreamState::Done => {}
        }
    }
}

/// A `RUN_ERROR` with the reference's field order (threadId/runId after code).
pub fn run_error_json(code: Code, message: &str, thread_id: &str, run_id: &str) -> Vec<u8> {
    use crate::adapter::env::{Env, SystemEnv};
    use crate::agui::events::{Event, Stamped};
    Stamped {
        ts: SystemEnv.now_ms(),
        event: Event::RunError {
            message: message.into(),
            code,
            usage: Vec::new(),
            thread_id: thread_id.into(),
            run_id: run_id.into(),
        },
    }
    .to_json()
}

impl ApiError {
    /// The `{"error":{"code","message"}}` response with the code's status.
    pub fn response(self, lang: Lang) -> Response {
        Response::json(self.code.http_status(), self.body(lang))
    }
}

/// Parse a request body the way the project documents (reference §1.4 step 5, REC): UTF-8
/// with an optional BOM, no NaN/Infinity, nesting at most [`limits::MAX_JSON_DEPTH`].
pub fn parse_json(body: &[u8]) -> Option<Value> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    if json_depth_exceeds(body, limits::MAX_JSON_DEPTH) {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// A linear pre-scan so that hostile nesting is refused before any recursive parser runs.
pub(crate) fn json_depth_exceeds(bytes: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

pub struct App {
    routes: RouteConfig,
    backend: Arc<dyn Backend>,
    jobs: Arc<AtomicUsize>,
    max_jobs: usize,
}

impl App {
    pub fn new(routes: RouteConfig, backend: Arc<dyn Backend>, max_jobs: usize) -> App {
        App {
            routes,
            backend,
            jobs: Arc::new(AtomicUsize::new(0)),
            max_jobs,
        }
    }

    /// Jobs currently running (for idle shutdown and tests).
    pub(crate) fn active_jobs(&self) -> Arc<AtomicUsize> {
        self.jobs.clone()
    }
}

struct JobSlot(Arc<AtomicUsize>);

impl Drop for JobSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Handler for App {
    fn on_head(&self, head: &RequestHead) -> HeadDecision {
        routes::decide(head, &self.routes)
    }

    fn dispatch(&self, request: Request, outbox: Outbox) -> Result<(), Response> {
        let lang = routes::header_lang(&request.head);
        let busy = || ApiError::new(Code::ServerBusy, Msg::ServerBusy).response(lang);
        if self.jobs.fetch_add(1, Ordering::SeqCst) >= self.max_jobs {
            self.jobs.fetch_sub(1, Ordering::SeqCst);
            log::warn!("job refused: {} jobs running", self.max_jobs);
            return Err(busy());
        }
        let slot = JobSlot(self.jobs.clone());
        let backend = self.backend.clone();
        let spawned = std::thread::Builder::new()
            .name("iac-agui-job".into())
            .stack_size(limits::WORKER_STACK_BYTES)
            .spawn(move || {
                let _slot = slot;
                work(&*backend, request, lang, &outbox);
            });
        spawned.map(|_| ()).map_err(|e| {
            log::error!("cannot start a worker thread: {e}");
            busy()
        })
    }

    fn over_capacity(&self) -> Response {
        ApiError::new(Code::ServerBusy, Msg::ServerBusy).response(i18n::env_default())
    }
}

fn work(backend: &dyn Backend, request: Request, header_lang: Lang, outbox: &Outbox) {
    let started = std::time::Instant::now();
    let method = request.head.method.clone();
    let path = http::percent_decode(request.head.raw_path());
    let run = match request.route {
        ROUTE_RUN => run_job(backend, request, header_lang, outbox),
        ROUTE_CANCEL => {
            cancel_job(backend, request, header_lang, outbox);
            Vec::new()
        }
        _ => {
            let _ = outbox.send(Reply::Response(Response::text(404, "Not Found")));
            Vec::new()
        }
    };
    let (status, bytes) = outbox.sent();
    access_log(&method, &path, status, started.elapsed(), bytes, run);
}

/// The request's access-log line (`logging::access`).
pub(crate) fn access_log(
    method: &str,
    path: &str,
    status: u16,
    took: std::time::Duration,
    bytes: u64,
    extra: Vec<(&'static str, Field)>,
) {
    let mut f = vec![
        ("method", Field::Str(method.to_string())),
        ("path", Field::Str(path.to_string())),
        ("status", Field::Num(u64::from(status))),
        ("duration_ms", Field::Num(took.as_millis() as u64)),
        ("bytes", Field::Num(bytes)),
    ];
    f.extend(extra);
    crate::logging::access(f);
}

/// The fleet's routing key: a load balancer with thread affinity hashes on it, so it must
/// name the body's thread (AgentCore's `SESSION_ID_MISMATCH` rule); answers echo it.
const THREAD_HEADER: &str = "x-iac-code-thread-id";

fn thread_header(request: &Request) -> Option<String> {
    request.head.header_str(THREAD_HEADER)
}

fn echo(r: Response, routed: &Option<String>) -> Response {
    match routed {
        Some(v) => r.with_header(THREAD_HEADER, v.clone()),
        None => r,
    }
}

/// Returns the run's access-log fields (threadId, runId, executionId, outcome) once it
/// streamed.
fn run_job(
    backend: &dyn Backend,
    request: Request,
    header_lang: Lang,
    outbox: &Outbox,
) -> Vec<(&'static str, Field)> {
    let routed = thread_header(&request);
    let reject = |code, msg: Msg, lang| {
        let r = echo(ApiError::new(code, msg).response(lang), &routed);
        let _ = outbox.send(Reply::Response(r));
    };
    let Some(body) = parse_json(&request.body) else {
        reject(Code::InvalidJson, Msg::RunInvalidJson, header_lang);
        return Vec::new();
    };
    drop(request.body);
    if !body.is_object() {
        reject(Code::InvalidInput, Msg::RunNotObject, header_lang);
        return Vec::new();
    }
    let payload_lang = i18n::payload_language(&body, header_lang);
    let mut stream = RunStream::new(outbox, &body, payload_lang);
    let mismatch = routed.as_ref().is_some_and(|h| *h != stream.thread_id);
    stream.echo = routed.map(|v| vec![(THREAD_HEADER, v)]).unwrap_or_default();
    if mismatch {
        stream.reject(
            ApiError::new(Code::ThreadIdMismatch, Msg::ThreadIdMismatch).response(payload_lang),
        );
        return Vec::new();
    }
    let req = RunRequest {
        body,
        header_lang,
        payload_lang,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| backend.run(req, &mut stream)));
    if outcome.is_err() {
        log::error!("run worker panicked; the run ends with RUN_ERROR");
    }
    if outcome.is_err() || !stream.terminal_sent {
        stream.finish_abnormally();
    }
    stream.log_fields()
}

fn cancel_job(backend: &dyn Backend, request: Request, lang: Lang, outbox: &Outbox) {
    let routed = thread_header(&request);
    let respond = |r: Response| {
        let _ = outbox.send(Reply::Response(echo(r, &routed)));
    };
    let path = http::percent_decode(request.head.raw_path());
    let Some(Route::Cancel { execution_id }) = routes::match_route(&path) else {
        return respond(Response::text(404, "Not Found"));
    };
    let Some(body) = parse_json(&request.body) else {
        return respond(ApiError::new(Code::InvalidJson, Msg::CancelInvalidJson).response(lang));
    };
    let Some(obj) = body.as_object() else {
        return respond(ApiError::new(Code::InvalidInput, Msg::CancelNotObject).response(lang));
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (Some(thread_id), Some(ros)) = (text("threadId"), text("rosInvocationId")) else {
        return respond(ApiError::new(Code::InvalidInput, Msg::CancelIdsRequired).response(lang));
    };
    if routed.as_deref().is_some_and(|h| h != thread_id) {
        return respond(
            ApiError::new(Code::ThreadIdMismatch, Msg::ThreadIdMismatch).response(lang),
        );
    }
    let req = CancelRequest {
        execution_id,
        thread_id: thread_id.to_string(),
        ros_invocation_id: ros.to_string(),
        lang,
    };
    match catch_unwind(AssertUnwindSafe(|| backend.cancel(req))) {
        Ok(r) => respond(r),
        Err(_) => {
            log::error!("cancel worker panicked");
            respond(ApiError::new(Code::InternalError, Msg::InternalError).response(lang))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_parsing_rules() {
        assert!(parse_json(b"\xEF\xBB\xBF{}").is_some());
        assert!(parse_json(b"{bad").is_none());
        assert!(parse_json(b"\xff\xfe").is_none());
        assert!(parse_json(b"[NaN]").is_none());
        assert!(parse_json(br#"{"a":"\ud800"}"#).is_none());
        let deep = "[".repeat(100_000);
        assert!(parse_json(deep.as_bytes()).is_none());
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(parse_json(ok.as_bytes()).is_some());
        let too = format!("{}{}", "[".repeat(101), "]".repeat(101));
        assert!(parse_json(too.as_bytes()).is_none());
        assert!(!json_depth_exceeds(br#"["[[[[","\"[["]"#, 1));
        let v = parse_json(br#"{"a":1,"a":2}"#).unwrap();
        assert_eq!(v["a"], 2);
    }
}
