//! Upstream Server-Sent Events reader following the WHATWG parsing rules: CRLF, LF and lone
//! CR line endings (a CR at the end of one read and an LF at the start of the next are one
//! ending), `:` comments, `field: value` with one optional space, multi-line `data` joined with
//! `\n`, events dispatched on a blank line, a leading BOM ignored. Lines and events are bounded:
//! an oversized event is a protocol error, never unbounded memory.

use crate::buffers::{Pace, settle};
use std::collections::VecDeque;
use std::io::{self, Read};

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any (the kernel uses `error` for mid-stream JSON-RPC errors).
    pub event: Option<String>,
    /// The joined `data:` lines.
    pub data: Vec<u8>,
}

#[derive(Debug)]
pub enum SseError {
    /// An event (or a single line) exceeded the configured bound.
    TooLarge,
    Io(io::Error),
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SseError::TooLarge => f.write_str("an upstream SSE event exceeds the size limit"),
            SseError::Io(e) => write!(f, "upstream read failed: {e}"),
        }
    }
}

/// Push parser: feed bytes, collect events.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    event: Option<String>,
    /// The previous chunk ended with CR: a leading LF in the next chunk belongs to it.
    pending_cr: bool,
    at_start: bool,
    max_event: usize,
}

impl SseParser {
    pub fn new(max_event: usize) -> SseParser {
        SseParser {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            event: None,
            pending_cr: false,
            at_start: true,
            max_event,
        }
    }

