//! Required inputs in A2A metadata (reference §4.6) and the AG-UI interrupts built from them
//! (§5.12). An input without `inputId` is refused (REC) rather than given a random id that
//! would make the thread file unloadable later.

pub(crate) mod confirmation;

use serde_json::{Map, Value, json};

use crate::a2a::types::A2aEvent;
use crate::agui::dialect::Dialect;
use crate::catalog::Msg;
use crate::i18n::{self, Lang};
use crate::json;
use confirmation::DEPLOYMENT_CONFIRMATION;

/// A required input found in an event.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundInput {
    pub(crate) id: String,
    pub(crate) value: Map<String, Value>,
    pub(crate) sideband: bool,
}

/// A required input without an `inputId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingInputId;

/// The `iac_code` metadata keys that carry required inputs.
const INPUT_KEYS: [&str; 3] = ["input", "pendingPermissions", "inputRequired"];

/// Whether `iac_code` metadata carries any required-input key at all.
pub(crate) fn has_input_keys(iac: &Map<String, Value>) -> bool {
    INPUT_KEYS.iter().any(|k| iac.contains_key(*k))
}

/// The inputs an event asks for, or an error when one has no `inputId`.
pub fn inputs(ev: &A2aEvent) -> Result<Vec<FoundInput>, MissingInputId> {
    let Some(iac) = ev.iac() else {
        return Ok(Vec::new());
    };
    let mut candidates: Vec<(&Value, bool)> = Vec::new();
    // A cloud resource selection comes as `inputRequired` (the kernel's
    // `resource_selection_input_envelope`), in the task's own line.
    if let Some(input) = iac.get("inputRequired") {
        candidates.push((input, false));
    }
    if let Some(input) = iac.get("input") {
        let sideband = input.get("scope").and_then(Value::as_str) == Some("candidate")
            || input.get("subPipelineId").is_some_and(Value::is_string);
        candidates.push((input, sideband));
    }
    if let Some(Value::Array(list)) = iac.get("pendingPermissions") {
        candidates.extend(list.iter().map(|p| (p, true)));
    }
    let mut out: Vec<FoundInput> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (c, sideband) in candidates {
        let Some(o) = c.as_object() else { continue };
        if o.get("required") != Some(&Value::Bool(true)) {
            continue;
        }
        let id = match o.get("inputId") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(MissingInputId),
        };
        if let Some(existing) = out.iter_mut().find(|f| f.id == id) {
            existing.sideband |= sideband;
            continue;
        }
        if seen.contains(&id) {
            continue;
        }
        seen.push(id.clone());
        out.push(FoundInput {
            id,
            value: o.clone(),
            sideband,
        });
    }
    Ok(out)
}

/// Python truthiness of a JSON value.
pub(crate) fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Python `str()` of a JSON scalar (as the reference renders option ids and titles).
pub(crate) fn py_str(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => {
            String::from_utf8(json::canonical(&Value::Number(n.clone()))).unwrap_or_default()
        }
        other => String::from_utf8(json::canonical(other)).unwrap_or_default(),
    }
}

fn first_truthy<'a>(o: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .map(|k| o.get(*k))
        .find(|v| truthy(*v))
        .flatten()
}

/// `(id, title)` for each option, with empty ids replaced and duplicates suffixed.
pub(crate) fn standard_options(value: &Map<String, Value>) -> Vec<(String, String)> {
    let Some(Value::Array(opts)) = value.get("options") else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, o) in opts.iter().enumerate() {
        let (mut id, title) = match o {
            Value::Object(m) => {
                let id = match m.get("id") {
                    Some(v) => py_str(v),
                    None => match m.get("candidate_index") {
                        Some(v) => py_str(v),
                        None => i.to_string(),
                    },
                };
                let title = first_truthy(m, &["label", "name", "title"])
                    .map(py_str)
                    .unwrap_or_else(|| id.clone());
                (id, title)
            }
            other => (py_str(other), py_str(other)),
        };
        if id.is_empty() {
            id = format!("option-{}", i + 1);
        }
        if out.iter().any(|(x, _)| *x == id) {
            let mut n = 2;
            while out.iter().any(|(x, _)| *x == format!("{id}-{n}")) {
                n += 1;
            }
            id = format!("{id}-{n}");
        }
        let title = if title.is_empty() { id.clone() } else { title };
        out.push((id, title));
    }
    out
}

