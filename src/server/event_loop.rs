//! The event loop: one thread, one `Poll`, one token per connection, one `Waker` for workers.
//! Nothing here blocks: sockets are non-blocking, workers run elsewhere, timers come from
//! the [`TimerSet`] and the injectable [`Clock`].

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};

use super::conn::{BodyRead, Conn, Reservation, State};
use super::http::{self, ChunkedDecoder, Framing, Response};
use super::job::{self, ConnId, Inbox, Reply, StopReason};
use super::out::OutBuf;
use super::step::{self, Step};
use super::timers::{Alarms, Clock, SystemClock, TimerSet};
use super::{Handler, HeadDecision, Request, ServerConfig};
use crate::budget::Ledger;
use crate::limits;

mod deadlines;
mod replies;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;

/// Asks a running [`Server`] to drain and stop (usable from any thread). The first call
/// starts the drain; a second one ends it at once.
#[derive(Clone)]
pub struct ShutdownHandle {
    flag: Arc<AtomicU8>,
    waker: Arc<Waker>,
    turns: Arc<AtomicU64>,
}

impl ShutdownHandle {
    /// Wait until the loop has looked at everything that happened before this call: bytes a
    /// client already wrote, and its timers at the clock's current time (a test moved a
    /// manual clock). False when the loop did not turn within `bound` (it stopped).
    pub fn settle(&self, bound: std::time::Duration) -> bool {
        let start = self.turns.load(Ordering::SeqCst);
        let _ = self.waker.wake();
        let deadline = SystemClock.now() + bound;
        // Two turns: the one under way may have polled before this call.
        while self.turns.load(Ordering::SeqCst) < start + 2 {
            if SystemClock.now() >= deadline {
                return false;
            }
            let _ = self.waker.wake();
            std::thread::yield_now();
        }
        true
    }

    pub fn shutdown(&self) {
        let _ = self
            .flag
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(1))
            });
        let _ = self.waker.wake();
    }

    /// Begin a drain unless one has begun (a second `shutdown` would end it at once).
    pub fn drain(&self) {
        if self
            .flag
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let _ = self.waker.wake();
        }
    }
}

/// The stages of a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// No new work (the handler answers 503); running jobs go on until `until`.
    Grace { until: Instant },
    /// The grace is over (or nothing runs): jobs were told to stop; the loop waits until
    /// every connection flushed and closed, at most until `until`.
    Final { until: Instant },
}

pub struct Server<H: Handler> {
    poll: Poll,
    listener: Option<TcpListener>,
    local_addr: SocketAddr,
    waker: Arc<Waker>,
    inbox: Arc<Inbox>,
    conns: Vec<Option<Conn<H::Route>>>,
    free: Vec<usize>,
    live: usize,
    next_generation: u64,
    timers: TimerSet,
    /// The disconnect graces running: each the cell of a run whose client left, told
    /// `GraceOver` at its deadline.
    alarms: Alarms<Arc<crate::life::Cell>>,
    /// Jobs whose connection closed while their run goes on (detached within its grace, or
    /// adopted): the drain's end must still reach them. Dropped once their worker ends.
    orphans: Vec<Arc<job::JobShared>>,
    clock: Arc<dyn Clock>,
    handler: Arc<H>,
    cfg: ServerConfig,
    shutdown_flag: Arc<AtomicU8>,
    /// Loop iterations so far (`ShutdownHandle::settle`).
    turns: Arc<AtomicU64>,
    drain: Option<Drain>,
    scratch: Vec<Reply>,
    read_buf: Box<[u8]>,
    /// Bytes the bodies being read hold together (`ServerConfig::body_budget`).
    body_bytes: Arc<std::sync::atomic::AtomicUsize>,
    /// Output held for clients (`ServerConfig::output_budget`), each caller's part of it, and
    /// what is published to the workers.
    ledger: Ledger,
}

