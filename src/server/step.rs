//! A connection's next step, decided from its state and its input alone (sozu's and hyper's
//! shape: the protocol decides, the loop performs). No socket, no handler, no clock: the
//! decision can be read, and tested, row by row.
//!
//! The step changes the connection's [`State`] itself (a body's decoder, a head begun, the
//! move to `Closing`, a linger's count), since those are the parse state; everything else it
//! hands back: which input is spent, the read deadline, what to answer, what to dispatch,
//! when to close.

use std::time::{Duration, Instant};

use super::conn::{BodyRead, State};
use super::http::{self, ChunkError, RequestHead, Response};

/// What the step reads besides the state.
pub(crate) struct Input<'a> {
    /// What the client sent and nobody consumed yet.
    pub(crate) inbuf: &'a [u8],
    /// Output not yet written to the client.
    pub(crate) pending_out: usize,
    /// The client sent its EOF.
    pub(crate) peer_eof: bool,
    pub(crate) now: Instant,
}

/// The server's bounds a step is decided against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Past this much pending output, a pipelined next request waits until the client reads.
    pub(crate) watermark: usize,
    /// Input a connection may hold while it cannot take it (busy, or behind on output).
    pub(crate) max_buffered_while_busy: usize,
    pub(crate) header_timeout: Duration,
    /// What all bodies being read may hold together, and the size under which a body is not
    /// counted (`ServerConfig::body_budget`, `body_budget_exempt`).
    pub(crate) body_budget: usize,
    pub(crate) body_budget_exempt: usize,
    /// The drain's last stage: no further request is read.
    pub(crate) shutting_down: bool,
}