    /// Feed bytes; complete events are appended to `out`.
    pub fn push(&mut self, mut input: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), SseError> {
        if self.at_start && !input.is_empty() {
            // A UTF-8 BOM may open the stream; it may arrive split across reads, so only strip
            // it when the whole BOM is in this first piece.
            if let Some(rest) = input.strip_prefix(b"\xEF\xBB\xBF") {
                input = rest;
            }
            self.at_start = false;
        }
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(rest) = input.strip_prefix(b"\n") {
                input = rest;
            }
        }
        while !input.is_empty() {
            match find_eol(input) {
                None => {
                    self.extend_line(input)?;
                    break;
                }
                Some(i) => {
                    if self.line.is_empty() {
                        // The whole line is in this piece: read it in place, no copy.
                        self.check_size(i)?;
                        self.end_line(&input[..i], out)?;
                    } else {
                        self.extend_line(&input[..i])?;
                        let line = std::mem::take(&mut self.line);
                        if let Err(line) = self.take_data_line(line) {
                            let r = self.end_line(&line, out);
                            self.keep_line(line);
                            r?;
                        }
                    }
                    let was_cr = input[i] == b'\r';
                    input = &input[i + 1..];
                    if was_cr {
                        if input.is_empty() {
                            self.pending_cr = true;
                        } else if input[0] == b'\n' {
                            input = &input[1..];
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn check_size(&self, more: usize) -> Result<(), SseError> {
        if self.line.len() + more + self.data.len() > self.max_event {
            return Err(SseError::TooLarge);
        }
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        self.check_size(bytes.len())?;
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Bytes of the event being read (its partial line and data so far).
    fn partial(&self) -> usize {
        self.line.len() + self.data.len()
    }

    /// Before a read that may block for long: no partial line is held, so its buffer need not
    /// be (the next partial line allocates one).
    fn release_line(&mut self) {
        settle(&mut self.line, Pace::Quiet, 0);
    }

    /// Give the line buffer back for the next partial line.
    fn keep_line(&mut self, mut line: Vec<u8>) {
        line.clear();
        // A large event must not keep its line's memory for the rest of the run.
        settle(&mut line, Pace::Burst, LINE_KEEP);
        self.line = line;
    }

    /// A long line read over several pieces that is its event's first `data:` line becomes
    /// the event's data where it lies: a large delta is never held twice (issue 45, fault 1).
    /// `Err` gives the line back for the ordinary path.
    fn take_data_line(&mut self, mut line: Vec<u8>) -> Result<(), Vec<u8>> {
        if self.has_data || line.len() < LINE_KEEP || !line.starts_with(b"data:") {
            return Err(line);
        }
        let prefix = if line.get(5) == Some(&b' ') { 6 } else { 5 };
        line.drain(..prefix);
        self.data = line;
        self.has_data = true;
        Ok(())
    }

    fn end_line(&mut self, line: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                // Nothing is allocated for the next event until it comes (a waiting stream
                // holds no event memory); its one-line data is then one exact allocation.
                out.push_back(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.has_data = false;
            self.event = None;
            self.data.clear();
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                if self.data.len() > self.max_event {
                    return Err(SseError::TooLarge);
                }
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry and unknown fields carry nothing the adapter uses
        }
        Ok(())
    }
}

/// Capacity a line buffer keeps between lines.
const LINE_KEEP: usize = 64 * 1024;

use crate::scan::eol as find_eol;

/// The read buffer between bursts: below a text delta's size (the transport under it has
/// its own buffer, so a frame in two pieces costs a copy, not a system call).
const READ_MIN: usize = 256;
/// As large as the transport's burst space: each read here is a flush, and so a wake of
/// the loop.
const READ_MAX: usize = crate::limits::A2A_READ_BIG;

use crate::budget::{GATE_FROM, ReadHold, gate_need};

/// Pull reader over any `Read` (the upstream response body).
pub(crate) struct SseReader<R> {
    inner: R,
    /// With what it holds now.
    gate: Option<(ReadHold, usize)>,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
    /// Read buffer: doubled up to `READ_MAX` while reads fill it (a flood: each read is one
    /// burst for the loop), back to `READ_MIN` after a read of a paced event's size (the next
    /// read may wait for long, and a waiting stream holds this buffer while it waits).
    buf: Vec<u8>,
    /// Consecutive reads that used less than an eighth of the buffer.
    small_reads: u8,
    eof: bool,
}

impl<R: Read> SseReader<R> {
    pub(crate) fn new(inner: R, max_event: usize) -> SseReader<R> {
        SseReader {
            inner,
            gate: None,
            parser: SseParser::new(max_event),
            queue: VecDeque::new(),
            buf: vec![0u8; READ_MIN],
            small_reads: 0,
            eof: false,
        }
    }

    fn adapt(&mut self, n: usize) {
        let len = self.buf.len();
        if n == len && len < READ_MAX {
            self.buf = vec![0u8; len * 2];
            self.small_reads = 0;
        } else if len > READ_MIN && n <= 2 * READ_MIN {
            self.buf = vec![0u8; READ_MIN];
            self.small_reads = 0;
        } else if n < len / 8 && len > READ_MIN {
            self.small_reads += 1;
            if self.small_reads >= 8 {
                self.buf = vec![0u8; len / 2];
                self.small_reads = 0;
            }
        } else {
            self.small_reads = 0;
        }
    }

    /// Hold room in the output budget before reading a large event's bytes.
    pub(crate) fn set_gate(&mut self, gate: ReadHold) {
        self.gate = Some((gate, 0));
    }

    /// Give back what the events in hand no longer need: the events returned so far are
    /// handled. Never waits: the caller may hold events its client has not been sent yet.
    pub(crate) fn settle_gate(&mut self) {
        let _ = self.fit_gate(false);
    }

    /// Hold what the events in hand need: before a read, more (waiting for room) or less.
    fn fit_gate(&mut self, before_read: bool) -> Result<(), SseError> {
        let Some((gate, held)) = self.gate.as_mut() else {
            return Ok(());
        };
        let partial = self.parser.partial();
        if *held == 0 && partial < GATE_FROM {
            return Ok(());
        }
        // What is in hand: the partial event and those parsed but not yet returned.
        let pending = partial + self.queue.iter().map(|e| e.data.len()).sum::<usize>();
        let need = gate_need(pending);
        if need < *held || (need > *held && before_read) {
            if !gate.hold(need) {
                return Err(SseError::Io(io::Error::other(
                    "stopped while waiting for memory to read a large event",
                )));
            }
            *held = need;
        }
        Ok(())
    }

    /// Events already parsed from bytes in hand: the next one needs no read.
    pub(crate) fn has_ready(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The next event, `Ok(None)` at the end of the stream. An incomplete final event (no
    /// blank line before EOF) is discarded, as the WHATWG rules say.
    pub(crate) fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        self.settle_gate();
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Ok(Some(ev));
            }
            if self.eof {
                return Ok(None);
            }
            self.parser.release_line();
            // A large partial event waits for room before it grows.
            self.fit_gate(true)?;
            // Between bursts the ring of parsed events goes too (a flood keeps it).
            if self.buf.len() == READ_MIN {
                settle(&mut self.queue, Pace::Quiet, 0);
            }
            let n = match self.inner.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(SseError::Io(e)),
            };
            if n == 0 {
                self.eof = true;
                continue;
            }
            self.parser.push(&self.buf[..n], &mut self.queue)?;
            self.adapt(n);
        }
    }
}

/// A reader that hands out its pieces in order, one read at most each (tests).
#[cfg(test)]
pub(crate) struct Pieces(pub(crate) VecDeque<Vec<u8>>);

#[cfg(test)]
impl Read for Pieces {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let Some(mut p) = self.0.pop_front() else {
            return Ok(0);
        };
        let n = p.len().min(out.len());
        out[..n].copy_from_slice(&p[..n]);
        if n < p.len() {
            self.0.push_front(p.split_off(n));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{GATE_COST, GATE_STEP};

    /// The events of `input` fed in pieces of `split` bytes; `None` when the parser refuses it.
    fn parse_split(input: &[u8], split: usize) -> Option<Vec<SseEvent>> {
        let mut p = SseParser::new(1 << 20);
        let mut out = VecDeque::new();
        for piece in input.chunks(split.max(1)) {
            p.push(piece, &mut out).ok()?;
        }
        Some(out.into_iter().collect())
    }

    fn datas(evs: &[SseEvent]) -> Vec<String> {
        evs.iter()
            .map(|e| String::from_utf8(e.data.clone()).unwrap())
            .collect()
    }

    #[test]
    fn all_line_endings_at_every_split() {
        for input in [
            &b"data: a\r\n\r\ndata: b\r\n\r\n"[..],
            b"data: a\n\ndata: b\n\n",
            b"data: a\r\rdata: b\r\r",
            b"data: a\r\n\ndata: b\n\r\n",
        ] {
            for split in 1..input.len() {
                let evs = parse_split(input, split).unwrap();
                assert_eq!(datas(&evs), ["a", "b"], "{input:?} split {split}");
            }
        }
    }

    #[test]
    fn comments_fields_and_multiline_data() {
        let input = b"\xEF\xBB\xBF: ping - 2026-11-30 00:17:09+00:00\r\n\r\nevent: error\r\ndata: {\"x\":\r\ndata:1}\r\nid: 5\r\nretry: 10\r\n\r\ndata\r\n\r\n";
        let evs = parse_split(input, 7).unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].event.as_deref(), Some("error"));
        assert_eq!(evs[0].data, b"{\"x\":\n1}");
        assert_eq!(evs[1].data, b"");
    }

    #[test]
    fn comment_only_and_incomplete_events_are_not_dispatched() {
        let evs = parse_split(b": a\n\n: b\n\ndata: x", 3).unwrap();
        assert!(evs.is_empty());
    }

    #[test]
    fn oversized_event_is_an_error() {
        let mut p = SseParser::new(16);
        let mut out = VecDeque::new();
        assert!(matches!(
            p.push(b"data: 0123456789\ndata: 0123456789\n\n", &mut out),
            Err(SseError::TooLarge)
        ));
        let mut p = SseParser::new(16);
        assert!(matches!(
            p.push(&[b'a'; 40], &mut out),
            Err(SseError::TooLarge)
        ));
    }

    /// A reader of `input` that arrives 64 KiB per read (events up to 8 gate steps).
    fn in_64_kib_reads(input: &str) -> SseReader<Pieces> {
        let pieces = input.as_bytes().chunks(64 * 1024).map(<[u8]>::to_vec);
        SseReader::new(Pieces(pieces.collect()), 8 * GATE_STEP)
    }

    fn hold(budget: &std::sync::Arc<crate::budget::Budget>, stopped: bool) -> ReadHold {
        budget.read_hold(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            stopped,
        )))
    }

    #[test]
    fn a_large_event_holds_the_gate_while_it_is_read_and_gives_it_back_once_handled() {
        let big = format!("data: {}\n\n", "x".repeat(3 * GATE_STEP));
        let input = format!("data: small\n\n{big}data: after\n\n");
        let budget = crate::budget::Budget::new(usize::MAX);
        let mut r = in_64_kib_reads(&input);
        r.set_gate(hold(&budget, false));
        assert_eq!(r.next_event().unwrap().unwrap().data, b"small");
        assert_eq!(budget.reading(), 0, "small events never ask");
        assert_eq!(r.next_event().unwrap().unwrap().data.len(), 3 * GATE_STEP);
        // Held in steps before the bytes were read, for all the parser's copies.
        let held = budget.reading();
        assert!(held >= 3 * (3 * GATE_STEP - 64 * 1024), "{held}");
        assert_eq!(held % GATE_STEP, 0, "{held}");
        assert!(held >= (GATE_FROM * GATE_COST).next_multiple_of(GATE_STEP));
        // The big event is handled once the next one is asked for: its memory goes back.
        assert_eq!(r.next_event().unwrap().unwrap().data, b"after");
        assert_eq!(budget.reading(), 0);
        assert_eq!(r.gate.as_ref().unwrap().1, 0);
    }

    #[test]
    fn a_refused_gate_stops_the_read() {
        let input = format!("data: {}\n\n", "x".repeat(2 * GATE_STEP));
        // No room (clients hold the whole budget) and the run stopping: the read ends.
        let budget = crate::budget::Budget::new(GATE_STEP);
        budget.counted_unsent(2 * GATE_STEP);
        let mut r = in_64_kib_reads(&input);
        r.set_gate(hold(&budget, true));
        assert!(matches!(r.next_event(), Err(SseError::Io(_))));
        assert_eq!(budget.reading(), 0);
    }

    #[test]
    fn reader_over_a_byte_source() {
        let src: &[u8] = b"data: 1\n\ndata: 2\n\n";
        let mut r = SseReader::new(src, 1024);
        assert_eq!(r.next_event().unwrap().unwrap().data, b"1");
        assert_eq!(r.next_event().unwrap().unwrap().data, b"2");
        assert!(r.next_event().unwrap().is_none());
    }

    #[test]
    fn a_waiting_reader_holds_no_event_or_line_memory() {
        // The first event ends mid-way through the second: a partial line is in hand.
        let src: &[u8] = b"data: {\"a\":1}\n\ndata: {\"b\"";
        let mut r = SseReader::new(src, 1024);
        assert_eq!(r.next_event().unwrap().unwrap().data, b"{\"a\":1}");
        assert_eq!(
            r.parser.data.capacity(),
            0,
            "nothing allocated for the next event"
        );
        assert!(r.next_event().unwrap().is_none());
        // Every line ended: the next read (which may wait for long) finds no line buffer.
        let mut r = SseReader::new(&b"data: 1\n\n"[..], 1024);
        r.parser.push(b"data: par", &mut VecDeque::new()).unwrap();
        r.parser.push(b"tial\n", &mut VecDeque::new()).unwrap();
        assert!(r.parser.line.capacity() > 0);
        assert_eq!(r.next_event().unwrap().unwrap().data, b"partial\n1");
        assert_eq!(r.parser.line.capacity(), 0);
    }

    #[test]
    fn a_long_data_line_becomes_the_events_data_without_a_copy() {
        let body = "x".repeat(4 * LINE_KEEP);
        let mut p = SseParser::new(1 << 20);
        let mut out = VecDeque::new();
        p.push(b"event: message\n", &mut out).unwrap();
        for piece in format!("data: {body}").as_bytes().chunks(LINE_KEEP / 2) {
            p.push(piece, &mut out).unwrap();
        }
        let line_at = p.line.as_ptr();
        p.push(b"\n", &mut out).unwrap();
        assert_eq!(
            p.data.as_ptr(),
            line_at,
            "the line is the data, not a copy of it"
        );
        p.push(b"\n", &mut out).unwrap();
        let ev = out.pop_front().unwrap();
        assert_eq!(ev.event.as_deref(), Some("message"));
        assert_eq!(ev.data, body.as_bytes());
        // A second data line joins the first as before.
        for piece in format!("data: {body}\ndata: {body}\n\n")
            .as_bytes()
            .chunks(1000)
        {
            p.push(piece, &mut out).unwrap();
        }
        assert_eq!(
            out.pop_front().unwrap().data,
            format!("{body}\n{body}").as_bytes()
        );
        // `data:` without the space, and a short line read in pieces, are unchanged.
        p.push(format!("data:{body}").as_bytes(), &mut out).unwrap();
        p.push(b"\n\ndata: sh", &mut out).unwrap();
        p.push(b"ort\n\n", &mut out).unwrap();
        assert_eq!(out.pop_front().unwrap().data, body.as_bytes());
        assert_eq!(out.pop_front().unwrap().data, b"short");
    }

    /// Reads that fill the buffer grow it; the read of one paced event after them gives it back,
    /// and the next (possibly long) read holds neither the grown buffer nor the event ring.
    #[test]
    fn a_reader_waits_with_the_small_buffer_after_a_burst() {
        let event = |i: usize| format!("data: {{\"n\":{i},\"pad\":\"{}\"}}\n\n", "x".repeat(40));
        let burst: String = (0..200).map(event).collect();
        let paced = event(7);
        assert!(paced.len() < READ_MIN);
        let mut r = SseReader::new(
            Pieces(VecDeque::from([burst.into_bytes(), paced.into_bytes()])),
            1 << 20,
        );
        for _ in 0..200 {
            r.next_event().unwrap().unwrap();
        }
        assert!(r.buf.len() > READ_MIN, "the burst grew the buffer");
        r.next_event().unwrap().unwrap();
        assert_eq!(r.buf.len(), READ_MIN);
        assert!(r.next_event().unwrap().is_none());
        assert_eq!(r.queue.capacity(), 0, "no event ring across the wait");
    }
}
