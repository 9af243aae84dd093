//! How an upstream frame becomes a [`Payload`]: the one place that decides which way a frame
//! is read (ripgrep's `MmapChoice` shape: each cheap way may decline, and the plain read is
//! behind them all).
//!
//! Four ways, cheapest first, each counted on `iac_agui_upstream_frames_total{read}` (the
//! figures: docs/performance.md, "What each special case buys"):
//!
//! - `template`: a frame that is the burst's last text delta with another text is read by
//!   checking the rest is the same bytes ([`Template`]; 1.55–1.75 µs per event against
//!   2.8–3.35 without it, issue 37);
//! - `delta`: the text-delta shape read by hand (`a2a/delta.rs`: one small frame per level,
//!   where serde's derived read took ~4 KiB of a worker's stack);
//! - `shallow`: any other shape nesting at most `limits::SHALLOW_FRAME_DEPTH` deep, read as a
//!   `Value` on the worker (9 → 7 calls for a plain run);
//! - `deep`: the same read on a call thread, a recursion as deep as the frame kept off the
//!   worker's stack (it stays 12 KiB).
//!
//! The `Value` read ([`value_read`]) is the fallback and the reference: every other way must
//! answer every question the adapter asks as it does. The oracles that hold them to it
//! (`delta_agrees`, `template_agrees`) exist only in tests and the `delta_frame` fuzz target
//! (`cfg(fuzzing)`, which cargo-fuzz sets): the shipped binary carries none of them.

use std::borrow::Cow;

use super::A2aError;
use super::calls::CallPool;
use super::types::{F_TEXT, FieldAt, Located, Payload};
use crate::limits;

/// Which way a frame was read (the `read` label of `iac_agui_upstream_frames_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Template,
    Delta,
    Shallow,
    Deep,
}

impl Way {
    /// Counted where the way is taken, so that a change which stops a text stream's frames from
    /// reaching a cheap way shows as a failed row (`tests/it/tuning.rs`, the benchmark's "delta
    /// path share").
    fn count(self) {
        let m = &crate::metrics::M;
        match self {
            Way::Template => m.frames_template.inc(),
            Way::Delta => m.frames_delta.inc(),
            Way::Shallow => m.frames_shallow.inc(),
            Way::Deep => m.frames_deep.inc(),
        }
    }
}

/// The reader of one upstream stream's frames: the burst's template and where a deep frame
/// is read (the default: on the caller, for tests and streams of payloads read already).
#[derive(Default)]
pub(crate) struct FrameReader {
    template: Template,
    /// Where a deep frame is read (`None`: here, on the caller).
    calls: Option<CallPool>,
}

impl FrameReader {
    /// Deep frames read on `calls`.
    pub(crate) fn new(calls: CallPool) -> FrameReader {
        FrameReader {
            template: Template::default(),
            calls: Some(calls),
        }
    }

    /// `data` as a payload, read the cheapest way that takes it.
    pub(crate) fn read(&mut self, data: Vec<u8>) -> Result<Payload, A2aError> {
        let data = match self.typed(data) {
            Ok((way, p)) => {
                way.count();
                return Ok(p);
            }
            Err(data) => data,
        };
        self.other(data)
    }

    /// The typed ways: against the template, else the delta reader; the frame back when
    /// neither takes it. A frame read in full becomes the template.
    fn typed(&mut self, data: Vec<u8>) -> Result<(Way, Payload), Vec<u8>> {
        // The whole frame is checked for UTF-8, as the `Value` read would.
        let frame = String::from_utf8(data).map_err(std::string::FromUtf8Error::into_bytes)?;
        let (way, located) = match self.template.read(&frame) {
            Some(l) => (Way::Template, l),
            None => match locate(&frame) {
                Some(l) => {
                    self.template.keep(&frame, &l.spans);
                    (Way::Delta, l)
                }
                None => return Err(frame.into_bytes()),
            },
        };
        Ok((way, Payload::of_delta(frame, located)))
    }

    /// Any other shape, as a `Value`: on the caller when it nests at most
    /// `SHALLOW_FRAME_DEPTH` deep (the kernel's task and status frames nest 4 to 6: the
    /// recursion stays within the pages the delta path already holds, and a hand-off per such
    /// frame was most of a run's call-thread trips, issue 37), else on a call thread (a
    /// recursion as deep as the frame, up to limits::MAX_JSON_DEPTH levels of ~650 B each,
    /// kept off the worker's stack for the stream's whole life; such frames are the few per
    /// turn, not the text).
    fn other(&self, data: Vec<u8>) -> Result<Payload, A2aError> {
        let way = if crate::scan::json_depth_at_most(&data, limits::SHALLOW_FRAME_DEPTH) {
            Way::Shallow
        } else {
            Way::Deep
        };
        way.count();
        let read = move || value_read(&data);
        match (&self.calls, way) {
            (Some(calls), Way::Deep) => calls.run(read),
            _ => read(),
        }
    }

