//! The AG-UI application on top of the generic server: routing decisions on the loop thread,
//! then one worker thread per request (bounded), JSON parsing and the checks of reference
//! §1.4 steps 5–7 and §1.6, and a [`Backend`] that does the AG-UI work.
//!
//! A panic in a backend is contained here: before the stream starts it becomes a 500 JSON
//! error; after it, a `RUN_ERROR` terminal event, so the client always sees one terminal.

use crate::server::job::Frame;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::adapter::replay::RunLog;
use crate::agui::events::Stamped;
use crate::agui::field::{FieldError, Problem};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::{self, Lang};
use crate::limits;
use crate::logging::Field;
use crate::routes::{self, ROUTE_CANCEL, ROUTE_RUN, ROUTE_SUBSCRIBE, Route, RouteConfig};
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

/// A validated subscribe request (upstream's body, or `Last-Event-ID`).
pub struct SubscribeRequest {
    pub execution_id: String,
    pub thread_id: String,
    pub run_id: String,
    pub ros_invocation_id: String,
    /// The last event id the client saw (−1: none); `None`: snapshot.
    pub after_sequence: Option<i64>,
    pub(crate) lang: Lang,
}

/// The AG-UI work behind the routes. Called on a worker thread; may block.
pub trait Backend: Send + Sync + 'static {
    fn run(&self, req: RunRequest, stream: &mut RunStream<'_>);
    fn cancel(&self, req: CancelRequest) -> Response;
    /// Re-attach to a run (a backend without runs to watch answers 404).
    fn subscribe(&self, _req: SubscribeRequest, stream: &mut RunStream<'_>) {
        stream.reject(Response::text(404, "Not Found"));
    }
    /// A drain's grace is over: end every running run (`SERVER_SHUTTING_DOWN`).
    fn stop_all(&self) {}
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
    /// AG-UI 1.0 events only (no threadId/runId on RUN_ERROR): set by the backend.
    strict_v1: bool,
    /// The run's replay log: every event is appended before it is queued for the client.
    log: Option<Arc<RunLog>>,
    /// The producer's disconnect grace and its state (zero: a disconnect stops at once).
    detach: Arc<Detach>,
    started: std::time::Instant,
}

/// A producer whose client left keeps its run going for the disconnect grace: events go to
/// the replay log only, and the stop hooks (abort upstream, "departing") wait until the
/// window ends with nobody re-attached.
struct Detach {
    grace: std::time::Duration,
    state: std::sync::Mutex<DetachState>,
}

#[derive(Default)]
struct DetachState {
    hooks: Vec<Box<dyn FnOnce() + Send>>,
    wrapper_installed: bool,
    detached: bool,
    expired: bool,
}

impl Detach {
    fn new(grace: std::time::Duration) -> Arc<Detach> {
        Arc::new(Detach {
            grace,
            state: std::sync::Mutex::new(DetachState::default()),
        })
    }

    fn detached(&self) -> bool {
        crate::sync::lock(&self.state).detached
    }

    fn expired(&self) -> bool {
        crate::sync::lock(&self.state).expired
    }

