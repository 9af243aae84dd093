//! One client connection: its explicit state, its buffers and its armed timers.
//!
//! ```text
//!            ┌──────────────── keep-alive ───────────────┐
//!            ▼                                           │
//!   ReadingHead ──head──► ReadingBody ──body──► Dispatched ──Response──► (written) ─┘
//!        │  └──── no body / immediate answer ──────────►   │
//!        │                                                 └─StartStream─► Streaming ──EndStream──┘
//!        └─ error / timeout / EOF ─► Closing ◄── slow reader, write error, client EOF, shutdown
//! ```

use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;

use super::http::{ChunkedDecoder, RequestHead, Response};
use super::job::{ConnId, JobShared};
use super::timers::Armed;

pub enum State {
    /// Waiting for a request head. `since` is when its first byte arrived (`None` while idle
    /// between requests, when the keep-alive timeout applies instead).
    ReadingHead { since: Option<Instant> },
    /// Reading a body for a request the handler accepted.
    ReadingBody(Box<BodyRead>),
    /// A worker has the request; no reply yet.
    Dispatched {
        job: Arc<JobShared>,
        keep_alive: bool,
        head_only: bool,
    },
    /// SSE response in progress.
    Streaming {
        job: Arc<JobShared>,
        keep_alive: bool,
        chunked: bool,
    },
    /// Flush what is left, then close.
    Closing,
}

pub struct BodyRead {
    pub head: RequestHead,
    pub route: u32,
    pub limit: usize,
    pub too_large: Response,
    pub body: Vec<u8>,
    /// Bytes still expected for a Content-Length body.
    pub remaining: u64,
    /// Present for chunked bodies.
    pub chunked: Option<ChunkedDecoder>,
    pub deadline: Instant,
}

pub struct Conn {
    pub id: ConnId,
    pub sock: TcpStream,
    pub state: State,
    pub inbuf: Vec<u8>,
    pub out: Vec<u8>,
    /// Bytes of `out` already written.
    pub out_pos: usize,
    pub armed: Armed,
    /// Last time a write made progress (or output became pending).
    pub last_progress: Instant,
    /// Last event or heartbeat written to a stream.
    pub last_event: Instant,
    pub read_deadline: Option<Instant>,
    /// The peer sent EOF.
    pub peer_eof: bool,
}

impl Conn {
    pub fn new(id: ConnId, sock: TcpStream, now: Instant) -> Conn {
        Conn {
            id,
            sock,
            state: State::ReadingHead { since: None },
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            armed: Armed::default(),
            last_progress: now,
            last_event: now,
            read_deadline: None,
            peer_eof: false,
        }
    }

    pub fn pending_out(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// The job owned by this connection, if any.
    pub fn job(&self) -> Option<&Arc<JobShared>> {
        match &self.state {
            State::Dispatched { job, .. } | State::Streaming { job, .. } => Some(job),
            _ => None,
        }
    }

    pub fn state_name(&self) -> &'static str {
        match self.state {
            State::ReadingHead { .. } => "reading-head",
            State::ReadingBody(_) => "reading-body",
            State::Dispatched { .. } => "dispatched",
            State::Streaming { .. } => "streaming",
            State::Closing => "closing",
        }
    }
}
