//! The single-threaded HTTP/1.1 + SSE server. It knows nothing about AG-UI: a [`Handler`]
//! decides what each request head means and runs the work on its own threads, talking back
//! through a [`job::Outbox`].

pub(crate) mod conn;
pub mod event_loop;
pub mod http;
pub(crate) mod job;
pub(crate) mod out;
pub(crate) mod step;
pub(crate) mod timers;

use std::time::Duration;

use crate::limits;
pub use event_loop::{Server, ShutdownHandle};
use http::{RequestHead, Response};
pub use job::Outbox;

/// Tunables of the loop; defaults come from [`crate::limits`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub write_stall_timeout: Duration,
    pub max_connections: usize,
    pub max_output_bytes: usize,
    pub job_queue_capacity: usize,
    /// How long graceful shutdown waits for open streams to finish.
    pub shutdown_grace: Duration,
    /// Bytes all bodies being read may hold together (`limits::BODY_BUDGET`), and the size
    /// below which a body does not count.
    pub body_budget: usize,
    pub body_budget_exempt: usize,
    /// Bytes all connections may hold for their clients together (`limits::OUTPUT_BUDGET`):
    /// unsent output plus replies queued by workers.
    pub output_budget: usize,
    /// Called for a request the loop answers itself (health, 404, 401, …): method, raw
    /// path, status, body bytes.
    pub access_log: fn(&str, &str, u16, usize),
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_timeout: limits::HEADER_TIMEOUT,
            body_timeout: limits::BODY_TIMEOUT,
            keepalive_timeout: limits::KEEPALIVE_TIMEOUT,
            heartbeat_interval: limits::HEARTBEAT_INTERVAL,
            write_stall_timeout: limits::WRITE_STALL_TIMEOUT,
            max_connections: limits::MAX_CONNECTIONS,
            max_output_bytes: limits::MAX_OUTPUT_BYTES,
            job_queue_capacity: limits::JOB_QUEUE_CAPACITY,
            shutdown_grace: limits::SHUTDOWN_GRACE,
            body_budget: limits::BODY_BUDGET,
            body_budget_exempt: limits::BODY_BUDGET_EXEMPT,
            output_budget: limits::OUTPUT_BUDGET,
            access_log: |_, _, _, _| {},
        }
    }
}

/// What to do with a request once its head is known (`R`: the handler's route type).
pub enum HeadDecision<R> {
    /// Answer now without reading a body (the connection closes if a body was announced).
    Respond(Response),
    /// Read the body (at most `limit` bytes), then hand the request to [`Handler::dispatch`].
    ReadBody {
        limit: usize,
        /// Sent (and the connection closed) when the body exceeds `limit`.
        too_large: Response,
        /// The handler's route, passed back in [`Request::route`].
        route: R,
    },
}

/// A complete request for a worker.
#[derive(Debug)]
pub struct Request<R> {
    pub(crate) head: RequestHead,
    pub(crate) body: Vec<u8>,
    pub(crate) route: R,
    /// The client's address (the audit log's `client`).
    pub(crate) peer: Option<std::net::SocketAddr>,
}

/// The application side of the server.
pub trait Handler: Send + Sync + 'static {
    /// What the head decision tells the worker about a request whose body is read.
    type Route: Send + 'static;

    /// Called on the loop thread; must be cheap and must not block.
    fn on_head(&self, head: &RequestHead) -> HeadDecision<Self::Route>;

    /// Called on the loop thread with a complete request. Start the work elsewhere and keep
    /// `outbox`; or refuse at once with a response. Must not block.
    fn dispatch(&self, request: Request<Self::Route>, outbox: Outbox) -> Result<(), Response>;

    /// Headers added to every answer to this request, whoever writes it (the head decision,
    /// a worker's response or stream, a refusal): the CORS headers of a listed origin.
    fn answer_headers(&self, _head: &RequestHead) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The answer for a connection refused because `max_connections` are open.
    fn over_capacity(&self) -> Response {
        Response::text(503, "Service Unavailable")
    }

    /// The answer for a request whose body would pass the body budget (sent before the body
    /// is read; the connection closes).
    fn over_body_budget(&self, _head: &RequestHead) -> Response {
        Response::text(503, "Service Unavailable")
    }

    /// Whether a request would open a stream (a run, a re-attachment): while the output
    /// budget is spent such requests get [`Handler::over_output_budget`] instead of a worker.
    /// By default every dispatched request counts.
    fn opens_stream(&self, _route: &Self::Route) -> bool {
        true
    }

    /// Who sends a request, when callers are told apart: the output budget and the connection
    /// limit are then shared fairly between them (`budget/fair.rs`, feature `identity`; without
    /// it the ledger has one pool and no seats, whatever this says). `None` (the default): one
    /// pool.
    fn caller(&self, _route: &Self::Route) -> Option<std::sync::Arc<str>> {
        None
    }

    /// The answer for a request refused because the output budget is spent (its body was
    /// read: the connection may stay open).
    fn over_output_budget(&self, _head: &RequestHead) -> Response {
        Response::text(503, "Service Unavailable")
    }

    /// A drain began: refuse new work from now on.
    fn begin_drain(&self) {}

    /// Work is still running on workers (the drain waits for it).
    fn busy(&self) -> bool {
        false
    }
}