/// The interrupt for a (whitelisted) pending value.
pub(crate) fn interrupt(id: &str, value: &Map<String, Value>) -> Value {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("input_required");
    let lang = value
        .get("language")
        .and_then(Value::as_str)
        .and_then(i18n::normalize)
        .unwrap_or(Lang::En);
    let deployment = kind == DEPLOYMENT_CONFIRMATION;
    let options = if deployment {
        confirmation::options(value)
    } else {
        standard_options(value)
    };
    let text = |k: &str| value.get(k).filter(|v| truthy(Some(v))).map(py_str);
    let (reason, message, schema) = if deployment {
        let message = confirmation::message(value, Msg::InputRequired.text(lang));
        (
            DEPLOYMENT_CONFIRMATION,
            message,
            confirmation::schema(value),
        )
    } else if kind == RESOURCE_SELECTION {
        let message = text("prompt").unwrap_or_else(|| Msg::InputRequired.text(lang).to_string());
        (RESOURCE_SELECTION, message, resource_schema())
    } else if kind == "permission" {
        let message = text("prompt")
            .or_else(|| text("title"))
            .unwrap_or_else(|| Msg::PermissionRequired.text(lang).to_string());
        let schema = json!({"type":"object","properties":{"decision":{"type":"string","enum":["allow_once","deny"]}},"required":["decision"],"additionalProperties":false});
        ("tool_call", message, schema)
    } else {
        let allow_free = truthy(value.get("allowFreeText")) || options.is_empty();
        let mut one_of: Vec<Value> = options
            .iter()
            .map(|(id, title)| json!({"type":"object","properties":{"selectedId":{"type":"string","const":id,"title":title}},"required":["selectedId"],"additionalProperties":false}))
            .collect();
        if allow_free {
            one_of.push(json!({"type":"object","properties":{"freeText":{"type":"string","minLength":1,"pattern":super::schema::NON_SPACE}},"required":["freeText"],"additionalProperties":false}));
        }
        let mut message =
            text("prompt").unwrap_or_else(|| Msg::InputRequired.text(lang).to_string());
        if !options.is_empty() {
            let lines: Vec<String> = options.iter().map(|(i, t)| format!("- {i}: {t}")).collect();
            message = format!("{message}\n{}", lines.join("\n"));
        }
        ("input_required", message, json!({ "oneOf": one_of }))
    };
    let mut metadata = Map::new();
    metadata.insert("schemaVersion".into(), json!(1));
    for (k, v) in value {
        metadata.insert(k.clone(), v.clone());
    }
    metadata.insert(
        "standardOptions".into(),
        Value::Array(
            options
                .iter()
                .map(|(i, t)| json!({"id": i, "title": t}))
                .collect(),
        ),
    );
    let mut out = Map::new();
    out.insert("id".into(), id.into());
    out.insert("reason".into(), reason.into());
    out.insert("message".into(), message.into());
    if let Some(t) = value
        .get("toolUseId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        out.insert("toolCallId".into(), t.into());
    }
    out.insert("responseSchema".into(), schema);
    // Pass the kernel's deadline through when it has one (the adapter adds none itself).
    if let Some(e) = value.get("expiresAt").filter(|v| v.is_string()) {
        out.insert("expiresAt".into(), e.clone());
    }
    out.insert("metadata".into(), Value::Object(metadata));
    Value::Object(out)
}

/// The kind of a cloud resource selection, also its interrupt's `reason`.
pub(crate) const RESOURCE_SELECTION: &str = "cloud_resource_selection";

/// The longest string the kernel takes in a resource selection's answer.
const RESOURCE_MAX_CHARS: u64 = 1024;

/// What a resource selection takes: the chosen value (its label and source if known), or a
/// cancel. The correlation fields are never the client's: `resource_response` adds them.
fn resource_schema() -> Value {
    let text =
        |min: u64| json!({"type": "string", "minLength": min, "maxLength": RESOURCE_MAX_CHARS});
    json!({"oneOf": [
        {"type": "object", "properties": {
            "status": {"const": "selected"},
            "value": text(1),
            "label": text(0),
            "source": {"type": "object"}},
         "required": ["status", "value"], "additionalProperties": false},
        {"type": "object", "properties": {"status": {"const": "canceled"}},
         "required": ["status"], "additionalProperties": false}
    ]})
}

