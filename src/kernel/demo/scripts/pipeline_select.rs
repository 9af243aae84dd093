//! `pipeline select`: a cloud resource selection raised from inside a pipeline step, as the
//! kernel's pipeline publisher sends one.

use super::*;

/// A pipeline step that needs a VSwitch. The step's `input_required` envelope carries the
/// kernel's `_cloud_resource_selection_data` (as `data` and `input`); the status beside it
/// carries its `_unified_input_projection` as both `iac_code.input` and
/// `iac_code.inputRequired` (`iac_code/a2a/pipeline_stream.py`, `_enqueue_status`). The answer
/// is the same `inputResponse` as outside a pipeline: the kernel's executor reads it first.
pub(in crate::kernel::demo) fn pipeline_select_turn(
    em: &mut Emitter<'_>,
    text: &str,
) -> Result<(), Stop> {
    em.pipeline_started(json!({"userRequest": text, "pipelineType": "selling", "totalSteps": 2, "stepNames": ["network_planning", "deploying"]}))?;
    let s1 = pipeline_step("network_planning", 1.0);
    em.on_step("step_started", json!({"name": "network_planning"}), &s1)?;
    let tool = format!("call_{}", &ids::hex32()[..12]);
    let envelope = resource_input(&em.task_id, &em.context_id, &tool);
    let (input_id, selector) = (envelope["inputId"].clone(), envelope["selector"].clone());
    let data = json!({"schemaVersion": 1, "kind": "cloud_resource_selection", "inputId": input_id, "toolUseId": tool, "prompt": SELECT_PROMPT, "required": true, "selector": selector});
    let projection = json!({"schemaVersion": 1, "kind": "cloud_resource_selection", "requestTaskId": em.task_id, "contextId": em.context_id, "inputId": input_id, "prompt": SELECT_PROMPT, "required": true, "toolUseId": tool, "selector": selector, "options": []});
    pipeline_input(em, &s1, data.clone(), data, projection, "pipeline-resource")
}

/// The rest of `pipeline select` once its selection is answered: `label` the chosen
/// resource's, `None` for a cancel.
pub(in crate::kernel::demo) fn pipeline_select_continue(
    em: &mut Emitter<'_>,
    label: Option<&str>,
) -> Result<(), Stop> {
    let s1 = pipeline_step("network_planning", 1.0);
    let text = match label {
        Some(l) => format!("Using {l}."),
        None => "No VSwitch chosen; the network stays as planned.".to_string(),
    };
    em.on_step("text_delta", json!({ "text": text }), &s1)?;
    em.on_step("step_completed", json!({}), &s1)?;
    em.pipeline_completed(json!({"earlyExit": label.is_none(), "totalSteps": 2}))
}
