//! The kernel's `deployment_confirmation` (a pipeline step whose `ui_mode` asks to confirm a
//! deployment, iac-code 0.16.0 `pipeline/engine/pipeline_runner.py`). The kernel projects no
//! `iac_code.input` for it (`_unified_input_projection` knows only questions, candidate and
//! resource selections): it comes only as the step's `input_required` pipeline event, the
//! task `INPUT_REQUIRED`, and takes the next text on the task as its answer, parsed by
//! `parse_deployment_confirmation` (`pipeline/engine/ui_contract.py`): a JSON object with
//! `action` (`confirm`, `adjust`, `reselect`, `cancel`) and optional `parameter_overrides`,
//! anything else read as natural language. In 1.0 mode it is an interrupt of its own; 0.1
//! mode keeps the reference's reading (no interrupt: the run succeeds, the user types).

use serde_json::{Map, Value, json};

use super::{FoundInput, py_str, truthy};
use crate::a2a::types::A2aEvent;

/// The kind, also the interrupt's `reason`.
pub(crate) const DEPLOYMENT_CONFIRMATION: &str = "deployment_confirmation";

/// Every action `parse_deployment_confirmation` takes.
const ACTIONS: [&str; 4] = ["confirm", "adjust", "reselect", "cancel"];

/// The step's waiting event, if this status carries one: the last pipeline envelope.
fn waiting_event(ev: &A2aEvent) -> Option<&Map<String, Value>> {
    let iac = ev.iac()?;
    let env = match iac.get("pipeline") {
        Some(e) => e,
        None => iac
            .get("pipelineBatch")?
            .get("events")?
            .as_array()?
            .last()?,
    };
    let env = env.as_object()?;
    (env.get("eventType").and_then(Value::as_str) == Some("input_required")).then_some(env)
}

/// The confirmation a status asks for, as a pending input: the prompt and options, and the
/// rest of the kernel's data (solution, template, cost, parameters) under `deployment`. Its
/// id is the event's (the kernel gives the wait no input id; a replayed event keeps it).
pub(crate) fn found(ev: &A2aEvent) -> Option<FoundInput> {
    let env = waiting_event(ev)?;
    let data = env.get("data")?.as_object()?;
    if data.get("kind").and_then(Value::as_str) != Some(DEPLOYMENT_CONFIRMATION) {
        return None;
    }
    let event_id = env
        .get("eventId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())?;
    let id = format!("confirm-{event_id}");
    let mut value = Map::new();
    value.insert("schemaVersion".into(), json!(1));
    value.insert("kind".into(), DEPLOYMENT_CONFIRMATION.into());
    value.insert("inputId".into(), id.clone().into());
    if let Some(p) = data.get("prompt").filter(|p| truthy(Some(p))) {
        value.insert("prompt".into(), p.clone());
    }
    value.insert("required".into(), true.into());
    let options = data.get("options").filter(|o| o.is_array());
    value.insert(
        "options".into(),
        options.cloned().unwrap_or_else(|| json!([])),
    );
    let rest: Map<String, Value> = data
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "kind" | "prompt" | "options"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    value.insert("deployment".into(), Value::Object(rest));
    Some(FoundInput {
        id,
        value,
        sideband: false,
    })
}

/// `(action, name)` of each offered option the kernel would take, in its order.
pub(crate) fn options(value: &Map<String, Value>) -> Vec<(String, String)> {
    let Some(Value::Array(opts)) = value.get("options") else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for o in opts {
        let Some(action) = o
            .get("action")
            .and_then(Value::as_str)
            .map(|a| a.trim().to_lowercase())
            .filter(|a| ACTIONS.contains(&a.as_str()))
        else {
            continue;
        };
        if out.iter().any(|(a, _)| *a == action) {
            continue;
        }
        let name = ["name", "label", "title"]
            .iter()
            .find_map(|k| o.get(*k).filter(|v| truthy(Some(v))).map(py_str))
            .unwrap_or_else(|| action.clone());
        out.push((action, name));
    }
    out
}

/// What the kernel accepts: an offered action (every action when none is offered), with
/// parameter overrides (non-blank names), or free text it reads as natural language.
pub(crate) fn schema(value: &Map<String, Value>) -> Value {
    let offered = options(value);
    let actions: Vec<Value> = if offered.is_empty() {
        ACTIONS.iter().map(|a| json!(a)).collect()
    } else {
        offered.iter().map(|(a, _)| json!(a)).collect()
    };
    let non_space = crate::adapter::rules::schema::NON_SPACE;
    json!({"oneOf": [
        {"type": "object", "properties": {
            "action": {"type": "string", "enum": actions},
            "parameterOverrides": {"type": "object", "propertyNames": {"minLength": 1, "pattern": non_space}}},
         "required": ["action"], "additionalProperties": false},
        {"type": "object", "properties": {"freeText": {"type": "string", "minLength": 1, "pattern": non_space}},
         "required": ["freeText"], "additionalProperties": false}
    ]})
}

/// The interrupt's message: the prompt and a line per option.
pub(crate) fn message(value: &Map<String, Value>, fallback: &str) -> String {
    let prompt = value
        .get("prompt")
        .filter(|p| truthy(Some(p)))
        .map(py_str)
        .unwrap_or_else(|| fallback.to_string());
    let lines: Vec<String> = options(value)
        .iter()
        .map(|(a, n)| format!("- {a}: {n}"))
        .collect();
    if lines.is_empty() {
        prompt
    } else {
        format!("{prompt}\n{}", lines.join("\n"))
    }
}

/// The text the kernel parses for a structured answer (already valid against `schema`):
/// `encode_deployment_confirmation`'s, `json.dumps({"action": …, "parameter_overrides": …},
/// ensure_ascii=False)`, overrides only when given.
pub(crate) fn answer_text(payload: &Value) -> Option<String> {
    let action = payload.get("action")?.as_str()?;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"action\": ");
    crate::json::write_str(action, &mut out);
    if let Some(o) = payload.get("parameterOverrides") {
        out.extend_from_slice(b", \"parameter_overrides\": ");
        py_dumps(o, &mut out);
    }
    out.push(b'}');
    String::from_utf8(out).ok()
}