    /// Run the held stop hooks now.
    fn fire(&self) {
        let hooks = {
            let mut st = crate::sync::lock(&self.state);
            st.expired = true;
            std::mem::take(&mut st.hooks)
        };
        for h in hooks {
            h();
        }
    }
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
            strict_v1: false,
            log: None,
            detach: Detach::new(std::time::Duration::ZERO),
            started: std::time::Instant::now(),
        }
    }

    /// The backend speaks strict AG-UI 1.0 (the terminal written here after a panic too).
    pub(crate) fn set_strict_v1(&mut self, strict: bool) {
        self.strict_v1 = strict;
    }

    /// Tee every event into `log`; with a non-zero `grace`, a disconnect of this stream's
    /// client detaches the run instead of stopping it (`--disconnect-grace`).
    pub(crate) fn attach_log(&mut self, log: Arc<RunLog>, grace: std::time::Duration) {
        self.log = Some(log);
        self.detach = Detach::new(grace);
    }

    /// Queue one framed event: into the replay log, then to the client unless it left
    /// during a disconnect grace.
    fn send_event(&self, data: Vec<u8>) -> Result<(), Stopped> {
        let data: Frame = data.into();
        if let Some(log) = &self.log {
            log.append(data.clone());
            // The first event after RUN_STARTED: how long the kernel took to say something.
            if self.next_id == 2 {
                crate::metrics::M
                    .first_event
                    .observe(self.started.elapsed());
            }
        }
        crate::metrics::M.events_sent.inc();
        crate::metrics::M.bytes_sent.add(data.len() as u64);
        if self.detach.detached() {
            return if self.client_gone() {
                Err(Stopped)
            } else {
                Ok(())
            };
        }
        match self.outbox.send(Reply::Event(data)) {
            Err(Stopped) if !self.client_gone() && !self.detach.grace.is_zero() => Ok(()),
            r => r,
        }
    }

    /// Send already framed events (a subscriber replaying a log).
    pub(crate) fn raw_event(&mut self, framed: Frame) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        crate::metrics::M.events_sent.inc();
        crate::metrics::M.bytes_sent.add(framed.len() as u64);
        self.outbox.send(Reply::Event(framed))
    }

    /// The replayed log ended (its terminal event was among the raw events).
    pub(crate) fn end_raw(&mut self) {
        self.terminal_sent = true;
        self.end();
    }

    /// Give up the stream without a terminal event: the loop closes the connection.
    pub(crate) fn abandon(&mut self) {
        self.terminal_sent = true;
        self.state = StreamState::Done;
    }

    /// The run ends without its client (gone, grace over): the log still gets one terminal
    /// event, so subscribers see how it ended.
    pub(crate) fn log_terminal(&mut self, json: &[u8]) {
        if let Some(log) = self.log.clone() {
            if !log.ended() && !self.terminal_sent {
                let id = self.take_id();
                log.append(crate::agui::events::frame(id, json).into());
            }
            log.end();
        }
        self.terminal_sent = true;
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

    /// Hold events without waking the loop until the next upstream read (`false` flushes):
    /// a burst read in one upstream chunk costs the loop one wake.
    pub(crate) fn hold(&self, on: bool) {
        self.outbox.hold(on);
    }

    /// Before an upstream read: flush held events and wait while the client is behind (see
    /// `Outbox::wait_writable`); a detached run only flushes.
    pub(crate) fn before_read(&self) {
        if self.detach.detached() {
            self.outbox.flush();
        } else {
            self.outbox.wait_writable();
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
        let id = self.take_id();
        self.send_event(crate::agui::events::frame(id, json))
    }

    /// Send one event, framed with the stream's next id in one allocation.
    pub(crate) fn stamped_event(&mut self, ev: &Stamped) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        let id = self.take_id();
        self.send_event(ev.to_sse(id))
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
        if let Some(log) = &self.log {
            log.end();
            crate::metrics::M
                .run_duration
                .observe(self.started.elapsed());
        }
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

    /// The client went away (EOF, error, stalled output) and, with a disconnect grace, the
    /// window ended with nobody re-attached.
    pub(crate) fn client_gone(&self) -> bool {
        self.outbox.stop_reason() == Some(StopReason::ClientGone)
            && (self.detach.grace.is_zero() || self.detach.expired())
    }

    /// The server is shutting down.
    pub(crate) fn shutting_down(&self) -> bool {
        self.outbox.stop_reason() == Some(StopReason::Shutdown)
    }

    /// Run `hook` when the client goes away (after the disconnect grace, if any) or the
    /// server shuts down.
    pub(crate) fn on_stop(&self, hook: Box<dyn FnOnce() + Send>) {
        if self.detach.grace.is_zero() {
            return self.outbox.on_stop(hook);
        }
        let install = {
            let mut st = crate::sync::lock(&self.detach.state);
            if st.expired {
                drop(st);
                return hook();
            }
            st.hooks.push(hook);
            !std::mem::replace(&mut st.wrapper_installed, true)
        };
        if install {
            let detach = self.detach.clone();
            // Weak: the job holds this hook, and a strong flag would keep the job (and the
            // log captured here) alive forever.
            let flag = self.outbox.weak_stop_flag();
            let log = self.log.clone();
            let run_id = self.run_id.clone();
            self.outbox.on_stop(Box::new(move || {
                if flag.reason() != Some(StopReason::ClientGone) {
                    return detach.fire();
                }
                crate::sync::lock(&detach.state).detached = true;
                log::info!(
                    "run {run_id}: detached, its client left; grace {:?}",
                    detach.grace
                );
                let spawned = std::thread::Builder::new()
                    .name("iac-agui-grace".into())
                    .stack_size(limits::SMALL_WORKER_STACK_BYTES)
                    .spawn({
                        let detach = detach.clone();
                        move || grace_window(&detach, log.as_deref())
                    });
                if spawned.is_err() {
                    detach.fire();
                }
            }));
        }
    }

    /// After a panic or a backend that returned without finishing: close the exchange.
    fn finish_abnormally(&mut self) {
        match self.state {
            StreamState::NotStarted => self
                .reject(ApiError::new(Code::InternalError, Msg::InternalError).response(self.lang)),
            StreamState::Open => {
                let _ = self.error_terminal(Code::A2aUnavailable, Msg::InternalError);
            }
            StreamState::Done => {}
        }
    }

    /// End the stream with `RUN_ERROR code` in this stream's dialect (no threadId/runId in
    /// strict 1.0).
    pub(crate) fn error_terminal(&mut self, code: Code, msg: Msg) -> Result<(), Stopped> {
        let ev = run_error_json(
            code,
            msg.text(self.lang),
            &self.thread_id,
            &self.run_id,
            !self.strict_v1,
        );
        self.terminal(&ev)
    }
}

impl Drop for RunStream<'_> {
    /// Subscribers of the replay log never wait on a run whose worker is gone.
    fn drop(&mut self) {
        if let Some(log) = &self.log {
            log.end();
        }
    }
}

