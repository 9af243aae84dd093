//! What the run driver needs from the kernel (`Upstream`, one per run; `Kernel` makes them),
//! and the A2A message it sends (reference §4.2). The A2A client implements the traits; unit
//! tests of the driver use an in-memory fake.

use serde_json::{Map, Value, json};

use crate::a2a::A2aError;
use crate::a2a::client::{A2aClient, EventStream, Restore, Session};
use crate::a2a::types::Payload;
use crate::agui::input::{IacProps, RareProps};
use crate::i18n::Lang;

/// One run's conversation with the kernel.
pub(crate) trait Upstream: Send {
    fn send_streaming_message(&self, params: Value) -> Result<EventStream, A2aError>;
    fn send_message(&self, params: Value) -> Result<Payload, A2aError>;
    fn get_task(&self, task_id: &str) -> Result<Payload, A2aError>;
    fn cancel_task(&self, task_id: &str) -> Result<Payload, A2aError>;
    fn subscribe(&self, task_id: &str) -> Result<EventStream, A2aError>;
    fn ensure_restored(
        &self,
        cwd: Option<&str>,
        session_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Result<Restore, A2aError>;
    fn pipeline_state(&self, task_id: &str, after: i64) -> Result<Option<Value>, A2aError>;
    /// A closure that aborts this session's I/O from another thread (blocked reads return).
    fn aborter(&self) -> Box<dyn FnOnce() + Send>;
    /// Streams opened from now on read large events only once `budget` has room.
    fn gate_reads(&mut self, _budget: std::sync::Arc<crate::budget::Budget>) {}
}

/// Where sessions come from. A fresh session is also used for best-effort cancels, because a
/// run's own session may have been aborted when its client left.
pub(crate) trait Kernel: Send + Sync {
    fn session(&self) -> Box<dyn Upstream>;
}

impl Kernel for A2aClient {
    fn session(&self) -> Box<dyn Upstream> {
        Box::new(A2aClient::session(self))
    }
}

impl Upstream for Session {
    fn send_streaming_message(&self, params: Value) -> Result<EventStream, A2aError> {
        Session::send_streaming_message(self, params)
    }
    fn send_message(&self, params: Value) -> Result<Payload, A2aError> {
        Session::send_message(self, params)
    }
    fn get_task(&self, task_id: &str) -> Result<Payload, A2aError> {
        Session::get_task(self, task_id)
    }
    fn cancel_task(&self, task_id: &str) -> Result<Payload, A2aError> {
        Session::cancel_task(self, task_id)
    }
    fn subscribe(&self, task_id: &str) -> Result<EventStream, A2aError> {
        Session::subscribe(self, task_id)
    }
    fn ensure_restored(
        &self,
        cwd: Option<&str>,
        session_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Result<Restore, A2aError> {
        Session::ensure_restored(self, cwd, session_id, task_id)
    }
    fn pipeline_state(&self, task_id: &str, after: i64) -> Result<Option<Value>, A2aError> {
        Session::pipeline_state(self, task_id, after)
    }
    fn aborter(&self) -> Box<dyn FnOnce() + Send> {
        Session::aborter(self)
    }
    fn gate_reads(&mut self, budget: std::sync::Arc<crate::budget::Budget>) {
        Session::gate_reads(self, budget);
    }
}

/// `message.metadata` of every message a run sends: `iac_code` keys in the reference's order.
pub(crate) fn metadata(p: &IacProps, lang: Lang, cwd: &str) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    let none = RareProps::default();
    let r = p.rare.as_deref().unwrap_or(&none);
    if let Some(v) = &p.user_id {
        put("user_id", v.clone().into());
    }
    if let Some(v) = &r.channel {
        put("channel", v.clone().into());
    }
    put("preferredLanguage", lang.code().into());
    if let Some(v) = &r.candidate_presentation {
        put("candidatePresentation", v.clone().into());
    }
    if let Some(v) = &p.run_mode {
        put("run_mode", v.clone().into());
    }
    if let Some(v) = &r.pipeline_name {
        put("pipeline_name", v.clone().into());
    }
    put("cleanupOnly", p.cleanup_only.into());
    put("rosInvocationId", p.ros_invocation_id.clone().into());
    if let Some(h) = &r.llm_headers {
        put("llm_headers", Value::Object(h.clone()));
    }
    if let Some(c) = &r.alibaba_cloud {
        for (k, v) in [
            ("alibaba_cloud_access_key_id", &c.access_key_id),
            ("alibaba_cloud_access_key_secret", &c.access_key_secret),
            ("alibaba_cloud_security_token", &c.security_token),
            ("alibaba_cloud_region_id", &c.region_id),
        ] {
            if let Some(v) = v {
                put(k, v.clone().into());
            }
        }
    }
    put("cwd", cwd.into());
    if let Some(model) = r.model.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        put("iac_code_model", model.into());
    }
    if let Some(key) = r
        .llm_api_key
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        put("iac_code_api_key", key.into());
    }
    if let Some(t) = &r.thinking {
        let mut th = Map::new();
        th.insert("enabled".into(), t.enabled.into());
        if let Some(e) = t.effort.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            th.insert("effort".into(), e.into());
        }
        if let Some(b) = &t.budget {
            th.insert("budget".into(), Value::Number(b.clone()));
        }
        put("thinking", Value::Object(th));
    }
    if let Some(sel) = &r.resource_selector {
        let cap = json!({"schemaVersion": 1, "queryMode": sel.query_mode, "profileHash": sel.profile_hash});
        put("capabilities", json!({ "resourceSelector": cap }));
    }
    json!({ "iac_code": m })
}

/// The `SendMessage` / `SendStreamingMessage` params.
pub(crate) fn message(
    message_id: &str,
    parts: Vec<Value>,
    metadata: Value,
    context_id: &str,
    task_id: Option<&str>,
) -> Value {
    let mut msg = Map::new();
    msg.insert("messageId".into(), message_id.into());
    msg.insert("role".into(), "ROLE_USER".into());
    msg.insert("parts".into(), Value::Array(parts));
    msg.insert("metadata".into(), metadata);
    msg.insert("contextId".into(), context_id.into());
    if let Some(t) = task_id {
        msg.insert("taskId".into(), t.into());
    }
    json!({"message": Value::Object(msg), "configuration": {"acceptedOutputModes": ["text/plain"]}})
}

/// The six-key permission answer part (A2A notes §3.3).
pub(crate) fn permission_part(
    task: &str,
    input_id: &str,
    tool_use_id: Option<&Value>,
    decision: Value,
) -> Value {
    let tool = tool_use_id
        .map(crate::adapter::rules::interrupts::py_str)
        .unwrap_or_else(|| "None".into());
    json!({"data": {"schemaVersion": 1, "kind": "permission", "requestTaskId": task, "inputId": input_id, "toolUseId": tool, "decision": decision}, "mediaType": "application/json"})
}