/// Whether a pending value is a cloud resource selection.
pub(crate) fn is_resource_selection(value: &Map<String, Value>) -> bool {
    value.get("kind").and_then(Value::as_str) == Some(RESOURCE_SELECTION)
}

/// The kernel's `iac_code.inputResponse` for a resource selection answered with `payload`
/// (already valid against `resource_schema`): the correlation fields (`requestTaskId`,
/// `contextId`, `inputId`, `toolUseId`, `selectorId`) come from the stored interrupt only.
/// `task` stands in for a `requestTaskId` the envelope did not carry.
pub(crate) fn resource_response(
    id: &str,
    value: &Map<String, Value>,
    task: &str,
    payload: &Value,
) -> Value {
    let stored = |k: &str| value.get(k).cloned().unwrap_or(Value::Null);
    let mut out = Map::new();
    out.insert("schemaVersion".into(), json!(1));
    out.insert("kind".into(), RESOURCE_SELECTION.into());
    let canceled = payload.get("status").and_then(Value::as_str) != Some("selected");
    out.insert(
        "status".into(),
        if canceled { "canceled" } else { "selected" }.into(),
    );
    let request_task = match value.get("requestTaskId") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => task.to_string(),
    };
    out.insert("requestTaskId".into(), request_task.into());
    out.insert("contextId".into(), stored("contextId"));
    out.insert("inputId".into(), id.into());
    out.insert("toolUseId".into(), stored("toolUseId"));
    if canceled {
        return Value::Object(out);
    }
    let selector = value
        .get("selector")
        .and_then(|s| s.get("id"))
        .cloned()
        .unwrap_or(Value::Null);
    out.insert("selectorId".into(), selector);
    out.insert(
        "value".into(),
        payload.get("value").cloned().unwrap_or(Value::Null),
    );
    let label = payload
        .get("label")
        .filter(|l| l.as_str().is_some_and(|l| !l.is_empty()))
        .or_else(|| payload.get("value"));
    out.insert("label".into(), label.cloned().unwrap_or(Value::Null));
    if let Some(src) = payload.get("source").filter(|s| s.is_object()) {
        out.insert("source".into(), src.clone());
    }
    Value::Object(out)
}

/// The kind of a pipeline's candidate choice: its own `reason` where the dialect says so.
pub(crate) const CANDIDATE_SELECTION: &str = "candidate_selection";

/// The interrupt as `dialect` shows it: the reference's shape (`interrupt`), with the
/// kernel's kind as the reason of a candidate choice when `kind_reasons` is on.
pub(crate) fn interrupt_in(id: &str, value: &Map<String, Value>, dialect: &Dialect) -> Value {
    let mut i = interrupt(id, value);
    if dialect.kind_reasons
        && value.get("kind").and_then(Value::as_str) == Some(CANDIDATE_SELECTION)
    {
        i["reason"] = CANDIDATE_SELECTION.into();
    }
    i
}

/// Each input kind the kernel raises and the interrupt `reason` it comes as in `dialect`
/// (`/capabilities`, `custom.iacCode.interruptKinds`).
pub fn kinds(dialect: &Dialect) -> Value {
    let candidate = if dialect.kind_reasons {
        CANDIDATE_SELECTION
    } else {
        "input_required"
    };
    let mut k = json!({
        "permission": "tool_call",
        "ask_user_question": "input_required",
        CANDIDATE_SELECTION: candidate,
        RESOURCE_SELECTION: RESOURCE_SELECTION,
    });
    // 0.1 mode reads a deployment confirmation as the reference does: no interrupt.
    if dialect.kind_reasons {
        k[DEPLOYMENT_CONFIRMATION] = DEPLOYMENT_CONFIRMATION.into();
    }
    k
}

/// The inputs of an event as `dialect` reads them: `inputs`, and in 1.0 mode a pipeline's
/// deployment confirmation when nothing else is asked.
pub(crate) fn inputs_in(
    ev: &A2aEvent,
    dialect: &Dialect,
) -> Result<Vec<FoundInput>, MissingInputId> {
    let mut found = if ev.iac().is_some_and(has_input_keys) {
        inputs(ev)?
    } else {
        Vec::new()
    };
    if dialect.kind_reasons
        && found.is_empty()
        && let Some(c) = confirmation::found(ev)
    {
        found.push(c);
    }
    Ok(found)
}

