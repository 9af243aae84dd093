//! The HTTP application behind the server: the head checks (`routes.rs`), a worker per body
//! route with its capacity, `catch_unwind` and access log, the typed bodies, and the run
//! stream. It never imports the adapter: the adapter plugs in as a [`Backend`] (the routes'
//! work), a [`StreamTap`] (what rides along a stream) and a [`Readiness`] (for `/health`).

pub(crate) mod requests;
mod stream;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use requests::{
    BodyError, CancelRequest, ExtraRequest, RequestOrigin, RunBodyError, RunRequest,
    SubscribeRequest, parse_json,
};
pub use stream::RunStream;
pub(crate) use stream::StreamTap;

use crate::catalog::Msg;
use crate::clock::{Clock, SystemClock};
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::limits;
use crate::logging::Field;
use crate::principal::Caller;
use crate::routes::{self, RouteConfig, Routed, Work};
use crate::server::http::{self, RequestHead, Response};
use crate::server::job::{Outbox, Reply};
use crate::server::{Handler, HeadDecision, Request};
use crate::trace::{Attr, Kind, Span};

/// The AG-UI work behind the routes. Called on a worker thread; may block.
pub trait Backend: Send + Sync + 'static {
    fn run(&self, req: Box<RunRequest>, stream: &mut RunStream<'_>);
    fn cancel(&self, req: CancelRequest) -> Response;
    /// Re-attach to a run (a backend without runs to watch answers 404).
    fn subscribe(&self, _req: SubscribeRequest, stream: &mut RunStream<'_>) {
        stream.reject(Response::text(404, "Not Found"));
    }
    /// A route of an extra's (`routes::ExtraWork`): the thread routes, the usage route (a
    /// backend without them answers 404).
    fn extra(&self, _req: ExtraRequest) -> Response {
        Response::text(404, "Not Found")
    }
}

/// What `/health` reports besides draining: read on the loop thread, so it must be cheap.
pub trait Readiness: Send + Sync {
    /// The kernel answered its last health probe.
    fn kernel_up(&self) -> bool;
    /// The state directory took the last probe's write.
    fn store_up(&self) -> bool;
    /// A kernel call or a state write just failed: probe now, not at the next tick, so that
    /// `/health` says so at once.
    fn kick(&self) {}
}

/// A server with nothing to probe (tests, embedders).
pub(crate) struct AlwaysReady;

impl Readiness for AlwaysReady {
    fn kernel_up(&self) -> bool {
        true
    }
    fn store_up(&self) -> bool {
        true
    }
}

pub struct App {
    routes: RouteConfig,
    backend: Arc<dyn Backend>,
    jobs: Arc<AtomicUsize>,
    max_jobs: usize,
    draining: AtomicBool,
    ready: Arc<dyn Readiness>,
    clock: Arc<dyn Clock>,
    /// The stack each worker thread is given (`limits::WORKER_STACK_BYTES`).
    worker_stack: usize,
}

impl App {
    pub fn new(routes: RouteConfig, backend: Arc<dyn Backend>, max_jobs: usize) -> App {
        App {
            routes,
            backend,
            jobs: Arc::new(AtomicUsize::new(0)),
            max_jobs,
            draining: AtomicBool::new(false),
            ready: Arc::new(AlwaysReady),
            clock: Arc::new(SystemClock),
            worker_stack: limits::WORKER_STACK_BYTES,
        }
    }

    /// Workers get `bytes` of stack instead of `limits::WORKER_STACK_BYTES`: for the test that
    /// a run fits in the stack it must fit in (`tests/it/tuning.rs`), where a frame grown on the
    /// event path overflows instead of only moving a benchmark figure. No setting reaches it.
    #[doc(hidden)]
    pub fn with_worker_stack(mut self, bytes: usize) -> App {
        self.worker_stack = bytes;
        self
    }

    /// `/health` follows this readiness.
    pub fn with_readiness(mut self, ready: Arc<dyn Readiness>) -> App {
        self.ready = ready;
        self
    }