impl<H: Handler> Server<H> {
    /// Bind and prepare; nothing is accepted until [`Server::run`].
    pub fn bind(
        addr: SocketAddr,
        cfg: ServerConfig,
        handler: Arc<H>,
        clock: Arc<dyn Clock>,
    ) -> io::Result<Server<H>> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(addr)?;
        // Re-listening on a listening socket only resizes its backlog.
        rustix::net::listen(&listener, limits::LISTEN_BACKLOG)?;
        let local_addr = listener.local_addr()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let w = waker.clone();
        let inbox = Inbox::new(Box::new(move || {
            let _ = w.wake();
        }));
        let ledger = Ledger::new(cfg.output_budget, inbox.budget().clone());
        Ok(Server {
            poll,
            listener: Some(listener),
            local_addr,
            waker,
            inbox,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_generation: 1,
            timers: TimerSet::new(),
            alarms: Alarms::default(),
            orphans: Vec::new(),
            clock,
            handler,
            cfg,
            shutdown_flag: Arc::new(AtomicU8::new(0)),
            turns: Arc::default(),
            drain: None,
            scratch: Vec::with_capacity(limits::DRAIN_BATCH),
            read_buf: vec![0u8; limits::READ_CHUNK].into_boxed_slice(),
            body_bytes: Arc::default(),
            ledger,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            flag: self.shutdown_flag.clone(),
            waker: self.waker.clone(),
            turns: self.turns.clone(),
        }
    }

