//! Typed views of A2A 1.0 proto-JSON payloads (reference a2a-upstream §4, §5, agui-reference §4.5).
//!
//! The objects stay `serde_json::Value` (pass-through data keeps its key order); this module
//! only answers questions about them. JSON-RPC `error` payloads are recognised explicitly and
//! never read as a task (a quirk of the reference).

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
    pub(crate) fn parse(raw: &str) -> TaskState {
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
    pub obj: Value,
}

/// A JSON-RPC payload: an error, or an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Error(RpcError),
    Event(A2aEvent),
}

impl Payload {
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
            return Payload::Event(A2aEvent {
                kind: Kind::Bare,
                obj: v,
            });
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
                return Payload::Event(A2aEvent { kind, obj });
            }
        }
        Payload::Event(A2aEvent {
            kind: Kind::Bare,
            obj: std::mem::take(&mut result),
        })
    }
}

fn non_empty_str(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

impl A2aEvent {
    /// `taskId`, else `id` (non-empty strings).
    pub fn task_id(&self) -> Option<&str> {
        non_empty_str(self.obj.get("taskId")).or_else(|| non_empty_str(self.obj.get("id")))
    }

    pub(crate) fn context_id(&self) -> Option<&str> {
        non_empty_str(self.obj.get("contextId"))
    }

    pub(crate) fn status(&self) -> Option<&Value> {
        self.obj.get("status").filter(|s| s.is_object())
    }

    pub fn state(&self) -> Option<TaskState> {
        self.status()?
            .get("state")
            .and_then(Value::as_str)
            .map(TaskState::parse)
    }

    /// `metadata.iac_code` when it is an object.
    pub fn iac(&self) -> Option<&Map<String, Value>> {
        self.obj.get("metadata")?.get("iac_code")?.as_object()
    }

    /// First non-empty of `iac_code.iacCodeSessionId`, `iac_code.pipeline.iacCodeSessionId`,
    /// `iac_code.pipelineBatch.events[i].iacCodeSessionId`.
    pub fn session_id(&self) -> Option<&str> {
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
        self.obj.get("artifact")?.as_object()
    }

    pub(crate) fn history(&self) -> Option<&Vec<Value>> {
        self.obj.get("history")?.as_array()
    }
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_normalise() {
        assert_eq!(
            TaskState::parse("TASK_STATE_INPUT_REQUIRED"),
            TaskState::InputRequired
        );
        assert_eq!(TaskState::parse(" working "), TaskState::Working);
        assert_eq!(TaskState::parse("auth_required"), TaskState::AuthRequired);
        assert_eq!(
            TaskState::parse("TASK_STATE_UNSPECIFIED"),
            TaskState::Other("unspecified".into())
        );
        assert!(TaskState::Canceled.is_terminal());
        assert!(TaskState::InputRequired.is_stop());
        assert!(!TaskState::Working.is_stop());
    }

    #[test]
    fn unwrapping() {
        let p = Payload::from_value(
            json!({"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}},"id":"x","jsonrpc":"2.0"}),
        );
        let Payload::Event(e) = p else { panic!() };
        assert_eq!(e.kind, Kind::StatusUpdate);
        assert_eq!(e.task_id(), Some("t"));
        assert_eq!(e.state(), Some(TaskState::Working));
        let p = Payload::from_value(
            json!({"result":{"id":"t2","contextId":"c","status":{"state":"TASK_STATE_CANCELED"}},"id":"x","jsonrpc":"2.0"}),
        );
        let Payload::Event(e) = p else { panic!() };
        assert_eq!((e.kind, e.task_id()), (Kind::Bare, Some("t2")));
    }

    #[test]
    fn rpc_errors_are_never_tasks() {
        let p = Payload::from_value(
            json!({"error":{"code":-32602,"message":"Session backup is still synchronizing. Retry after 3 seconds.","data":{"code":"SESSION_BACKUP_NOT_READY","retryable":true}},"id":"abc","jsonrpc":"2.0"}),
        );
        let Payload::Error(e) = p else { panic!() };
        assert_eq!(e.code, Some(-32602));
        assert!(e.is_backup_not_ready());
        let p = Payload::from_value(
            json!({"error":{"code":-32001,"message":"Task not found","data":[{"reason":"TASK_NOT_FOUND"}]},"id":"abc","jsonrpc":"2.0"}),
        );
        let Payload::Error(e) = p else { panic!() };
        assert!(!e.is_backup_not_ready());
    }

    #[test]
    fn session_id_sources() {
        let e = A2aEvent {
            kind: Kind::StatusUpdate,
            obj: json!({"metadata":{"iac_code":{"pipelineBatch":{"events":[{"x":1},{"iacCodeSessionId":"s3"}]}}}}),
        };
        assert_eq!(e.session_id(), Some("s3"));
    }

    #[test]
    fn integers_accept_integral_floats_only() {
        let v: Value = serde_json::from_str(r#"[7, 7.0, 7.5, true, "7", 1e3, -0.0]"#).unwrap();
        let got: Vec<Option<i64>> = v.as_array().unwrap().iter().map(as_int).collect();
        assert_eq!(
            got,
            [Some(7), Some(7), None, None, None, Some(1000), Some(0)]
        );
    }
}