/// The disconnect grace of a detached run: at its end, a run nobody re-attached to is stopped
/// exactly as a disconnect without grace.
fn grace_window(detach: &Detach, log: Option<&RunLog>) {
    let end = std::time::Instant::now() + detach.grace;
    loop {
        let now = std::time::Instant::now();
        if log.is_some_and(RunLog::ended) {
            return;
        }
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(limits::SUBSCRIBER_POLL));
    }
    if log.is_some_and(RunLog::adopted) {
        log::info!("run detached: re-attached within the grace; it goes on");
        return;
    }
    log::info!("run detached: nobody re-attached within the grace; stopping it");
    detach.fire();
}

/// A `RUN_ERROR` with the reference's field order (threadId/runId after code).
/// `ids`: write threadId/runId (AG-UI 0.1; the 1.0 event has none).
pub fn run_error_json(
    code: Code,
    message: &str,
    thread_id: &str,
    run_id: &str,
    ids: bool,
) -> Vec<u8> {
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
            ids,
        },
    }
    .to_json()
}

impl ApiError {
    /// The `{"error":{"code","message"}}` response with the code's status.
    pub fn response(self, lang: Lang) -> Response {
        self.response_with(lang, serde_json::Map::new())
    }

    /// `400 INVALID_INPUT` naming the field that is wrong, in `lang`.
    pub fn invalid_field(e: &crate::agui::field::FieldError, lang: Lang) -> Response {
        let body = serde_json::json!({"error": {"code": Code::InvalidInput.as_str(), "message": e.message(lang)}});
        Response::json(
            Code::InvalidInput.http_status(),
            serde_json::to_vec(&body).unwrap_or_default(),
        )
    }

    /// The response with `extra` keys in the error object after `code` and `message`.
    pub fn response_with(self, lang: Lang, extra: serde_json::Map<String, Value>) -> Response {
        let status = self.code.http_status();
        if status == 503 {
            crate::metrics::M.unavailable.inc(self.code.as_str());
        }
        if extra.is_empty() {
            return Response::json(status, self.body(lang));
        }
        let mut error = serde_json::Map::new();
        error.insert("code".into(), self.code.as_str().into());
        error.insert("message".into(), self.msg.text(lang).into());
        error.extend(extra);
        let body = serde_json::to_vec(&serde_json::json!({ "error": error })).unwrap_or_default();
        Response::json(status, body)
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
    draining: std::sync::atomic::AtomicBool,
    ready: Arc<crate::kernel::watch::Readiness>,
}

impl App {
    pub fn new(routes: RouteConfig, backend: Arc<dyn Backend>, max_jobs: usize) -> App {
        App {
            routes,
            backend,
            jobs: Arc::new(AtomicUsize::new(0)),
            max_jobs,
            draining: std::sync::atomic::AtomicBool::new(false),
            ready: Arc::default(),
        }
    }