    /// Serve until shut down; returns once every connection is closed or the drain's bounds
    /// are over.
    pub(crate) fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        loop {
            self.turns.fetch_add(1, Ordering::SeqCst);
            if self.advance_drain() {
                break;
            }
            let now = self.clock.now();
            let mut timeout = match (self.timers.timeout(now), self.alarms.timeout(now)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(Drain::Grace { until } | Drain::Final { until }) = self.drain {
                // While draining, also look at the jobs now and then (they end on workers).
                let left = until
                    .saturating_duration_since(now)
                    .min(std::time::Duration::from_millis(100));
                timeout = Some(timeout.map_or(left, |t| t.min(left)));
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(),
                    WAKER => {}
                    Token(t) => {
                        let slot = t - FIRST_CONN;
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.on_readable(slot);
                        }
                        if event.is_writable() || event.is_write_closed() {
                            self.drive(slot);
                        }
                    }
                }
            }
            self.process_ready();
            self.process_timers();
            self.process_alarms();
            self.settle_budget();
        }
        for slot in 0..self.conns.len() {
            if self.conns[slot].is_some() {
                self.close(slot, "shutdown");
            }
        }
        // A run kept for a departed client's grace ends with the server: nobody can re-attach.
        for cell in self.alarms.take_all() {
            cell.send(crate::life::Event::GraceOver);
        }
        Ok(())
    }

    /// Move the drain along; true when the loop should stop.
    fn advance_drain(&mut self) -> bool {
        let signals = self.shutdown_flag.load(Ordering::SeqCst);
        let now = self.clock.now();
        match self.drain {
            None if signals == 0 => false,
            None => {
                log::info!(
                    "draining: no new runs; running ones may finish for {:?}",
                    self.cfg.shutdown_grace
                );
                self.handler.begin_drain();
                self.drain = Some(Drain::Grace {
                    until: now + self.cfg.shutdown_grace,
                });
                self.advance_drain()
            }
            Some(Drain::Grace { until }) => {
                let over = now >= until || signals >= 2;
                if over || !self.handler.busy() {
                    if over && self.handler.busy() {
                        log::info!("drain: the grace is over; stopping the runs still going");
                    }
                    self.begin_shutdown();
                    self.drain = Some(Drain::Final {
                        until: now + limits::SHUTDOWN_FLUSH,
                    });
                }
                false
            }
            Some(Drain::Final { until }) => self.live == 0 || now >= until,
        }
    }

    fn draining(&self) -> bool {
        self.drain.is_some()
    }

    fn begin_shutdown(&mut self) {
        log::info!("shutting down: no longer accepting connections");
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        // Runs whose client left go on without a connection: they stop too.
        for job in std::mem::take(&mut self.orphans) {
            job.stop(StopReason::Shutdown);
        }
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_ref() else {
                continue;
            };
            match conn.job() {
                Some(job) => {
                    job.stop(StopReason::Shutdown);
                }
                None => {
                    if !matches!(conn.state, State::Closing | State::Lingering { .. }) {
                        self.close(slot, "shutdown");
                    }
                }
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            let (mut sock, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: keep serving what we have.
                    log::warn!("accept failed: {e}");
                    return;
                }
            };
            let over = self.live >= self.cfg.max_connections;
            if over {
                crate::metrics::M.unavailable.inc("connections");
                log::warn!("connection refused: {} connections open", self.live);
            }
            // Past the limit a few more get their 503 through a slot of their own, so the write
            // side is shut and their upload drained before the close (a close with unread input
            // resets the connection, which can destroy the answer); past those, closed at once.
            if over && self.live >= self.cfg.max_connections + limits::REFUSALS_LINGERING {
                let mut out = Vec::new();
                self.handler
                    .over_capacity()
                    .closing()
                    .write_to(&mut out, false, false);
                let _ = sock.write(&out);
                let _ = sock.shutdown(std::net::Shutdown::Both);
                continue;
            }
            let _ = sock.set_nodelay(true);
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if let Err(e) = self.poll.registry().register(
                &mut sock,
                Token(slot + FIRST_CONN),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                log::warn!("register failed: {e}");
                self.free.push(slot);
                continue;
            }
            let now = self.clock.now();
            let id = ConnId {
                slot,
                generation: self.next_generation,
            };
            self.next_generation += 1;
            let mut conn = Conn::new(id, sock, now);
            conn.peer = Some(peer);
            conn.read_deadline = Some(now + self.cfg.header_timeout);
            self.conns[slot] = Some(conn);
            self.live += 1;
            crate::metrics::M.connections_open.add(1);
            crate::metrics::M.connections_total.inc();
            if over {
                self.respond(slot, self.handler.over_capacity().closing(), false, false);
                self.flush(slot);
            }
            self.rearm(slot);
        }
    }

    fn conn(&mut self, slot: usize) -> Option<&mut Conn<H::Route>> {
        self.conns.get_mut(slot).and_then(Option::as_mut)
    }

    /// The caller whose connection is at `slot` (the default seat once it is gone).
    fn caller_at(&self, slot: usize) -> crate::budget::Seat {
        self.conns
            .get(slot)
            .and_then(Option::as_ref)
            .map(|c| c.caller)
            .unwrap_or_default()
    }

    fn on_readable(&mut self, slot: usize) {
        loop {
            let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
                return;
            };
            if conn.peer_eof {
                break;
            }
            match conn.sock.read(&mut self.read_buf) {
                Ok(0) => {
                    conn.peer_eof = true;
                    break;
                }
                Ok(n) => {
                    conn.inbuf.extend_from_slice(&self.read_buf[..n]);
                    // Process as we go so a flood is consumed or refused, never buffered whole.
                    self.advance(slot);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(slot, "read error");
                    return;
                }
            }
        }
        self.drive(slot);
    }

    /// Advance the state machine, flush, and re-arm timers.
    fn drive(&mut self, slot: usize) {
        self.advance(slot);
        self.flush(slot);
        if let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) {
            // Every change of a connection's output ends in a drive: count it here, as held
            // in memory (a frame being written stays whole until its last byte is out).
            let now = conn.out.held();
            self.ledger.count(&mut conn.share, conn.caller, now);
            self.rearm(slot);
        }
    }

    /// Carry out the connection's steps until one waits or closes ([`step::step`] decides).
    fn advance(&mut self, slot: usize) {
        let now = self.clock.now();
        let limits = step::Limits {
            watermark: self.cfg.max_output_bytes / 2,
            max_buffered_while_busy: limits::MAX_BUFFERED_WHILE_BUSY,
            header_timeout: self.cfg.header_timeout,
            body_budget: self.cfg.body_budget,
            body_budget_exempt: self.cfg.body_budget_exempt,
            shutting_down: matches!(self.drain, Some(Drain::Final { .. })),
        };
        loop {
            let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
                return;
            };
            let input = step::Input {
                inbuf: &conn.inbuf,
                pending_out: conn.pending_out(),
                peer_eof: conn.peer_eof,
                now,
            };
            match step::step(&mut conn.state, &input, &limits) {
                Step::Wait { used } => {
                    conn.inbuf.drain(..used);
                    return;
                }
                Step::HeadBegun { deadline } => {
                    conn.read_deadline = Some(deadline);
                    return;
                }
                Step::HalfClosed => {
                    conn.read_deadline = None;
                    return;
                }
                Step::Refuse(r) => {
                    self.respond(slot, r, false, false);
                    return;
                }
                Step::OverBodyBudget => {
                    let State::ReadingBody(b) = &conn.state else {
                        return;
                    };
                    let r = self.handler.over_body_budget(&b.head).closing();
                    self.respond(slot, r, false, false);
                    return;
                }
                Step::Head { head, used } => {
                    conn.inbuf.drain(..used);
                    self.on_head(slot, head, now);
                }
                Step::Dispatch { body, used } => {
                    conn.inbuf.drain(..used);
                    // A stream may stay open for hours: the request's bytes are not kept
                    // (a next request on the connection reads into a new buffer).
                    if conn.inbuf.is_empty() {
                        conn.inbuf = Vec::new();
                    }
                    self.dispatch(slot, *body);
                }
                Step::Close(why) => {
                    self.close(slot, why);
                    return;
                }
            }
        }
    }

    fn on_head(&mut self, slot: usize, head: http::RequestHead, now: Instant) {
        let head_only = head.method == "HEAD";
        let answer = self.handler.answer_headers(&head);
        if let Some(conn) = self.conn(slot) {
            conn.answer_headers = answer;
        }
        match self.handler.on_head(&head) {
            HeadDecision::Respond(r) => {
                let keep = head.keep_alive && !head.has_body();
                (self.cfg.access_log)(&head.method, head.raw_path(), r.status, r.body.len());
                self.respond(slot, r, keep, head_only);
            }
            HeadDecision::ReadBody {
                limit,
                too_large,
                route,
            } => {
                // Known now: whose request it is. Past 7/8 of the connection limit a caller
                // over its share of connections is refused, so the others still get in.
                if !self.identify(slot, self.handler.caller(&route)) {
                    crate::metrics::M.unavailable.inc("caller_connections");
                    log::warn!(
                        "connection refused: its caller holds more than its share of {} \
                         connections",
                        self.live
                    );
                    let r = self.handler.over_capacity().closing();
                    (self.cfg.access_log)(&head.method, head.raw_path(), r.status, r.body.len());
                    self.respond(slot, r, false, head_only);
                    return;
                }
                let (remaining, chunked) = match head.framing {
                    Framing::Length(n) if n > limit as u64 => {
                        self.respond(slot, too_large.closing(), false, head_only);
                        return;
                    }
                    Framing::Length(n) => (n, None),
                    Framing::Chunked => (0, Some(ChunkedDecoder::default())),
                };
                // A body that will not fit in what all bodies may hold is refused before a
                // byte of it is read (chunked bodies are counted as they grow).
                let announced = remaining as usize;
                let counted = if announced > self.cfg.body_budget_exempt {
                    announced
                } else {
                    0
                };
                let Some(reserved) =
                    Reservation::take(&self.body_bytes, self.cfg.body_budget, counted)
                else {
                    crate::metrics::M.unavailable.inc("body_budget");
                    let r = self.handler.over_body_budget(&head).closing();
                    (self.cfg.access_log)(&head.method, head.raw_path(), r.status, r.body.len());
                    self.respond(slot, r, false, head_only);
                    return;
                };
                let body_timeout = self.cfg.body_timeout;
                let Some(conn) = self.conn(slot) else { return };
                if head.expect_continue && head.has_body() && conn.inbuf.is_empty() {
                    push_out(conn, now, |o| o.extend(http::CONTINUE_100));
                }
                conn.read_deadline = Some(now + body_timeout);
                conn.state = State::ReadingBody(Box::new(BodyRead {
                    head,
                    route,
                    limit,
                    too_large,
                    body: Vec::new(),
                    remaining,
                    chunked,
                    deadline: now + body_timeout,
                    reserved,
                }));
            }
        }
    }

    fn dispatch(&mut self, slot: usize, b: BodyRead<H::Route>) {
        let keep_alive = b.head.keep_alive;
        let head_only = b.head.method == "HEAD";
        // No new stream until slow readers catch up (a body this far was small or within the
        // body budget; the connection stays open).
        let caller = self.caller_at(slot);
        if let Some(reason) = self
            .handler
            .opens_stream(&b.route)
            .then(|| self.refuses_stream(caller))
            .flatten()
        {
            crate::metrics::M.unavailable.inc(reason);
            let r = self.handler.over_output_budget(&b.head);
            (self.cfg.access_log)(&b.head.method, b.head.raw_path(), r.status, r.body.len());
            self.respond(slot, r, keep_alive, head_only);
            return;
        }
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let (job, outbox) = job::new_job(conn.id, self.cfg.job_queue_capacity, &self.inbox);
        let peer = conn.peer;
        conn.read_deadline = None;
        conn.state = State::Dispatched {
            job,
            keep_alive,
            head_only,
        };
        let request = Request {
            head: b.head,
            body: b.body,
            route: b.route,
            peer,
        };
        if let Err(r) = self.handler.dispatch(request, outbox) {
            if let Some(conn) = self.conn(slot) {
                conn.state = State::ReadingHead { started: false };
            }
            self.respond(slot, r, keep_alive, head_only);
        }
    }

    /// Queue a complete response and move to the next request (or to closing).
    fn respond(&mut self, slot: usize, r: Response, keep_alive: bool, head_only: bool) {
        let now = self.clock.now();
        let keepalive_timeout = self.cfg.keepalive_timeout;
        let draining = self.draining();
        let Some(conn) = self.conn(slot) else { return };
        let keep = keep_alive && !r.close && !draining;
        let mut r = r;
        r.headers.append(&mut conn.answer_headers);
        push_out(conn, now, |o| {
            o.extend_with(|b| r.write_to(b, keep, head_only))
        });
        if keep {
            conn.state = State::ReadingHead { started: false };
            conn.read_deadline = Some(now + keepalive_timeout);
        } else {
            conn.state = State::Closing;
            conn.read_deadline = None;
        }
    }

    fn flush(&mut self, slot: usize) {
        let now = self.clock.now();
        let caller = self.caller_at(slot);
        let limit = self.out_limit(caller);
        let Some(conn) = self.conn(slot) else { return };
        let before = conn.pending_out();
        while !conn.out.is_empty() {
            match conn.out.write_to(&mut conn.sock) {
                Ok(0) => {
                    self.close(slot, "write zero");
                    return;
                }
                Ok(_) => conn.last_progress = now,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(slot, "write error");
                    return;
                }
            }
        }
        conn.out.trim();
        let after = conn.pending_out();
        if let Some(job) = conn.job() {
            job.set_congested(conn.held_out() > limit);
        }
        if matches!(conn.state, State::Closing) && after == 0 {
            if conn.peer_eof {
                self.close(slot, "done");
                return;
            }
            // Half-close and drain (sozu's and hyper's way): the client that is still
            // uploading reads the answer before the connection goes.
            let _ = conn.sock.shutdown(std::net::Shutdown::Write);
            conn.state = State::Lingering {
                left: limits::LINGER_BYTES,
            };
            conn.read_deadline = Some(now + limits::LINGER_TIME);
            return;
        }
        if before > limit && after <= limit {
            if let Some(job) = conn.job() {
                job.renotify();
            }
            // Pipelined requests waiting behind the output can go on now.
            if matches!(conn.state, State::ReadingHead { .. }) && !conn.inbuf.is_empty() {
                self.drive(slot);
            }
        }
    }

    fn close(&mut self, slot: usize, why: &str) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        self.ledger
            .leave(std::mem::take(&mut conn.share), conn.caller);
        if let Some(job) = conn.job() {
            // The stream never reached its end: whoever produces it must learn the client is gone.
            self.client_gone(job);
        }
        log::debug!(
            "conn {}#{} closed in {} ({why})",
            slot,
            conn.id.generation,
            conn.state_name()
        );
        let _ = self.poll.registry().deregister(&mut conn.sock);
        let _ = conn.sock.shutdown(std::net::Shutdown::Both);
        drop(conn);
        self.free.push(slot);
        self.live -= 1;
        crate::metrics::M.connections_open.add(-1);
    }
}

/// Add output with `f`; the write-stall clock starts when output becomes pending.
fn push_out<R>(conn: &mut Conn<R>, now: Instant, f: impl FnOnce(&mut OutBuf)) {
    if conn.out.is_empty() {
        conn.last_progress = now;
    }
    f(&mut conn.out);
}

/// Run a server on its own thread (tests and embedders).
pub fn spawn<H: Handler>(server: Server<H>) -> io::Result<std::thread::JoinHandle<io::Result<()>>> {
    std::thread::Builder::new()
        .name("iac-agui-loop".into())
        .spawn(move || server.run())
}
