//! Typed views of A2A 1.0 proto-JSON payloads (reference a2a-upstream §4, §5, agui-reference §4.5).
//!
//! The objects stay `serde_json::Value` (pass-through data keeps its key order); this module
//! only answers questions about them. JSON-RPC `error` payloads are recognised explicitly and
//! never read as a task (a quirk of the reference).

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Normalised `TASK_STATE_*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
    AuthRequired,
    Other(String),
}

impl TaskState {
    /// strip, lowercase, drop `task_state_`, `_` → `-` (reference §4.5).
    pub fn parse(raw: &str) -> TaskState {
        // The kernel's own spelling, on every frame of a stream: no copies.
        Self::canonical(raw).unwrap_or_else(|| Self::normalised(raw))
    }

    fn normalised(raw: &str) -> TaskState {
        let s = raw.trim().to_lowercase();
        let s = s
            .strip_prefix("task_state_")
            .unwrap_or(&s)
            .replace('_', "-");
        match s.as_str() {
            "submitted" => TaskState::Submitted,
            "working" => TaskState::Working,
            "input-required" => TaskState::InputRequired,
            "completed" => TaskState::Completed,
            "canceled" => TaskState::Canceled,
            "failed" => TaskState::Failed,
            "rejected" => TaskState::Rejected,
            "auth-required" => TaskState::AuthRequired,
            _ => TaskState::Other(s),
        }
    }

    /// `TASK_STATE_*` exactly as the kernel writes it (what `parse` would make of it).
    fn canonical(raw: &str) -> Option<TaskState> {
        Some(match raw.strip_prefix("TASK_STATE_")? {
            "SUBMITTED" => TaskState::Submitted,
            "WORKING" => TaskState::Working,
            "INPUT_REQUIRED" => TaskState::InputRequired,
            "COMPLETED" => TaskState::Completed,
            "CANCELED" => TaskState::Canceled,
            "FAILED" => TaskState::Failed,
            "REJECTED" => TaskState::Rejected,
            "AUTH_REQUIRED" => TaskState::AuthRequired,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Canceled => "canceled",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
            TaskState::AuthRequired => "auth-required",
            TaskState::Other(s) => s,
        }
    }

    /// failed, rejected, auth-required.
    pub(crate) fn is_failure(&self) -> bool {
        matches!(
            self,
            TaskState::Failed | TaskState::Rejected | TaskState::AuthRequired
        )
    }

    /// A state after which the task will not continue on its own.
    pub(crate) fn is_terminal(&self) -> bool {
        self.is_failure() || matches!(self, TaskState::Completed | TaskState::Canceled)
    }

    /// Terminal or waiting for input: where a subscription or a stream stops.
    pub(crate) fn is_stop(&self) -> bool {
        self.is_terminal() || *self == TaskState::InputRequired
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: Option<i64>,
    pub message: String,
    pub(crate) data: Value,
}

impl RpcError {
    fn from_value(v: &Value) -> RpcError {
        RpcError {
            code: v.get("code").and_then(as_int),
            message: v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            data: v.get("data").cloned().unwrap_or(Value::Null),
        }
    }

    /// `error.data.code == "SESSION_BACKUP_NOT_READY"` and `error.data.retryable === true`.
    pub(crate) fn is_backup_not_ready(&self) -> bool {
        self.data.get("code").and_then(Value::as_str) == Some("SESSION_BACKUP_NOT_READY")
            && self.data.get("retryable") == Some(&Value::Bool(true))
    }
}

/// Which wrapper the object came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Task,
    StatusUpdate,
    ArtifactUpdate,
    Message,
    /// `result` itself (GetTask / CancelTask results) or a payload without `result`.
    Bare,
}

/// One unwrapped A2A object.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aEvent {
    pub kind: Kind,
    body: Body,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Value(Value),
    /// A status update of the text-delta shape, read without building a `Value` (most of a
    /// run's frames; see [`Payload::from_delta_frame`]).
    Delta(Delta),
}

/// The fields of a text-delta status update; nothing else was in the frame.
#[derive(Debug, Clone, PartialEq)]
struct Delta {
    /// The frame as it came: a field without escapes is read where it is (no copy per frame).
    frame: String,
    /// The fields that had escapes (or were joined from several parts), one after another.
    unescaped: String,
    /// Where each field is (`None`: absent or null), indexed by the `F_*` constants.
    spans: [Option<Span>; 7],
    /// `status.message` was an object.
    has_message: bool,
}

/// A field's place: in the frame, or in `Delta::unescaped`. Offsets are u32: a frame is at
/// most 16 MiB (limits::MAX_EVENT_BYTES).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Span {
    start: u32,
    end: u32,
    unescaped: bool,
}

impl Span {
    /// `None` past u32 (a frame never is: the event size limit is far below).
    fn at(start: usize, end: usize, unescaped: bool) -> Option<Span> {
        Some(Span {
            start: u32::try_from(start).ok()?,
            end: u32::try_from(end).ok()?,
            unescaped,
        })
    }
}

const F_TASK: usize = 0;
const F_CONTEXT: usize = 1;
const F_STATE: usize = 2;
const F_SESSION: usize = 3;
const F_MESSAGE_ID: usize = 4;
const F_ROLE: usize = 5;
const F_TEXT: usize = 6;

/// Where a delta frame's fields are, and the ones that had to be unescaped.
struct Located {
    spans: [Option<Span>; 7],
    unescaped: String,
    /// `status.message` was an object.
    has_message: bool,
}

/// The last delta frame read in full, while a burst of them is read (a text stream's frames
/// differ in their text only: the same task, context, state, session, message and role).
/// Empty between bursts: a waiting stream holds none of it. Measured (issue 37, shipped build):
/// without it 2.8–3.35 µs per event and 0.25–0.31 of the direct read; with it 1.55–1.75 µs and
/// 0.54–0.55 (docs/performance.md). Each read it answers is counted
/// (`iac_agui_upstream_frames_total{read="template"}`): `tests/it/tuning.rs` and the benchmark's
/// "delta path share" rows fail when a text stream stops being read by it.
#[derive(Default)]
pub(crate) struct Template {
    frame: String,
    spans: [Option<Span>; 7],
}

/// The largest frame kept as a template.
const TEMPLATE_MAX: usize = 64 * 1024;

impl Template {
    /// Keep `frame` (read in full into `spans`) when it can stand for the next ones: its
    /// text is one part read in place and no field needed unescaping (those are not kept).
    fn keep(&mut self, frame: &str, spans: &[Option<Span>; 7]) {
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

    /// The template `prev` leaves (tests and the fuzz target).
    fn of(prev: &[u8]) -> Template {
        let mut t = Template::default();
        let _ = Payload::read_delta(prev.to_vec(), &mut t);
        t
    }

    /// The space the template holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.frame.capacity()
    }

    /// Forget the template and its space (before a read that may wait).
    pub(crate) fn release(&mut self) {
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
                *s = Span::at(moved(s.start), moved(s.end), false)?;
            }
        }
        let (span, unescaped) = match text {
            Cow::Borrowed(_) => (Span::at(ts, end, false)?, String::new()),
            Cow::Owned(o) => (Span::at(0, o.len(), true)?, o),
        };
        spans[F_TEXT] = Some(span);
        Some(Located {
            spans,
            unescaped,
            has_message: true,
        })
    }
}

impl Delta {
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
                    Span::at(start, start + v.len(), false)?
                }
                _ => {
                    let start = unescaped.len();
                    unescaped.push_str(v);
                    Span::at(start, unescaped.len(), true)?
                }
            });
        }
        Some(Located {
            spans,
            unescaped,
            has_message: f.text.is_some(),
        })
    }

    fn get(&self, f: usize) -> Option<&str> {
        let s = self.spans[f]?;
        let from = if s.unescaped {
            &self.unescaped
        } else {
            &self.frame
        };
        from.get(s.start as usize..s.end as usize)
    }

    fn non_empty(&self, f: usize) -> Option<&str> {
        self.get(f).filter(|s| !s.is_empty())
    }
}

/// The agent-visible part of a status message: what the projection reads of it.
#[derive(Debug, PartialEq)]
pub(crate) struct StatusMessage<'a> {
    /// `None` when absent or not a string.
    pub(crate) role: Option<&'a str>,
    /// Non-empty `messageId`.
    pub(crate) message_id: Option<&'a str>,
    /// The `text` of every part, joined.
    pub(crate) text: Cow<'a, str>,
}

/// A JSON-RPC payload: an error, or an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Error(RpcError),
    Event(A2aEvent),
}

impl Payload {
    /// The text-delta shape read straight into its fields; the frame back when it has any
    /// other shape (then [`Payload::from_value`] reads it: same answers, more work).
    pub fn from_delta_frame(data: Vec<u8>) -> Result<Payload, Vec<u8>> {
        Payload::read_delta(data, &mut Template::default())
    }

    /// [`Payload::from_delta_frame`] against the last delta frame of the burst: a frame that
    /// is that one with another text is read by checking the rest is the same bytes (the
    /// text is the only part read). A frame read in full becomes the template.
    pub(crate) fn read_delta(data: Vec<u8>, template: &mut Template) -> Result<Payload, Vec<u8>> {
        // The whole frame is checked for UTF-8, as the `Value` read would.
        let frame = String::from_utf8(data).map_err(std::string::FromUtf8Error::into_bytes)?;
        // Counted so that a change which stops a text stream's frames from reaching either
        // read shows as a failed row (`tests/it/tuning.rs`, the benchmark's "delta path share").
        let located = match template.read(&frame) {
            Some(l) => {
                crate::metrics::M.frames_template.inc();
                Some(l)
            }
            None => Delta::locate(&frame).inspect(|l| {
                crate::metrics::M.frames_delta.inc();
                template.keep(&frame, &l.spans);
            }),
        };
        match located {
            Some(Located {
                spans,
                unescaped,
                has_message,
            }) => Ok(Payload::Event(A2aEvent {
                kind: Kind::StatusUpdate,
                body: Body::Delta(Delta {
                    frame,
                    unescaped,
                    spans,
                    has_message,
                }),
            })),
            None => Err(frame.into_bytes()),
        }
    }

    /// Classify a JSON-RPC response or stream item (reference §4.5, with the REC for errors).
    pub fn from_value(mut v: Value) -> Payload {
        if let Some(err) = v.get("error").filter(|e| e.is_object())
            && v.get("result").is_none()
        {
            return Payload::Error(RpcError::from_value(err));
        }
        let Some(result) = v
            .get_mut("result")
            .filter(|r| r.is_object())
            .map(Value::take)
        else {
            return Payload::Event(A2aEvent::new(Kind::Bare, v));
        };
        let mut result = result;
        for (key, kind) in [
            ("task", Kind::Task),
            ("statusUpdate", Kind::StatusUpdate),
            ("artifactUpdate", Kind::ArtifactUpdate),
            ("message", Kind::Message),
        ] {
            if result.get(key).is_some_and(Value::is_object) {
                let obj = result.get_mut(key).map(Value::take).unwrap_or(Value::Null);
                return Payload::Event(A2aEvent::new(kind, obj));
            }
        }
        Payload::Event(A2aEvent::new(Kind::Bare, std::mem::take(&mut result)))
    }
}

fn non_empty_str(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

impl A2aEvent {
    pub fn new(kind: Kind, obj: Value) -> A2aEvent {
        A2aEvent {
            kind,
            body: Body::Value(obj),
        }
    }

    /// The object, unless it was a text delta read without building one.
    pub fn value(&self) -> Option<&Value> {
        match &self.body {
            Body::Value(v) => Some(v),
            Body::Delta(_) => None,
        }
    }

    /// `taskId`, else `id` (non-empty strings).
    pub fn task_id(&self) -> Option<&str> {
        match &self.body {
            Body::Value(v) => non_empty_str(v.get("taskId")).or_else(|| non_empty_str(v.get("id"))),
            Body::Delta(d) => d.non_empty(F_TASK),
        }
    }

    pub(crate) fn context_id(&self) -> Option<&str> {
        match &self.body {
            Body::Value(v) => non_empty_str(v.get("contextId")),
            Body::Delta(d) => d.non_empty(F_CONTEXT),
        }
    }

    fn status(&self) -> Option<&Value> {
        self.value()?.get("status").filter(|s| s.is_object())
    }

    pub fn state(&self) -> Option<TaskState> {
        match &self.body {
            Body::Value(_) => self
                .status()?
                .get("state")
                .and_then(Value::as_str)
                .map(TaskState::parse),
            Body::Delta(d) => d.get(F_STATE).map(TaskState::parse),
        }
    }

    /// `status.message` when it is an object: its role, id and text.
    pub(crate) fn status_message(&self) -> Option<StatusMessage<'_>> {
        match &self.body {
            Body::Value(_) => {
                let m = self.status()?.get("message")?.as_object()?;
                Some(StatusMessage {
                    role: m.get("role").and_then(Value::as_str),
                    message_id: non_empty_str(m.get("messageId")),
                    text: Cow::Owned(parts_text(m.get("parts"))),
                })
            }
            Body::Delta(d) => d.has_message.then(|| StatusMessage {
                role: d.get(F_ROLE),
                message_id: d.non_empty(F_MESSAGE_ID),
                text: Cow::Borrowed(d.get(F_TEXT).unwrap_or("")),
            }),
        }
    }

    /// `metadata.iac_code` when it is an object. A text delta's `iac_code` holds only the
    /// session id, which [`A2aEvent::session_id`] answers: here it is `None`.
    pub fn iac(&self) -> Option<&Map<String, Value>> {
        self.value()?.get("metadata")?.get("iac_code")?.as_object()
    }

    /// First non-empty of `iac_code.iacCodeSessionId`, `iac_code.pipeline.iacCodeSessionId`,
    /// `iac_code.pipelineBatch.events[i].iacCodeSessionId`.
    pub fn session_id(&self) -> Option<&str> {
        if let Body::Delta(d) = &self.body {
            return d.non_empty(F_SESSION);
        }
        let iac = self.iac()?;
        if let Some(s) = non_empty_str(iac.get("iacCodeSessionId")) {
            return Some(s);
        }
        if let Some(s) = iac
            .get("pipeline")
            .and_then(|p| non_empty_str(p.get("iacCodeSessionId")))
        {
            return Some(s);
        }
        iac.get("pipelineBatch")?
            .get("events")?
            .as_array()?
            .iter()
            .find_map(|e| non_empty_str(e.get("iacCodeSessionId")))
    }

    /// The artifact of an artifactUpdate.
    pub(crate) fn artifact(&self) -> Option<&Map<String, Value>> {
        self.value()?.get("artifact")?.as_object()
    }

    pub(crate) fn history(&self) -> Option<&Vec<Value>> {
        self.value()?.get("history")?.as_array()
    }
}

/// The `text` of every part of a message's `parts`, joined.
pub(crate) fn parts_text(parts: Option<&Value>) -> String {
    let mut s = String::new();
    if let Some(Value::Array(ps)) = parts {
        for t in ps.iter().filter_map(|p| p.get("text")?.as_str()) {
            s.push_str(t);
        }
    }
    s
}

/// For tests and the `delta_frame` fuzz target: when the typed read of `data` succeeds, the
/// `Value` read must succeed too and every question the adapter asks of the event must get
/// the same answer. `Ok(true)`: the typed read took the frame; `Err`: the two disagree.
#[doc(hidden)]
pub fn delta_agrees(data: &[u8]) -> Result<bool, String> {
    let Ok(Payload::Event(fast)) = Payload::from_delta_frame(data.to_vec()) else {
        return Ok(false);
    };
    let v: Value =
        serde_json::from_slice(data).map_err(|e| format!("typed read took non-JSON: {e}"))?;
    let Payload::Event(slow) = Payload::from_value(v) else {
        return Err("typed read took an error payload".into());
    };
    let iac_extra = slow
        .iac()
        .is_some_and(|m| m.keys().any(|k| k != "iacCodeSessionId"));
    let checks = [
        ("kind", fast.kind == slow.kind),
        ("task_id", fast.task_id() == slow.task_id()),
        ("context_id", fast.context_id() == slow.context_id()),
        ("state", fast.state() == slow.state()),
        ("session_id", fast.session_id() == slow.session_id()),
        (
            "status_message",
            fast.status_message() == slow.status_message(),
        ),
        ("iac", fast.iac().is_none() && !iac_extra),
        (
            "history",
            fast.history().is_none() && slow.history().is_none(),
        ),
        (
            "artifact",
            fast.artifact().is_none() && slow.artifact().is_none(),
        ),
    ];
    match checks.iter().find(|(_, ok)| !ok) {
        Some((what, _)) => Err(format!("typed and Value reads differ on {what}")),
        None => Ok(true),
    }
}

/// For tests and the `delta_frame` fuzz target: `data` read against the template `prev`
/// leaves is read exactly as it is on its own (the same fields from the same places, or
/// refused both ways). `Ok(true)`: the template took it.
#[doc(hidden)]
pub fn template_agrees(prev: &[u8], data: &[u8]) -> Result<bool, String> {
    let mut t = Template::of(prev);
    let took = std::str::from_utf8(data).is_ok_and(|f| t.read(f).is_some());
    let with = Payload::read_delta(data.to_vec(), &mut t).ok();
    let alone = Payload::from_delta_frame(data.to_vec()).ok();
    if with != alone {
        return Err(format!(
            "read against the template: {with:?}\nread alone: {alone:?}"
        ));
    }
    Ok(took)
}

/// For the `delta_frame` fuzz target: `prev` with the bytes of its text (between the
/// quotes) replaced by `text`, when `prev` is kept as a template (`None` otherwise). Any
/// bytes may stand there, so every such frame puts the template's shortcut to the test.
#[doc(hidden)]
pub fn template_splice(prev: &[u8], text: &[u8]) -> Option<Vec<u8>> {
    let t = Template::of(prev);
    if t.frame.is_empty() {
        return None;
    }
    let s = t.spans[F_TEXT]?;
    let (head, tail) = (prev.get(..s.start as usize)?, prev.get(s.end as usize..)?);
    Some([head, text, tail].concat())
}

/// An integer as the kernel may send it: a JSON integer or an integral finite float (`7.0`);
/// never a boolean (reference §4.5).
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Some(i);
            }
            let f = n.as_f64()?;
            if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
                Some(f as i64)
            } else {
                None
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