    /// The clock of the access log's durations and of stream timestamps.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> App {
        self.clock = clock;
        self
    }

    /// Jobs currently running (for idle shutdown and tests).
    pub(crate) fn active_jobs(&self) -> Arc<AtomicUsize> {
        self.jobs.clone()
    }

    fn lang(&self, head: &RequestHead) -> Lang {
        routes::header_lang(head, self.routes.default_lang)
    }
}

struct JobSlot(Arc<AtomicUsize>);

impl Drop for JobSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Handler for App {
    type Route = Routed;

    fn on_head(&self, head: &RequestHead) -> HeadDecision<Routed> {
        let live = routes::Live {
            draining: self.draining.load(Ordering::SeqCst),
            kernel_up: self.ready.kernel_up(),
            store_up: self.ready.store_up(),
        };
        routes::decide(head, &self.routes, live)
    }

    fn dispatch(&self, request: Request<Routed>, outbox: Outbox) -> Result<(), Response> {
        let lang = self.lang(&request.head);
        let busy = || ApiError::new(Code::ServerBusy, Msg::ServerBusy).response(lang);
        // A subscriber counts against the connections (the loop's bound), not the runs.
        let limit = match request.route.work {
            Work::Subscribe { .. } => usize::MAX,
            _ => self.max_jobs,
        };
        if self.jobs.fetch_add(1, Ordering::SeqCst) >= limit {
            self.jobs.fetch_sub(1, Ordering::SeqCst);
            log::warn!("job refused: {} jobs running", self.max_jobs);
            return Err(busy());
        }
        let slot = JobSlot(self.jobs.clone());
        let job = Job {
            backend: self.backend.clone(),
            clock: self.clock.clone(),
            lang,
            outbox,
        };
        // Boxed: the thread's first frames (std's and this closure's) hold pointers, not the
        // request, for the stream's whole life (docs/performance.md, issue 26). The request in
        // a box of its own: taken apart and freed before the route's work starts.
        let job = Box::new((slot, job));
        let request = Box::new(request);
        crate::metrics::M.worker_starts.inc();
        let spawned = std::thread::Builder::new()
            .name("iac-agui-job".into())
            .stack_size(self.worker_stack)
            .spawn(move || {
                let (_slot, job) = &*{ job };
                job.work(request);
            });
        spawned.map(|_| ()).map_err(|e| {
            log::error!("cannot start a worker thread: {e}");
            busy()
        })
    }

    fn answer_headers(&self, head: &RequestHead) -> Vec<(&'static str, String)> {
        self.routes.answer_headers(head)
    }

    fn over_capacity(&self) -> Response {
        ApiError::new(Code::ServerBusy, Msg::ServerBusy).response(self.routes.default_lang)
    }

    fn over_body_budget(&self, head: &RequestHead) -> Response {
        ApiError::new(Code::ServerBusy, Msg::ServerBusy)
            .response(self.lang(head))
            .with_header("retry-after", "1".into())
    }

    fn opens_stream(&self, route: &Routed) -> bool {
        // Cancels and thread routes answer with one small body: still served.
        matches!(route.work, Work::Run | Work::Subscribe { .. })
    }

    fn caller(&self, route: &Routed) -> Option<Arc<str>> {
        match &route.caller {
            Caller::Named(name) => Some(name.clone()),
            Caller::Shared => None,
        }
    }

    fn over_output_budget(&self, head: &RequestHead) -> Response {
        ApiError::new(Code::ServerBusy, Msg::ServerBusy)
            .response(self.lang(head))
            .with_header("retry-after", "1".into())
    }

    fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    fn busy(&self) -> bool {
        self.jobs.load(Ordering::SeqCst) > 0
    }
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

/// The server span of a request: the caller's trace when its `traceparent` parses (a header
/// sent twice is not one), else a new one.
fn request_span(request: &Request<Routed>) -> Span {
    let head = &request.head;
    let one = |name: &str| match head.header_count(name) {
        1 => head.header_str(name),
        _ => None,
    };
    // Several tracestate fields are one list (RFC 9110 §5.3).
    let state: Vec<String> = head
        .headers
        .iter()
        .filter(|(n, _)| n == "tracestate")
        .map(|(_, v)| v.iter().map(|&b| b as char).collect())
        .collect();
    let principal = match &request.route.caller {
        Caller::Named(name) => Some(name.clone()),
        Caller::Shared => None,
    };
    let path = http::percent_decode(head.raw_path());
    // The route, not the path: span names stay few (ids are in `url.path`).
    let route = match &request.route.work {
        Work::Run => "/",
        Work::Cancel { .. } => "/extensions/iac-code/v1/executions/{id}/cancel",
        Work::Subscribe { .. } => "/extensions/iac-code/v1/executions/{id}/subscribe",
        Work::Extra(w) => w.route,
    };
    let mut span = Span::incoming(
        one("traceparent").as_deref(),
        (!state.is_empty()).then(|| state.join(",")).as_deref(),
        format!("{} {route}", head.method),
        principal,
    );
    span.str("http.route", route);
    span.str("http.request.method", head.method.as_str());
    span.str("url.path", path);
    span
}

/// The fleet's routing key: a load balancer with thread affinity hashes on it, so it must
/// name the body's thread (AgentCore's `SESSION_ID_MISMATCH` rule); answers echo it.
const THREAD_HEADER: &str = "x-iac-code-thread-id";

/// Who asks and from where (the decisions' record's facts of a request).
type Who = (Caller, RequestOrigin);

/// One body route's work on its worker thread.
struct Job {
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    /// From the request head (Accept-Language, else the server default).
    lang: Lang,
    outbox: Outbox,
}

impl Job {
    fn work(&self, request: Box<Request<Routed>>) {
        let mut span = request_span(&request);
        let ctx = Some(span.ctx.clone());
        let entered = crate::trace::enter(ctx);
        let status = self.traced_work(request);
        drop(entered);
        span.attr("http.response.status_code", Attr::Int(i64::from(status)));
        if status >= 500 {
            span.fail(format!("HTTP {status}"));
        }
        span.end();
    }

    /// The request under its span; returns the answer's status.
    fn traced_work(&self, mut request: Box<Request<Routed>>) -> u16 {
        let started = self.clock.now();
        let routed = request.head.header_str(THREAD_HEADER);
        let last = request.head.header_str("last-event-id");
        let origin = RequestOrigin::of(request.peer, crate::trace::current().as_ref());
        // Taken apart and freed here, keeping what the access log needs: a stream may stay
        // open for hours, and a browser sends a dozen headers. Fields out of the box, not the
        // request onto the stack: these frames stay resident as long as the stream.
        let body = std::mem::take(&mut request.body);
        let caller = std::mem::take(&mut request.route.caller);
        let work = std::mem::replace(&mut request.route.work, Work::Run);
        let method = std::mem::take(&mut request.head.method);
        let path = http::percent_decode(request.head.raw_path());
        drop(request);
        let fields = match work {
            Work::Run => self.run(body, (caller, origin), routed),
            work => self.other(work, body, (caller, origin), last, routed),
        };
        let (status, bytes) = self.outbox.sent();
        let took = self.clock.now().saturating_duration_since(started);
        access_log(&method, &path, status, took, bytes, fields);
        status
    }

    /// Every route but a run's. A frame of its own: inlined, the cancel, subscribe and
    /// extras' routes' parsing sits in the frame under which a run streams for hours — one more
    /// resident 4 KiB page per worker (measured: 16 KiB with it inlined, 12 without; the
    /// shipped build's `make bench` fails above 12; docs/performance.md).
    #[inline(never)]
    fn other(
        &self,
        work: Work,
        body: Vec<u8>,
        (caller, origin): Who,
        last: Option<String>,
        routed: Option<String>,
    ) -> Vec<(&'static str, Field)> {
        match work {
            Work::Cancel { execution_id } => {
                let who = (caller, origin);
                self.cancel(execution_id, &body, who, routed);
                Vec::new()
            }
            Work::Subscribe { execution_id } => {
                self.subscribe(execution_id, &body, last.as_deref(), caller, routed)
            }
            Work::Extra(work) => {
                self.extra(work, body, (caller, origin), routed);
                Vec::new()
            }
            // A run is worked by `traced_work` itself.
            Work::Run => Vec::new(),
        }
    }

