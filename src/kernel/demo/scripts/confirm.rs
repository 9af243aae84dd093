//! `pipeline confirm`: a step that asks to confirm a deployment, as iac-code 0.16.0 raises
//! one (`pipeline_runner.py`, a step whose `ui_mode` is `deployment_confirmation`): only the
//! step's `input_required` event, whose data is the runner's `input_required_data` with
//! `_deployment_confirmation_required_data` (keys as `pipeline_events._event_data` leaves
//! them), and no `iac_code.input` (the kernel's `_unified_input_projection` has none for this
//! kind). The answer is the next text on the task, read as the runner reads it.

use super::*;

const PROMPT: &str = "Choose the next action";

/// The hook's `_confirmation_options` for a selection with several candidates.
fn options() -> Value {
    json!([
        {"action": "confirm", "name": "Confirm deployment", "summary": "Create cloud resources using the current solution and parameters"},
        {"action": "reselect", "name": "Choose another solution", "summary": "Return to solution planning and choose again"},
        {"action": "cancel", "name": "Cancel", "summary": "End the workflow without creating cloud resources"}
    ])
}

pub(in crate::kernel::demo) fn confirm_turn(em: &mut Emitter<'_>, text: &str) -> Result<(), Stop> {
    em.pipeline_started(json!({"userRequest": text, "pipelineType": "selling", "totalSteps": 1, "stepNames": ["confirm_deployment"]}))?;
    let s1 = pipeline_step("confirm_deployment", 1.0);
    em.on_step("step_started", json!({"name": "confirm_deployment"}), &s1)?;
    em.on_step(
        "text_delta",
        json!({"text": "The template is ready to deploy."}),
        &s1,
    )?;
    let data = json!({
        "stepId": "confirm_deployment", "prompt": PROMPT, "options": options(),
        "kind": "deployment_confirmation",
        "solution_summary": "Two ECS instances behind an SLB.",
        "template_url": "templates/web.yaml",
        "cost": {"total_monthly_cost": "¥420", "deployment_parameters": {"ZoneId": "cn-hangzhou-h"}},
        "effective_deployment_parameters": {"ZoneId": "cn-hangzhou-h", "InstanceType": "ecs.g7.large"},
        "parameter_overrides": {},
        "preview_ready_for_create": true
    });
    if let Some(t) = lock(&em.shared.tasks).get_mut(&em.task_id) {
        t.pending = Some(Pending {
            input: doubles(data.clone()),
            kind: "pipeline-confirm",
        });
    }
    let e = em.envelope(
        "input_required",
        "step",
        "input_required",
        data,
        json!({ "step": s1 }),
    );
    em.pipeline(vec![e], None)
}

/// `parse_deployment_confirmation` after `_normalize_deployment_confirmation_choice`: the
/// action and overrides of a structured answer (a JSON object, or an option's number), or
/// `None` for natural language.
fn parse(text: &str) -> Option<(String, Map<String, Value>)> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let i = t.parse::<usize>().ok()?.checked_sub(1)?;
        let action = options().get(i)?.get("action")?.as_str()?.to_string();
        return Some((action, Map::new()));
    }
    let v: Value = serde_json::from_str(t).ok()?;
    let action = v.get("action")?.as_str()?.trim().to_lowercase();
    if !["confirm", "adjust", "reselect", "cancel"].contains(&action.as_str()) {
        return None;
    }
    let raw = ["parameter_overrides", "deployment_parameters", "parameters"]
        .iter()
        .find_map(|k| v.get(*k));
    let mut overrides = Map::new();
    match raw {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            for (k, x) in o {
                if k.trim().is_empty() {
                    return None;
                }
                if !x.is_null() {
                    overrides.insert(k.trim().to_string(), x.clone());
                }
            }
        }
        Some(_) => return None,
    }
    Some((action, overrides))
}

/// The rest of `pipeline confirm` once the next text arrived: what the runner understood.
pub(in crate::kernel::demo) fn confirm_continue(
    em: &mut Emitter<'_>,
    text: &str,
) -> Result<(), Stop> {
    let s1 = pipeline_step("confirm_deployment", 1.0);
    let parsed = parse(text);
    let mut data = json!({"user_input_length": text.chars().count(), "kind": "deployment_confirmation", "selected_value": text});
    if let Some((action, overrides)) = &parsed {
        data["action"] = json!(action);
        data["parameter_overrides"] = Value::Object(overrides.clone());
        data["structured"] = json!(true);
    } else {
        data["structured"] = json!(false);
    }
    em.emit(
        "input_received",
        "step",
        "working",
        data,
        json!({ "step": s1 }),
    )?;
    let (said, early) = match &parsed {
        Some((action, overrides)) => (
            format!(
                "Action {action}; parameter overrides {}.",
                Value::Object(overrides.clone())
            ),
            action == "cancel",
        ),
        None => (format!("Not a structured confirmation: {text}"), false),
    };
    em.on_step("text_delta", json!({ "text": said }), &s1)?;
    em.on_step("step_completed", json!({}), &s1)?;
    em.pipeline_completed(json!({"earlyExit": early, "totalSteps": 1}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_the_runner_reads_them() {
        assert_eq!(
            parse(r#"{"action": "confirm"}"#),
            Some(("confirm".into(), Map::new()))
        );
        let (a, o) =
            parse(r#"{"action": " Adjust ", "parameter_overrides": {"Zone": "b", "X": null}}"#)
                .unwrap();
        assert_eq!(
            (a.as_str(), Value::Object(o)),
            ("adjust", json!({"Zone": "b"}))
        );
        assert_eq!(parse("3"), Some(("cancel".into(), Map::new())));
        assert_eq!(parse("4"), None);
        assert_eq!(parse("yes please"), None);
        assert_eq!(parse(r#"{"action": "deploy"}"#), None);
        assert_eq!(
            parse(r#"{"action": "confirm", "parameters": {" ": 1}}"#),
            None
        );
    }
}