/// What the loop does next for a connection.
pub(crate) enum Step<R> {
    /// Nothing until more input, the client's EOF or a deadline. The first `used` bytes of
    /// the input are spent (taken into a body, or dropped while closing).
    Wait { used: usize },
    /// A head began (the state says so now): the header timeout runs until `deadline`.
    HeadBegun { deadline: Instant },
    /// The client half-closed between requests: the answers queued go out, then the close.
    /// The state is `Closing`; nothing more is read, so no read deadline either.
    HalfClosed,
    /// Answer this, then close (a malformed head or chunked body, a body over its limit).
    Refuse(Response),
    /// A chunked body outgrew the body budget: the handler's answer for the head of the body
    /// still in the state, then close.
    OverBodyBudget,
    /// A request head, the first `used` bytes of the input; step again after it is handled.
    Head { head: RequestHead, used: usize },
    /// A body read to its end, its last bytes the first `used` of the input; the state waits
    /// for the next head. Step again after the dispatch.
    Dispatch { body: Box<BodyRead<R>>, used: usize },
    /// Close now.
    Close(&'static str),
}

/// Decide the next step of a connection in `state` given `input`.
pub(crate) fn step<R>(state: &mut State<R>, input: &Input<'_>, limits: &Limits) -> Step<R> {
    let inbuf = input.inbuf;
    match state {
        State::ReadingHead { .. } if limits.shutting_down => {
            *state = State::Closing;
            step(state, input, limits)
        }
        State::ReadingHead { started } => {
            if input.pending_out > limits.watermark {
                // A pipelining client that does not read its answers waits here.
                if inbuf.len() > limits.max_buffered_while_busy {
                    return Step::Close("pipelined flood");
                }
                return Step::Wait { used: 0 };
            }
            if inbuf.is_empty() {
                if input.peer_eof {
                    // A half-closed client still gets the answers already queued.
                    *state = State::Closing;
                    return Step::HalfClosed;
                }
                return Step::Wait { used: 0 };
            }
            match http::parse_head(inbuf) {
                Err(e) => {
                    Step::Refuse(Response::text(e.status(), http::reason(e.status())).closing())
                }
                Ok(None) if input.peer_eof => Step::Close("eof in head"),
                Ok(None) if !*started => {
                    *started = true;
                    Step::HeadBegun {
                        deadline: input.now + limits.header_timeout,
                    }
                }
                Ok(None) => Step::Wait { used: 0 },
                Ok(Some((head, used))) => Step::Head { head, used },
            }
        }
        State::ReadingBody(b) => {
            let (used, complete) = match &mut b.chunked {
                None => {
                    let take = (inbuf.len() as u64).min(b.remaining) as usize;
                    b.body.extend_from_slice(&inbuf[..take]);
                    b.remaining -= take as u64;
                    (take, b.remaining == 0)
                }
                Some(dec) => match dec.decode(inbuf, &mut b.body, b.limit) {
                    Ok(used) => {
                        // A chunked body is counted against the budget as it grows.
                        if b.body.len() > limits.body_budget_exempt
                            && !b.reserved.grow_to(limits.body_budget, b.body.len())
                        {
                            return Step::OverBodyBudget;
                        }
                        (used, dec.is_done())
                    }
                    Err(ChunkError::TooLarge) => {
                        return Step::Refuse(b.too_large.clone().closing());
                    }
                    Err(ChunkError::Malformed) => {
                        return Step::Refuse(Response::text(400, "Bad Request").closing());
                    }
                },
            };
            if !complete {
                if input.peer_eof {
                    return Step::Close("eof in body");
                }
                return Step::Wait { used };
            }
            match std::mem::replace(state, State::ReadingHead { started: false }) {
                State::ReadingBody(body) => Step::Dispatch { body, used },
                // Unreachable: the state was matched as a body above.
                other => {
                    *state = other;
                    Step::Close("lost body")
                }
            }
        }
        State::Dispatched { .. } | State::Streaming { .. } => {
            if input.peer_eof {
                // uvicorn treats a half-close as a disconnect; so does the reference.
                Step::Close("client gone")
            } else if inbuf.len() > limits.max_buffered_while_busy {
                Step::Close("input flood while busy")
            } else {
                Step::Wait { used: 0 }
            }
        }
        State::Closing => Step::Wait { used: inbuf.len() },
        State::Lingering { left } => {
            *left = left.saturating_sub(inbuf.len());
            if *left == 0 || input.peer_eof {
                Step::Close("done")
            } else {
                Step::Wait { used: inbuf.len() }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::server::conn::Reservation;
    use crate::server::http::{ChunkedDecoder, Framing};
    use crate::server::job::{self, ConnId, Inbox};
    use crate::server::timers::{Clock, ManualClock};

    const BASE: Limits = Limits {
        watermark: 100,
        max_buffered_while_busy: 64,
        header_timeout: Duration::from_secs(10),
        body_budget: 1 << 20,
        body_budget_exempt: 0,
        shutting_down: false,
    };
    const SHUTTING_DOWN: Limits = Limits {
        shutting_down: true,
        ..BASE
    };
    /// Bodies over 2 bytes do not fit in what all bodies may hold.
    const TIGHT: Limits = Limits {
        body_budget: 2,
        ..BASE
    };
    /// Bodies up to 16 bytes are not counted.
    const TIGHT_EXEMPT: Limits = Limits {
        body_budget: 2,
        body_budget_exempt: 16,
        ..BASE
    };

    /// name, state, input, pending output, EOF, limits => step, state after.
    type Row = (
        &'static str,
        Start,
        &'static [u8],
        usize,
        bool,
        Limits,
        &'static str,
        &'static str,
    );

    /// A connection's state at the start of a row.
    #[derive(Clone, Copy)]
    enum Start {
        Idle,
        HeadStarted,
        Length(u64),
        /// A chunked body with this limit.
        Chunked(usize),
        Dispatched,
        Streaming,
        Closing,
        Lingering(usize),
    }

    fn body(framing: &str, limit: usize, now: Instant) -> State<()> {
        let raw = format!("POST /run HTTP/1.1\r\nhost: x\r\n{framing}\r\n\r\n");
        let (head, _) = http::parse_head(raw.as_bytes()).unwrap().unwrap();
        let (remaining, chunked) = match head.framing {
            Framing::Length(n) => (n, None),
            Framing::Chunked => (0, Some(ChunkedDecoder::default())),
        };
        let pool = Arc::new(AtomicUsize::new(0));
        State::ReadingBody(Box::new(BodyRead {
            head,
            route: (),
            limit,
            too_large: Response::text(413, "Content Too Large"),
            body: Vec::new(),
            remaining,
            chunked,
            deadline: now,
            reserved: Reservation::take(&pool, usize::MAX, 0).unwrap(),
        }))
    }

    fn start(s: Start, now: Instant) -> State<()> {
        let job = || {
            let inbox = Inbox::new(Box::new(|| {}));
            let id = ConnId {
                slot: 0,
                generation: 1,
            };
            job::new_job(id, 4, &inbox).0
        };
        match s {
            Start::Idle => State::ReadingHead { started: false },
            Start::HeadStarted => State::ReadingHead { started: true },
            Start::Length(n) => body(&format!("content-length: {n}"), 1 << 20, now),
            Start::Chunked(limit) => body("transfer-encoding: chunked", limit, now),
            Start::Dispatched => State::Dispatched {
                job: job(),
                keep_alive: true,
                head_only: false,
            },
            Start::Streaming => State::Streaming {
                job: job(),
                keep_alive: true,
                chunked: false,
            },
            Start::Closing => State::Closing,
            Start::Lingering(left) => State::Lingering { left },
        }
    }

    fn show(step: &Step<()>, now: Instant) -> String {
        match step {
            Step::Wait { used } => format!("wait, {used} used"),
            Step::HeadBegun { deadline } => {
                format!("head begun, until +{}s", (*deadline - now).as_secs())
            }
            Step::HalfClosed => "half-closed".into(),
            Step::Refuse(r) => format!("refuse {}", r.status),
            Step::OverBodyBudget => "over body budget".into(),
            Step::Head { head, used } => {
                format!("head {} {}, {used} used", head.method, head.target)
            }
            Step::Dispatch { body, used } => format!(
                "dispatch {:?}, {used} used",
                String::from_utf8_lossy(&body.body)
            ),
            Step::Close(why) => format!("close: {why}"),
        }
    }

    fn state(s: &State<()>) -> String {
        match s {
            State::ReadingHead { started: false } => "idle".into(),
            State::ReadingHead { started: true } => "head started".into(),
            State::ReadingBody(b) => format!("body {:?}", String::from_utf8_lossy(&b.body)),
            State::Dispatched { .. } => "dispatched".into(),
            State::Streaming { .. } => "streaming".into(),
            State::Closing => "closing".into(),
            State::Lingering { left } => format!("lingering {left}"),
        }
    }

    const HEAD: &[u8] = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n";
    const FLOOD: &[u8] = &[b'x'; 65];

    #[test]
    fn each_state_and_input_gives_one_step() {
        #[rustfmt::skip]
        let rows: &[Row] = &[
            ("nothing yet", Start::Idle, b"", 0, false, BASE, "wait, 0 used", "idle"),
            ("partial head: the header timeout starts", Start::Idle, b"GET /a HT", 0, false, BASE, "head begun, until +10s", "head started"),
            ("partial head, timeout running", Start::HeadStarted, b"GET /a HTTP/1.1\r\n", 0, false, BASE, "wait, 0 used", "head started"),
            ("complete head, a pipelined one behind", Start::Idle, b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET", 0, false, BASE, "head GET /a, 28 used", "idle"),
            ("malformed head", Start::Idle, b"GET /a HTTP/1.1\r\nno colon\r\n\r\n", 0, false, BASE, "refuse 400", "idle"),
            ("pipelined while output pending waits", Start::Idle, HEAD, 101, false, BASE, "wait, 0 used", "idle"),
            ("pipelined flood while output pending", Start::Idle, FLOOD, 101, false, BASE, "close: pipelined flood", "idle"),
            ("output pending under the watermark", Start::Idle, HEAD, 100, false, BASE, "head GET /a, 28 used", "idle"),
            ("a complete head is read even at EOF", Start::Idle, HEAD, 0, true, BASE, "head GET /a, 28 used", "idle"),
            ("EOF between requests", Start::Idle, b"", 0, true, BASE, "half-closed", "closing"),
            ("EOF in head", Start::HeadStarted, b"GET /a", 0, true, BASE, "close: eof in head", "head started"),
            ("EOF in a first head", Start::Idle, b"GET /a", 0, true, BASE, "close: eof in head", "idle"),
            ("shutting down while reading a head", Start::HeadStarted, HEAD, 0, false, SHUTTING_DOWN, "wait, 28 used", "closing"),
            ("shutting down while idle", Start::Idle, b"", 0, false, SHUTTING_DOWN, "wait, 0 used", "closing"),
            ("content-length body partial", Start::Length(5), b"abc", 0, false, BASE, "wait, 3 used", "body \"abc\""),
            ("content-length body complete", Start::Length(3), b"abcGET", 0, false, BASE, "dispatch \"abc\", 3 used", "idle"),
            ("EOF in body", Start::Length(5), b"abc", 0, true, BASE, "close: eof in body", "body \"abc\""),
            ("chunked body partial", Start::Chunked(64), b"3\r\nab", 0, false, BASE, "wait, 5 used", "body \"ab\""),
            ("chunked body ok", Start::Chunked(64), b"3\r\nabc\r\n0\r\n\r\nGET", 0, false, BASE, "dispatch \"abc\", 13 used", "idle"),
            ("EOF in a chunked body", Start::Chunked(64), b"3\r\nab", 0, true, BASE, "close: eof in body", "body \"ab\""),
            ("chunked body too large", Start::Chunked(2), b"3\r\nabc\r\n0\r\n\r\n", 0, false, BASE, "refuse 413", "body \"\""),
            ("chunked body malformed", Start::Chunked(64), b"zz\r\n", 0, false, BASE, "refuse 400", "body \"\""),
            ("chunked body over the body budget", Start::Chunked(64), b"3\r\nabc\r\n", 0, false, TIGHT, "over body budget", "body \"abc\""),
            ("chunked body under the exempt size", Start::Chunked(64), b"3\r\nabc\r\n0\r\n\r\n", 0, false, TIGHT_EXEMPT, "dispatch \"abc\", 13 used", "idle"),
            ("dispatched, a pipelined request waits", Start::Dispatched, HEAD, 0, false, BASE, "wait, 0 used", "dispatched"),
            ("input up to the bound while busy waits", Start::Streaming, &FLOOD[..64], 0, false, BASE, "wait, 0 used", "streaming"),
            ("input flood while dispatched", Start::Dispatched, FLOOD, 0, false, BASE, "close: input flood while busy", "dispatched"),
            ("input flood while streaming", Start::Streaming, FLOOD, 0, false, BASE, "close: input flood while busy", "streaming"),
            ("EOF while dispatched: client gone", Start::Dispatched, b"", 0, true, BASE, "close: client gone", "dispatched"),
            ("EOF while streaming: client gone", Start::Streaming, b"", 5, true, BASE, "close: client gone", "streaming"),
            ("closing drops input", Start::Closing, b"xyz", 7, false, BASE, "wait, 3 used", "closing"),
            ("lingering counts down", Start::Lingering(10), b"abc", 0, false, BASE, "wait, 3 used", "lingering 7"),
            ("lingering runs out", Start::Lingering(3), b"abc", 0, false, BASE, "close: done", "lingering 0"),
            ("lingering ends at EOF", Start::Lingering(10), b"", 0, true, BASE, "close: done", "lingering 10"),
        ];
        let now = ManualClock::new().now();
        let mut wrong = Vec::new();
        for (name, s, inbuf, pending_out, peer_eof, limits, expect, after) in rows {
            let mut st = start(*s, now);
            let input = Input {
                inbuf,
                pending_out: *pending_out,
                peer_eof: *peer_eof,
                now,
            };
            let got = show(&step(&mut st, &input, limits), now);
            let got_after = state(&st);
            if got != *expect || got_after != *after {
                wrong.push(format!(
                    "{name}: {got} then {got_after}; want {expect} then {after}"
                ));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// Bytes split anywhere make the same body, and the reservation holds what was read.
    #[test]
    fn a_body_fed_byte_by_byte_is_the_same_body() {
        let now = ManualClock::new().now();
        let input = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let mut st = start(Start::Chunked(64), now);
        let mut steps = Vec::new();
        let mut at = 0;
        let mut end = 1;
        while end <= input.len() {
            let i = Input {
                inbuf: &input[at..end],
                pending_out: 0,
                peer_eof: false,
                now,
            };
            let s = step(&mut st, &i, &BASE);
            match &s {
                Step::Wait { used } => at += used,
                Step::Dispatch { used, .. } => at += used,
                _ => {}
            }
            steps.push(show(&s, now));
            end += 1;
        }
        assert_eq!(at, input.len());
        assert_eq!(
            steps.last().map(String::as_str),
            Some("dispatch \"abcde\", 1 used")
        );
    }
}