    /// Answer without a stream, echoing the routing key.
    fn respond(&self, r: Response, routed: &Option<String>) {
        let r = match routed {
            Some(v) => r.with_header(THREAD_HEADER, v.clone()),
            None => r,
        };
        let _ = self.outbox.send(Reply::Response(r));
    }

    fn stream(
        &self,
        thread_id: String,
        run_id: String,
        lang: Lang,
        routed: Option<String>,
    ) -> RunStream<'_> {
        let mut stream = RunStream::new(&self.outbox, thread_id, run_id, lang, self.clock.clone());
        stream.echo = routed.map(|v| vec![(THREAD_HEADER, v)]).unwrap_or_default();
        stream
    }

    /// Returns the run's access-log fields (threadId, runId, executionId, outcome) once it
    /// streamed.
    fn run(
        &self,
        body: Vec<u8>,
        (caller, origin): Who,
        routed: Option<String>,
    ) -> Vec<(&'static str, Field)> {
        let parsed = RunRequest::parse(&body, self.lang);
        // The raw body (up to the run body limit) is not kept for the run's whole life.
        drop(body);
        let req = match parsed {
            // Boxed: the request is moved through the worker's first frames, which stay
            // resident for the stream's whole life (docs/performance.md).
            Ok(r) => Box::new(RunRequest {
                caller,
                origin,
                ..r
            }),
            Err(e) => {
                let refusal = match e {
                    RunBodyError::Json => {
                        ApiError::new(Code::InvalidJson, Msg::RunInvalidJson).response(self.lang)
                    }
                    RunBodyError::NotObject => {
                        ApiError::new(Code::InvalidInput, Msg::RunNotObject).response(self.lang)
                    }
                    RunBodyError::Id(e, lang) => e.response(lang),
                };
                self.respond(refusal, &routed);
                return Vec::new();
            }
        };
        let mismatch = routed.as_ref().is_some_and(|h| *h != req.thread_id);
        let mut stream = self.stream(
            req.thread_id.clone(),
            req.run_id.clone(),
            req.payload_lang,
            routed,
        );
        if mismatch {
            stream.reject(
                ApiError::new(Code::ThreadIdMismatch, Msg::ThreadIdMismatch)
                    .response(req.payload_lang),
            );
            return Vec::new();
        }
        let mut span = Span::child_of_current("run".into(), Kind::Internal);
        span.str("agui.thread_id", req.thread_id.as_str());
        span.str("agui.run_id", req.run_id.as_str());
        let ctx = Some(span.ctx.clone());
        crate::trace::take_notes();
        let entered = crate::trace::enter(ctx);
        let fields = Self::streamed(stream, "run", |stream| self.backend.run(req, stream));
        drop(entered);
        for (k, v) in &fields {
            match (*k, v) {
                ("outcome", Field::Str(o)) => {
                    if !matches!(
                        o.as_str(),
                        "success" | "interrupt" | "cancelled" | "CANCELLED"
                    ) {
                        span.fail(o.clone());
                    }
                    span.str("agui.outcome", o.as_str());
                }
                ("execution_id", Field::Str(e)) => span.str("iac_code.execution_id", e.as_str()),
                _ => {}
            }
        }
        for (k, v) in crate::trace::take_notes() {
            span.attr(k, v);
        }
        span.end();
        fields
    }

