//! One client connection: its explicit state, its buffers and its armed timers.
//!
//! ```text
//!            ┌──────────────── keep-alive ───────────────┐
//!            ▼                                           │
//!   ReadingHead ──head──► ReadingBody ──body──► Dispatched ──Response──► (written) ─┘
//!        │  └──── no body / immediate answer ──────────►   │
//!        │                                                 └─StartStream─► Streaming ──EndStream──┘
//!        └─ error / timeout / EOF ─► Closing ◄── slow reader, write error, client EOF, shutdown
//!                                      └─ answer out ─► Lingering (half-closed, input dropped,
//!                                                       bounded) ─► closed
//! ```

use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;

use super::http::{ChunkedDecoder, RequestHead, Response};
use super::job::{ConnId, JobShared};
use super::out::OutBuf;
use super::timers::Armed;
use crate::budget::Share;

pub(crate) enum State<R> {
    /// Waiting for a request head. `started` once its first byte arrived (the header
    /// timeout is armed then; while idle between requests the keep-alive timeout applies).
    ReadingHead { started: bool },
    /// Reading a body for a request the handler accepted.
    ReadingBody(Box<BodyRead<R>>),
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
    /// The answer is out and the write side shut: what the client still sends is read and
    /// dropped, at most `left` more bytes, until its EOF or the read deadline, then close.
    /// Closing with unread input sends a reset, which can destroy the answer in flight.
    Lingering { left: usize },
}

pub(crate) struct BodyRead<R> {
    pub(crate) head: RequestHead,
    pub(crate) route: R,
    pub(crate) limit: usize,
    pub(crate) too_large: Response,
    pub(crate) body: Vec<u8>,
    /// Bytes still expected for a Content-Length body.
    pub(crate) remaining: u64,
    /// Present for chunked bodies.
    pub(crate) chunked: Option<ChunkedDecoder>,
    pub(crate) deadline: Instant,
    /// This body's share of the body budget, given back when the read ends in any way.
    pub(crate) reserved: Reservation,
}

/// Bytes taken from the server's body budget; returned on drop.
pub(crate) struct Reservation {
    pool: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
}

impl Reservation {
    /// Take `bytes` from `pool` if the total stays within `budget`.
    pub(crate) fn take(
        pool: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
        budget: usize,
        bytes: usize,
    ) -> Option<Reservation> {
        let mut r = Reservation {
            pool: pool.clone(),
            bytes: 0,
        };
        r.grow_to(budget, bytes).then_some(r)
    }

    /// Hold `total` bytes (more than now) if the pool stays within `budget`.
    pub(crate) fn grow_to(&mut self, budget: usize, total: usize) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let more = total.saturating_sub(self.bytes);
        if more == 0 {
            return true;
        }
        let taken = self.pool.fetch_update(SeqCst, SeqCst, |now| {
            now.checked_add(more).filter(|t| *t <= budget)
        });
        if taken.is_ok() {
            self.bytes += more;
        }
        taken.is_ok()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::SeqCst);
    }
}

pub(crate) struct Conn<R> {
    pub(crate) id: ConnId,
    pub(crate) sock: TcpStream,
    pub(crate) state: State<R>,
    pub(crate) inbuf: Vec<u8>,
    pub(crate) out: OutBuf,
    pub(crate) armed: Armed,
    /// Last time a write made progress (or output became pending).
    pub(crate) last_progress: Instant,
    /// Last event or heartbeat written to a stream.
    pub(crate) last_event: Instant,
    pub(crate) read_deadline: Option<Instant>,
    /// The peer sent EOF.
    pub(crate) peer_eof: bool,
    /// Its unsent output as the output budget counts it (synced after each flush).
    pub(crate) share: Share,
    /// Whose requests it carries, as the output budget counts them (the last one identified;
    /// none while nobody is told apart).
    pub(crate) caller: crate::budget::Seat,
    /// `Handler::answer_headers` of the request being answered, taken by its answer.
    pub(crate) answer_headers: Vec<(&'static str, String)>,
    /// The client's address, for the audit log (set at accept).
    pub(crate) peer: Option<std::net::SocketAddr>,
}

impl<R> Conn<R> {
    pub(crate) fn new(id: ConnId, sock: TcpStream, now: Instant) -> Conn<R> {
        Conn {
            id,
            sock,
            state: State::ReadingHead { started: false },
            inbuf: Vec::new(),
            out: OutBuf::default(),
            armed: Armed::default(),
            last_progress: now,
            last_event: now,
            read_deadline: None,
            peer_eof: false,
            share: Share::default(),
            caller: Default::default(),
            answer_headers: Vec::new(),
            peer: None,
        }
    }

    pub(crate) fn pending_out(&self) -> usize {
        self.out.len()
    }

    /// Output the connection holds for its client: the unsent bytes and all of a frame
    /// being written (it goes only with its last byte). What decides whether its run may read
    /// more upstream: a socket that took most of a large event has not freed any of it.
    pub(crate) fn held_out(&self) -> usize {
        self.out.held()
    }

    /// The job owned by this connection, if any.
    pub(crate) fn job(&self) -> Option<&Arc<JobShared>> {
        match &self.state {
            State::Dispatched { job, .. } | State::Streaming { job, .. } => Some(job),
            _ => None,
        }
    }

    pub(crate) fn state_name(&self) -> &'static str {
        match self.state {
            State::ReadingHead { .. } => "reading-head",
            State::ReadingBody(_) => "reading-body",
            State::Dispatched { .. } => "dispatched",
            State::Streaming { .. } => "streaming",
            State::Closing => "closing",
            State::Lingering { .. } => "lingering",
        }
    }
}