/// The AG-UI interrupts of an execution's pending inputs, in their order.
pub(crate) fn pending(ex: &crate::store::document::Execution, dialect: &Dialect) -> Vec<Value> {
    ex.pending
        .iter()
        .map(|(id, p)| interrupt_in(id, &p.value, dialect))
        .collect()
}

/// Label of the option whose id is `selected` (`label`, `name`, else the id itself).
pub(crate) fn option_label(value: &Map<String, Value>, selected: &str) -> String {
    if let Some(Value::Array(opts)) = value.get("options") {
        for o in opts {
            if let Some(m) = o.as_object()
                && m.get("id").map(py_str).as_deref() == Some(selected)
            {
                return first_truthy(m, &["label", "name"])
                    .map(py_str)
                    .unwrap_or_else(|| selected.to_string());
            }
        }
    }
    selected.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::types::Kind;

    fn ev(iac: Value) -> A2aEvent {
        A2aEvent::new(Kind::StatusUpdate, json!({"metadata":{"iac_code": iac}}))
    }

    #[test]
    fn inputs_and_sideband() {
        let e = ev(
            json!({"input":{"inputId":"a","required":true},"pendingPermissions":[{"inputId":"b","required":true},{"inputId":"a","required":true},{"inputId":"c","required":false}]}),
        );
        let got = inputs(&e).unwrap();
        assert_eq!(
            got.iter()
                .map(|f| (f.id.as_str(), f.sideband))
                .collect::<Vec<_>>(),
            [("a", true), ("b", true)]
        );
        let e = ev(json!({"input":{"inputId":"a","required":true,"scope":"candidate"}}));
        assert!(inputs(&e).unwrap()[0].sideband);
        let e = ev(json!({"input":{"inputId":"a","required":true}}));
        assert!(!inputs(&e).unwrap()[0].sideband);
        assert!(inputs(&ev(json!({"input":{"required":true}}))).is_err());
        assert!(
            inputs(&ev(json!({"input":{"inputId":"x"}})))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn permission_interrupt_matches_the_reference_example() {
        let sse = include_str!("../../../tests/fixtures/agui/01_interrupt_run.sse");
        let last = sse.trim_end().rsplit("\n\n").next().unwrap();
        let v: Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
        let want = &v["outcome"]["interrupts"][0];
        let state: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/agui/01_after_interrupt.state.json"
        ))
        .unwrap();
        let value = state["execution"]["pending"]["perm-1"]["value"]
            .as_object()
            .unwrap();
        // The state file has sorted keys; the live value had the kernel's order. Compare as JSON.
        assert_eq!(&interrupt("perm-1", value), want);
    }

    #[test]
    fn question_interrupt_options() {
        let v = json!({"kind":"ask_user_question","inputId":"q","prompt":"Where?","options":[{"id":"cn-beijing","label":"Beijing"},{"id":"cn-beijing","name":"Beijing 2"},{"label":"no id"},{"id":""},7,{"id":null}],"allowFreeText":false}).as_object().unwrap().clone();
        let i = interrupt("q", &v);
        let opts: Vec<(String, String)> = standard_options(&v);
        assert_eq!(
            opts,
            vec![
                ("cn-beijing".into(), "Beijing".into()),
                ("cn-beijing-2".into(), "Beijing 2".into()),
                ("2".into(), "no id".into()),
                ("option-4".into(), "option-4".into()),
                ("7".into(), "7".into()),
                ("None".into(), "None".into()),
            ]
        );
        assert_eq!(i["reason"], "input_required");
        assert!(
            i["message"]
                .as_str()
                .unwrap()
                .starts_with("Where?\n- cn-beijing: Beijing\n")
        );
        assert_eq!(i["responseSchema"]["oneOf"].as_array().unwrap().len(), 6);
        assert!(i.get("toolCallId").is_none());
        let free = json!({"kind":"ask_user_question","inputId":"q"})
            .as_object()
            .unwrap()
            .clone();
        let i = interrupt("q", &free);
        assert_eq!(i["responseSchema"]["oneOf"][0]["required"][0], "freeText");
        assert_eq!(i["message"], Msg::InputRequired.text(Lang::En));
        assert_eq!(option_label(&v, "cn-beijing"), "Beijing");
        assert_eq!(option_label(&v, "zz"), "zz");
    }

    fn resource_fixture() -> Value {
        serde_json::from_str(include_str!(
            "../../../tests/fixtures/kernel/resource_selection.json"
        ))
        .unwrap()
    }

    #[test]
    fn a_resource_selection_from_the_kernels_envelope_is_its_own_interrupt() {
        let f = resource_fixture();
        let e = A2aEvent::new(Kind::StatusUpdate, f["statusUpdate"].clone());
        let found = inputs(&e).unwrap();
        assert_eq!(found.len(), 1);
        assert!(!found[0].sideband);
        assert!(has_input_keys(e.iac().unwrap()));
        // What the state file keeps: the whole envelope, the selector included.
        let stored = crate::store::document::filter_input(&found[0].value);
        let envelope = f["statusUpdate"]["metadata"]["iac_code"]["inputRequired"].clone();
        assert_eq!(Value::Object(stored.clone()), envelope);
        let i = interrupt(&found[0].id, &stored);
        assert_eq!(i["reason"], RESOURCE_SELECTION);
        assert_eq!(i["message"], "Which VSwitch should the instance use?");
        assert_eq!(i["toolCallId"], "call_0123456789ab");
        assert_eq!(i["metadata"]["selector"], envelope["selector"]);
        assert_eq!(i["metadata"]["standardOptions"], json!([]));
        let schema = &i["responseSchema"];
        let ok = |p: Value| crate::adapter::rules::schema::is_valid(schema, &p);
        assert!(ok(json!({"status": "selected", "value": "vsw-1"})));
        assert!(ok(
            json!({"status": "selected", "value": "vsw-1", "label": "", "source": {}})
        ));
        assert!(ok(json!({"status": "canceled"})));
        assert!(!ok(json!({"status": "selected"})));
        assert!(!ok(
            json!({"status": "selected", "value": "x".repeat(1025)})
        ));
        assert!(!ok(json!({"status": "canceled", "optionsEmpty": true})));
        assert!(!ok(
            json!({"status": "selected", "value": "v", "contextId": "c"})
        ));
    }

    #[test]
    fn the_input_response_takes_its_correlation_from_the_stored_interrupt() {
        let f = resource_fixture();
        let envelope = f["statusUpdate"]["metadata"]["iac_code"]["inputRequired"]
            .as_object()
            .unwrap()
            .clone();
        let id = envelope["inputId"].as_str().unwrap();
        for (name, a) in f["answers"].as_object().unwrap() {
            let got = resource_response(id, &envelope, "task-other", &a["payload"]);
            assert_eq!(got, a["inputResponse"], "{name}");
        }
        // Whatever a payload says of the correlation, the stored interrupt's values go out.
        let sneaky = json!({"status": "selected", "value": "vsw-1", "requestTaskId": "t", "contextId": "c", "inputId": "i", "toolUseId": "u", "selectorId": "s"});
        let got = resource_response(id, &envelope, "task-other", &sneaky);
        for k in ["requestTaskId", "contextId", "inputId", "toolUseId"] {
            assert_eq!(got[k], envelope[k], "{k}");
        }
        assert_eq!(got["selectorId"], "vpc.vswitch");
        // An envelope without `requestTaskId` answers for the execution's task.
        let mut bare = envelope.clone();
        bare.remove("requestTaskId");
        let got = resource_response(id, &bare, "task-run", &json!({"status": "canceled"}));
        assert_eq!(got["requestTaskId"], "task-run");
    }

    #[test]
    fn capabilities_name_each_kind_with_the_reason_its_dialect_gives_it() {
        let v1 = kinds(&Dialect::V1_0);
        let v01 = kinds(&Dialect::V0_1);
        assert_eq!(v1[CANDIDATE_SELECTION], CANDIDATE_SELECTION);
        assert_eq!(v01[CANDIDATE_SELECTION], "input_required");
        for d in [Dialect::V1_0, Dialect::V0_1] {
            let k = kinds(&d);
            let n = if d.kind_reasons { 5 } else { 4 };
            assert_eq!(k.as_object().unwrap().len(), n);
            assert_eq!(k[RESOURCE_SELECTION], RESOURCE_SELECTION);
            // The reasons listed are the ones the interrupts carry.
            for (kind, reason) in k.as_object().unwrap() {
                let v = json!({"kind": kind, "inputId": "i", "options": [{"id": "a"}]});
                let i = interrupt_in("i", v.as_object().unwrap(), &d);
                assert_eq!(&i["reason"], reason, "{kind}");
            }
        }
    }
}
