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
    /// run's frames; see `a2a/frame.rs`).
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
    spans: [Option<FieldAt>; 7],
    /// `status.message` was an object.
    has_message: bool,
}

/// A field's place: in the frame, or in `Delta::unescaped`. Offsets are u32: a frame is at
/// most 16 MiB (limits::MAX_EVENT_BYTES).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct FieldAt {
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) unescaped: bool,
}

impl FieldAt {
    /// `None` past u32 (a frame never is: the event size limit is far below).
    pub(super) fn at(start: usize, end: usize, unescaped: bool) -> Option<FieldAt> {
        Some(FieldAt {
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
pub(super) const F_TEXT: usize = 6;

/// Where a delta frame's fields are, and the ones that had to be unescaped (what
/// `a2a/frame.rs` finds by either of its typed reads).
pub(super) struct Located {
    pub(super) spans: [Option<FieldAt>; 7],
    pub(super) unescaped: String,
    /// `status.message` was an object.
    pub(super) has_message: bool,
}

impl Delta {
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
    /// A text-delta status update from its frame and where its fields are in it.
    pub(super) fn of_delta(frame: String, l: Located) -> Payload {
        let Located {
            spans,
            unescaped,
            has_message,
        } = l;
        Payload::Event(A2aEvent {
            kind: Kind::StatusUpdate,
            body: Body::Delta(Delta {
                frame,
                unescaped,
                spans,
                has_message,
            }),
        })
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