    /// The typed body, or `None` once its refusal is sent: not JSON (`not_json`), a field
    /// (the message names it), or a body naming another thread than the routing key.
    fn checked<T>(
        &self,
        parsed: Result<T, BodyError>,
        not_json: Msg,
        thread_of: fn(&T) -> &str,
        routed: &Option<String>,
    ) -> Option<T> {
        let lang = self.lang;
        let refusal = match parsed {
            Ok(req) if routed.as_deref().is_some_and(|h| h != thread_of(&req)) => {
                ApiError::new(Code::ThreadIdMismatch, Msg::ThreadIdMismatch).response(lang)
            }
            Ok(req) => return Some(req),
            Err(BodyError::Json) => ApiError::new(Code::InvalidJson, not_json).response(lang),
            Err(BodyError::Field(e)) => e.response(lang),
        };
        self.respond(refusal, routed);
        None
    }

    /// Let the backend drive `stream`; after a panic, or a return without a terminal event,
    /// the exchange is ended here. Returns the access-log fields.
    fn streamed(
        mut stream: RunStream<'_>,
        what: &str,
        drive: impl FnOnce(&mut RunStream<'_>),
    ) -> Vec<(&'static str, Field)> {
        let outcome = catch_unwind(AssertUnwindSafe(|| drive(&mut stream)));
        if outcome.is_err() {
            log::error!("{what} worker panicked; the stream ends with RUN_ERROR");
        }
        if outcome.is_err() || !stream.terminal_sent {
            stream.finish_abnormally();
        }
        stream.log_fields()
    }

    fn cancel(&self, execution_id: String, body: &[u8], who: Who, routed: Option<String>) {
        let (caller, origin) = who;
        let parsed = CancelRequest::parse(execution_id, body, self.lang).map(|r| CancelRequest {
            caller,
            origin,
            ..r
        });
        let thread: fn(&CancelRequest) -> &str = |r| &r.thread_id;
        let Some(req) = self.checked(parsed, Msg::CancelInvalidJson, thread, &routed) else {
            return;
        };
        self.answered("cancel", &routed, || self.backend.cancel(req));
    }

    /// Send the backend's answer; a panic on the way is a `500 INTERNAL_ERROR`.
    fn answered(&self, what: &str, routed: &Option<String>, answer: impl FnOnce() -> Response) {
        let r = catch_unwind(AssertUnwindSafe(answer)).unwrap_or_else(|_| {
            log::error!("{what} worker panicked");
            ApiError::new(Code::InternalError, Msg::InternalError).response(self.lang)
        });
        self.respond(r, routed)
    }

    /// An extra's route: its extra reads the query and body, and answers.
    #[allow(
        clippy::boxed_local,
        reason = "unboxed here, not in the frame of every other route (`Job::other`)"
    )]
    #[inline(never)]
    fn extra(
        &self,
        work: Box<crate::routes::ExtraWork>,
        body: Vec<u8>,
        who: Who,
        routed: Option<String>,
    ) {
        let (caller, origin) = who;
        let route = work.route;
        let req = ExtraRequest {
            work: *work,
            body,
            caller,
            origin,
            lang: self.lang,
        };
        self.answered(route, &routed, || self.backend.extra(req));
    }

    /// Returns the subscription's access-log fields once it streamed.
    fn subscribe(
        &self,
        execution_id: String,
        body: &[u8],
        last_event_id: Option<&str>,
        caller: Caller,
        routed: Option<String>,
    ) -> Vec<(&'static str, Field)> {
        let parsed = SubscribeRequest::parse(execution_id, body, last_event_id, self.lang)
            .map(|r| SubscribeRequest { caller, ..r });
        let thread: fn(&SubscribeRequest) -> &str = |r| &r.thread_id;
        let Some(req) = self.checked(parsed, Msg::SubscribeInvalidJson, thread, &routed) else {
            return Vec::new();
        };
        let stream = self.stream(req.thread_id.clone(), req.run_id.clone(), self.lang, routed);
        Self::streamed(stream, "subscribe", |stream| {
            self.backend.subscribe(req, stream)
        })
    }
}