    /// `/health` follows this kernel readiness.
    pub fn with_readiness(mut self, ready: Arc<crate::kernel::watch::Readiness>) -> App {
        self.ready = ready;
        self
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
        let live = routes::Live {
            draining: self.draining.load(Ordering::SeqCst),
            kernel_up: self.ready.kernel_up(),
            store_up: self.ready.store_up(),
        };
        routes::decide(head, &self.routes, live)
    }

    fn dispatch(&self, request: Request, outbox: Outbox) -> Result<(), Response> {
        let lang = routes::header_lang(&request.head);
        let busy = || ApiError::new(Code::ServerBusy, Msg::ServerBusy).response(lang);
        // A subscriber counts against the connections (the loop's bound), not the runs.
        let limit = if request.route == ROUTE_SUBSCRIBE {
            usize::MAX
        } else {
            self.max_jobs
        };
        if self.jobs.fetch_add(1, Ordering::SeqCst) >= limit {
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

    fn over_body_budget(&self, head: &RequestHead) -> Response {
        ApiError::new(Code::ServerBusy, Msg::ServerBusy)
            .response(routes::header_lang(head))
            .with_header("retry-after", "1".into())
    }

    fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    fn busy(&self) -> bool {
        self.jobs.load(Ordering::SeqCst) > 0
    }

    fn stop_all(&self) {
        self.backend.stop_all();
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
        ROUTE_SUBSCRIBE => subscribe_job(backend, request, header_lang, outbox),
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
        let e = FieldError::new("", Problem::Type("object"));
        return respond(ApiError::invalid_field(&e, lang));
    };
    let ids = identity(obj, "threadId").and_then(|t| Ok((t, identity(obj, "rosInvocationId")?)));
    let (thread_id, ros) = match ids {
        Ok(x) => x,
        Err(BodyError::Field(e)) => return respond(ApiError::invalid_field(&e, lang)),
        Err(BodyError::Json) => {
            return respond(
                ApiError::new(Code::InvalidJson, Msg::CancelInvalidJson).response(lang),
            );
        }
    };
    let (thread_id, ros) = (thread_id.as_str(), ros.as_str());
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

/// Why a subscribe or cancel body is refused: not JSON (400 `INVALID_JSON`), or a field
/// (400 `INVALID_INPUT`, the message names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    Json,
    Field(FieldError),
}

/// The identity strings of a subscribe or cancel body: present, strings, not empty.
fn identity(obj: &serde_json::Map<String, Value>, key: &str) -> Result<String, BodyError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            Err(BodyError::Field(FieldError::new(key, Problem::Required)))
        }
        Some(_) => Err(BodyError::Field(FieldError::new(
            key,
            Problem::Type("string"),
        ))),
    }
}

/// Upstream's subscribe body: exactly `threadId`, `runId`, `rosInvocationId` (non-empty
/// strings) and an optional integer `afterSequence` ≥ −1; or `Last-Event-ID: N` (the body
/// wins when both are given).
pub fn parse_subscribe_body(
    body: &[u8],
    last_event_id: Option<&str>,
) -> Result<(String, String, String, Option<i64>), BodyError> {
    let v = parse_json(body).ok_or(BodyError::Json)?;
    let obj = v.as_object().ok_or(BodyError::Field(FieldError::new(
        "",
        Problem::Type("object"),
    )))?;
    const KEYS: [&str; 4] = ["threadId", "runId", "rosInvocationId", "afterSequence"];
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(BodyError::Field(FieldError::new(k, Problem::Unknown)));
    }
    let (thread, run, ros) = (
        identity(obj, "threadId")?,
        identity(obj, "runId")?,
        identity(obj, "rosInvocationId")?,
    );
    let sequence = |n: Option<i64>, field: &str| match n {
        Some(n) if n >= -1 => Ok(Some(n)),
        _ => Err(BodyError::Field(FieldError::new(field, Problem::Value))),
    };
    let after = match obj.get("afterSequence") {
        None => match last_event_id.map(str::trim) {
            None => None,
            Some(h) => sequence(h.parse::<i64>().ok(), "Last-Event-ID")?,
        },
        Some(v) => sequence(v.as_i64(), "afterSequence")?,
    };
    Ok((thread, run, ros, after))
}

