//! Task snapshots, agent messages and timestamps in the kernel's proto-JSON shapes.

use super::*;

/// RFC 3339 UTC with microseconds, as the kernel's protobuf timestamps.
pub(crate) fn rfc3339_micros(t: SystemTime) -> String {
    crate::rfc3339::format_micros(t)
}

pub(super) fn now_ts() -> String {
    rfc3339_micros(crate::clock::Clock::wall(&crate::clock::SystemClock))
}

pub(super) fn snapshot(t: &Task) -> Value {
    let mut status = json!({"state": t.state});
    if let Some(m) = &t.last_message {
        status["message"] = m.clone();
    }
    status["timestamp"] = now_ts().into();
    let mut iac = Map::new();
    iac.insert("iacCodeSessionId".into(), t.session_id.clone().into());
    if let Some(p) = &t.pending {
        if p.kind == "resource" {
            iac.insert("inputRequired".into(), p.input.clone());
        } else if p.kind != "pipeline-confirm" {
            // (A deployment confirmation has no projection: only its pipeline event.)
            iac.insert("input".into(), p.input.clone());
            if p.kind == "pipeline-resource" {
                iac.insert("inputRequired".into(), p.input.clone());
            }
        }
    }
    let mut v = json!({"id": t.id, "contextId": t.context_id, "status": status});
    let n = t.history.len();
    v["history"] = Value::Array(t.history[n.saturating_sub(100)..].to_vec());
    v["metadata"] = json!({"iac_code": iac});
    v
}

pub(super) fn agent_message(t: &Task, message_id: &str, text: &str) -> Value {
    json!({"messageId": message_id, "contextId": t.context_id, "taskId": t.id, "role": "ROLE_AGENT", "parts": [{"text": text}]})
}

pub(super) fn finish_task(shared: &Arc<Shared>, task_id: &str) {
    if let Some(t) = lock(&shared.tasks).get_mut(task_id) {
        t.live = false;
        t.subscribers.clear();
    }
}