    /// Forget the template and its space (before a read that may wait: a waiting stream
    /// holds none of it).
    pub(crate) fn release(&mut self) {
        self.template.release();
    }

    /// The space the template holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.template.frame.capacity()
    }
}

/// The fallback and the reference read: the frame as an order-preserving `Value`.
pub(crate) fn value_read(data: &[u8]) -> Result<Payload, A2aError> {
    serde_json::from_slice(data.trim_ascii())
        .map(Payload::from_value)
        .map_err(|e| A2aError::Protocol(format!("an upstream event is not JSON: {e}")))
}

/// Read `frame` as a delta frame: where each field is, the unescaped ones, whether the
/// status had a message.
fn locate(frame: &str) -> Option<Located> {
    let f = super::delta::read(frame)?;
    let mut spans = [None; 7];
    let mut unescaped = String::new();
    let whole = frame.as_bytes().as_ptr_range();
    let fields = f.strs.iter().chain([&f.text]).map(Option::as_ref);
    for (i, v) in fields.enumerate() {
        let Some(v) = v else { continue };
        let at = v.as_bytes().as_ptr_range();
        spans[i] = Some(match v {
            // A borrowed field is a slice of the frame: its offset is where it starts.
            Cow::Borrowed(_) if whole.start <= at.start && at.end <= whole.end => {
                let start = at.start as usize - whole.start as usize;
                FieldAt::at(start, start + v.len(), false)?
            }
            _ => {
                let start = unescaped.len();
                unescaped.push_str(v);
                FieldAt::at(start, unescaped.len(), true)?
            }
        });
    }
    Some(Located {
        spans,
        unescaped,
        has_message: f.text.is_some(),
    })
}

/// The last delta frame read in full, while a burst of them is read (a text stream's frames
/// differ in their text only: the same task, context, state, session, message and role).
/// Empty between bursts: a waiting stream holds none of it. Measured (issue 37, shipped build):
/// without it 2.8–3.35 µs per event and 0.25–0.31 of the direct read; with it 1.55–1.75 µs and
/// 0.54–0.55 (docs/performance.md).
#[derive(Default)]
struct Template {
    frame: String,
    spans: [Option<FieldAt>; 7],
}

/// The largest frame kept as a template.
const TEMPLATE_MAX: usize = 64 * 1024;

impl Template {
    /// Keep `frame` (read in full into `spans`) when it can stand for the next ones: its
    /// text is one part read in place and no field needed unescaping (those are not kept).
    fn keep(&mut self, frame: &str, spans: &[Option<FieldAt>; 7]) {
        self.frame.clear();
        if frame.len() > TEMPLATE_MAX {
            // A large delta is not the next one's template: a copy of it would double what a
            // run holds for one event (issue 45, fault 1), and text streams are small deltas.
            self.frame = String::new();
            return;
        }
        if spans[F_TEXT].is_some() && spans.iter().flatten().all(|s| !s.unescaped) {
            self.frame.push_str(frame);
            self.spans = *spans;
        }
    }

    fn release(&mut self) {
        self.frame = String::new();
    }

    /// `frame` read as the template with another text: the bytes before the template's text
    /// (up to its opening quote) and after it (from its closing quote) are the same, and the
    /// string at the text's place ends exactly where that tail starts. The reader is a
    /// left-to-right machine: the same bytes before the text leave it in the same state,
    /// and the same bytes after it take it through the same steps to the same end, so the
    /// fields are the template's (those after the text moved by the change of length).
    fn read(&self, frame: &str) -> Option<Located> {
        if self.frame.is_empty() {
            return None;
        }
        let t = self.spans[F_TEXT]?;
        let (ts, te) = (t.start as usize, t.end as usize);
        let prev = self.frame.as_bytes();
        let (head, tail) = (prev.get(..ts)?, prev.get(te..)?);
        let b = frame.as_bytes();
        if ts == 0 || b.len() < ts + tail.len() || !b.starts_with(head) || !b.ends_with(tail) {
            return None;
        }
        let end = b.len() - tail.len();
        let (text, after) = super::delta::string_at(frame, ts - 1)?;
        if after != end + 1 {
            return None;
        }
        let mut spans = self.spans;
        for s in spans.iter_mut().flatten() {
            if s.start as usize >= te {
                let moved = |x: u32| x as usize - te + end;
                *s = FieldAt::at(moved(s.start), moved(s.end), false)?;
            }
        }
        let (span, unescaped) = match text {
            Cow::Borrowed(_) => (FieldAt::at(ts, end, false)?, String::new()),
            Cow::Owned(o) => (FieldAt::at(0, o.len(), true)?, o),
        };
        spans[F_TEXT] = Some(span);
        Some(Located {
            spans,
            unescaped,
            has_message: true,
        })
    }
}

#[cfg(any(test, fuzzing))]
mod oracle;
#[cfg(any(test, fuzzing))]
pub use oracle::{delta_agrees, template_agrees, template_splice};

#[cfg(test)]
mod tests;