/// Returns the subscription's access-log fields once it streamed.
fn subscribe_job(
    backend: &dyn Backend,
    request: Request,
    lang: Lang,
    outbox: &Outbox,
) -> Vec<(&'static str, Field)> {
    let routed = thread_header(&request);
    let respond = |r: Response| {
        let _ = outbox.send(Reply::Response(echo(r, &routed)));
    };
    let path = http::percent_decode(request.head.raw_path());
    let Some(Route::Subscribe { execution_id }) = routes::match_route(&path) else {
        respond(Response::text(404, "Not Found"));
        return Vec::new();
    };
    let last = request.head.header_str("last-event-id");
    let (thread_id, run_id, ros, after) = match parse_subscribe_body(&request.body, last.as_deref())
    {
        Ok(x) => x,
        Err(BodyError::Json) => {
            respond(ApiError::new(Code::InvalidJson, Msg::SubscribeInvalidJson).response(lang));
            return Vec::new();
        }
        Err(BodyError::Field(e)) => {
            respond(ApiError::invalid_field(&e, lang));
            return Vec::new();
        }
    };
    if routed.as_deref().is_some_and(|h| h != thread_id) {
        respond(ApiError::new(Code::ThreadIdMismatch, Msg::ThreadIdMismatch).response(lang));
        return Vec::new();
    }
    let mut stream = RunStream::new(outbox, &Value::Null, lang);
    stream.thread_id = thread_id.clone();
    stream.run_id = run_id.clone();
    stream.echo = routed.map(|v| vec![(THREAD_HEADER, v)]).unwrap_or_default();
    let req = SubscribeRequest {
        execution_id,
        thread_id,
        run_id,
        ros_invocation_id: ros,
        after_sequence: after,
        lang,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| backend.subscribe(req, &mut stream)));
    if outcome.is_err() {
        log::error!("subscribe worker panicked; the stream ends with RUN_ERROR");
    }
    if outcome.is_err() || !stream.terminal_sent {
        stream.finish_abnormally();
    }
    stream.log_fields()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_body_rules() {
        let ok = br#"{"threadId":"t","runId":"r","rosInvocationId":"x"}"#;
        assert_eq!(
            parse_subscribe_body(ok, None),
            Ok(("t".into(), "r".into(), "x".into(), None))
        );
        assert_eq!(parse_subscribe_body(ok, Some(" 7 ")).unwrap().3, Some(7));
        let with = br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":-1}"#;
        assert_eq!(parse_subscribe_body(with, Some("9")).unwrap().3, Some(-1));
        for bad in [
            &br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":-2}"#[..],
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":1.5}"#,
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":"1"}"#,
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","extra":1}"#,
            br#"{"threadId":"","runId":"r","rosInvocationId":"x"}"#,
            br#"{"threadId":"t","runId":"r"}"#,
            br#"[]"#,
        ] {
            assert!(
                matches!(parse_subscribe_body(bad, None), Err(BodyError::Field(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_subscribe_body(b"{", None), Err(BodyError::Json));
        let field = |b: &[u8], h| match parse_subscribe_body(b, h) {
            Err(BodyError::Field(e)) => e.path,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(ok, Some("x")), "Last-Event-ID");
        // Every refusal names its field, in every language.
        let cases: [(&[u8], &str); 7] = [
            (
                br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":-2}"#,
                "afterSequence",
            ),
            (
                br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":"1"}"#,
                "afterSequence",
            ),
            (
                br#"{"threadId":"t","runId":"r","rosInvocationId":"x","extra":1}"#,
                "extra",
            ),
            (
                br#"{"threadId":"","runId":"r","rosInvocationId":"x"}"#,
                "threadId",
            ),
            (
                br#"{"threadId":"t","runId":5,"rosInvocationId":"x"}"#,
                "runId",
            ),
            (br#"{"threadId":"t","runId":"r"}"#, "rosInvocationId"),
            (br#"[]"#, ""),
        ];
        for (b, want) in cases {
            let Err(BodyError::Field(e)) = parse_subscribe_body(b, None) else {
                panic!("{}", String::from_utf8_lossy(b));
            };
            assert_eq!(e.path, want);
            for lang in Lang::ALL {
                let shown = if want.is_empty() { "body" } else { want };
                assert!(e.message(lang).contains(&format!("`{shown}`")), "{lang:?}");
            }
        }
    }

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