/// Python `json.dumps(v, ensure_ascii=False)` (default separators, keys in their order).
fn py_dumps(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                py_dumps(x, out);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            out.push(b'{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                crate::json::write_str(k, out);
                out.extend_from_slice(b": ");
                py_dumps(x, out);
            }
            out.push(b'}');
        }
        scalar => out.extend_from_slice(&crate::json::canonical(scalar)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::types::Kind;

    fn status(env: Value) -> A2aEvent {
        A2aEvent::new(
            Kind::StatusUpdate,
            json!({"status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "metadata": {"iac_code": {"pipeline": env}}}),
        )
    }

    fn kernel_event() -> Value {
        json!({"eventId": "evt-1", "eventType": "input_required", "status": "input_required", "data": {
            "stepId": "confirm_deployment", "prompt": "Choose the next action",
            "options": [{"action": "confirm", "name": "Confirm deployment", "summary": "Create"},
                        {"action": "cancel", "name": "Cancel", "summary": "End"}],
            "kind": "deployment_confirmation", "solution_summary": "Two ECS", "template_url": "t.yaml",
            "cost": {"total": "¥1"}, "effective_deployment_parameters": {"Zone": "a"},
            "parameter_overrides": {}, "preview_ready_for_create": true}})
    }

    #[test]
    fn the_kernels_waiting_event_is_a_confirmation_with_its_data() {
        let f = found(&status(kernel_event())).unwrap();
        assert_eq!(f.id, "confirm-evt-1");
        assert!(!f.sideband);
        assert_eq!(f.value["deployment"]["solution_summary"], "Two ECS");
        assert_eq!(f.value["deployment"]["stepId"], "confirm_deployment");
        assert!(f.value["deployment"].get("kind").is_none());
        assert_eq!(
            options(&f.value),
            [
                ("confirm".to_string(), "Confirm deployment".to_string()),
                ("cancel".to_string(), "Cancel".to_string())
            ]
        );
        assert_eq!(
            message(&f.value, "x"),
            "Choose the next action\n- confirm: Confirm deployment\n- cancel: Cancel"
        );
        // Other waits are not confirmations.
        let mut q = kernel_event();
        q["data"]["kind"] = json!("candidate_selection");
        assert!(found(&status(q)).is_none());
        let mut no_id = kernel_event();
        no_id["eventId"] = json!("");
        assert!(found(&status(no_id)).is_none());
    }

    #[test]
    fn the_schema_takes_offered_actions_overrides_and_free_text() {
        let f = found(&status(kernel_event())).unwrap();
        let s = schema(&f.value);
        let ok = |p: Value| crate::adapter::rules::schema::is_valid(&s, &p);
        assert!(ok(json!({"action": "confirm"})));
        assert!(ok(
            json!({"action": "confirm", "parameterOverrides": {"Zone": "b"}})
        ));
        assert!(ok(json!({"freeText": "use zone b"})));
        assert!(!ok(json!({"action": "reselect"})));
        assert!(!ok(
            json!({"action": "confirm", "parameterOverrides": {" ": 1}})
        ));
        assert!(!ok(json!({"action": "confirm", "parameterOverrides": []})));
        assert!(!ok(json!({"action": "confirm", "x": 1})));
        assert!(!ok(json!({"freeText": "  "})));
    }

    #[test]
    fn the_answer_is_encode_deployment_confirmations_text() {
        assert_eq!(
            answer_text(&json!({"action": "confirm"})).unwrap(),
            r#"{"action": "confirm"}"#
        );
        assert_eq!(
            answer_text(&json!({"action": "adjust", "parameterOverrides": {"Zone": "杭州 b", "N": 2, "F": 1.0, "L": [true, null]}}))
                .unwrap(),
            r#"{"action": "adjust", "parameter_overrides": {"Zone": "杭州 b", "N": 2, "F": 1.0, "L": [true, null]}}"#
        );
        assert!(answer_text(&json!({"freeText": "x"})).is_none());
    }
}
