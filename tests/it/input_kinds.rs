//! The kernel's input kinds beyond permissions and questions (issue 47): a cloud resource
//! selection is an interrupt of its own (`reason`, `responseSchema`, the selector in its
//! metadata), and its answer reaches the kernel as `iac_code.inputResponse` built from the
//! stored interrupt. Against the demo kernel, whose `select` script raises the kernel's own
//! envelope and checks the answer as the kernel does.

use crate::common;

use std::time::Duration;

use common::*;
use iac_agui::catalog::Msg;
use iac_agui::config::AguiProtocol;
use iac_agui::i18n::Lang;
use iac_agui::server::ServerConfig;
use serde_json::{Value, json};

fn stack(protocol: AguiProtocol) -> Stack {
    Stack::with(protocol, ServerConfig::default(), Duration::from_secs(30))
}

fn code(events: &[Value]) -> String {
    last(events)["code"].as_str().unwrap_or("").to_string()
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

/// What a front end that can answer resource selections advertises (as `/capabilities`
/// says); the kernel raises none without it.
fn selector() -> Value {
    json!({"schemaVersion": 1, "queryMode": "ros_api_json", "profileHash": iac_agui::a2a::KERNEL_PROFILE_HASH})
}

fn select_body(s: &Stack, thread: &str, run: &str, text: &str) -> Value {
    let mut b = s.body(thread, run, text);
    b["forwardedProps"]["iacCode"]["resourceSelector"] = selector();
    b
}

/// A run of the `select` script: its one interrupt.
fn selection(s: &Stack, thread: &str) -> Value {
    let ev = s.run(&select_body(s, thread, "r1", "select a vswitch"));
    assert_eq!(last(&ev)["type"], "RUN_FINISHED");
    let all = interrupts(&ev);
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].clone()
}

fn answer(
    s: &Stack,
    thread: &str,
    run: &str,
    id: &str,
    status: &str,
    payload: Value,
) -> Vec<Value> {
    let mut entry = json!({"interruptId": id, "status": status});
    if !payload.is_null() {
        entry["payload"] = payload;
    }
    s.run(&s.resume_body(thread, run, json!([entry])))
}

#[test]
fn a_resource_selection_is_an_interrupt_with_its_own_reason_schema_and_selector() {
    for protocol in [AguiProtocol::V1_0, AguiProtocol::V0_1] {
        let s = stack(protocol);
        let i = selection(&s, "t1");
        assert_eq!(i["reason"], "cloud_resource_selection", "{protocol:?}");
        assert_eq!(i["message"], "Which VSwitch should the instance use?");
        assert!(
            i["toolCallId"]
                .as_str()
                .is_some_and(|t| t.starts_with("call_"))
        );
        let one_of = i["responseSchema"]["oneOf"].as_array().unwrap();
        assert_eq!(one_of[0]["properties"]["status"]["const"], "selected");
        assert_eq!(one_of[0]["required"], json!(["status", "value"]));
        assert_eq!(one_of[1]["properties"]["status"]["const"], "canceled");
        let m = &i["metadata"];
        assert_eq!(m["kind"], "cloud_resource_selection");
        assert_eq!(m["selector"]["id"], "vpc.vswitch");
        assert_eq!(
            m["selector"]["associationProperty"],
            "ALIYUN::VPC::VSwitch::VSwitchId"
        );
        assert_eq!(
            m["selector"]["associationPropertyMetadata"]["RegionId"],
            "cn-hangzhou"
        );
        assert!(
            m["selector"]["profileHash"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        assert_eq!(m["inputId"], i["id"]);
        assert_eq!(m["standardOptions"], json!([]));
        // Stored whole, the selector included, before it was announced.
        let id = i["id"].as_str().unwrap();
        let stored = &s.state_file("t1")["execution"]["pending"][id]["value"];
        assert_eq!(stored["selector"], m["selector"]);
    }
}

#[test]
fn a_selected_resource_reaches_the_kernel_as_its_input_response() {
    let s = stack(AguiProtocol::V1_0);
    let i = selection(&s, "t1");
    let id = i["id"].as_str().unwrap();
    let ev = answer(
        &s,
        "t1",
        "r2",
        id,
        "resolved",
        json!({"status": "selected", "value": "vsw-main1", "label": "Main VSwitch"}),
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(text_of(&ev).contains("Using Main VSwitch."), "{ev:?}");
    assert!(
        s.state_file("t1")["execution"]
            .get("pending")
            .is_none_or(|p| p.get(id).is_none())
    );
}

#[test]
fn a_selection_without_a_label_is_labelled_with_its_value() {
    let s = stack(AguiProtocol::V1_0);
    let i = selection(&s, "t1");
    let id = i["id"].as_str().unwrap();
    let ev = answer(
        &s,
        "t1",
        "r2",
        id,
        "resolved",
        json!({"status": "selected", "value": "vsw-x"}),
    );
    assert!(text_of(&ev).contains("Using vsw-x."), "{ev:?}");
}

#[test]
fn a_canceled_selection_is_the_kernels_canceled_answer() {
    for (status, payload) in [
        ("resolved", json!({"status": "canceled"})),
        ("cancelled", Value::Null),
    ] {
        let s = stack(AguiProtocol::V1_0);
        let i = selection(&s, "t1");
        let id = i["id"].as_str().unwrap();
        let ev = answer(&s, "t1", "r2", id, status, payload);
        // The tool hears `canceled` and the turn goes on: not a cancelled run.
        assert_eq!(last(&ev)["outcome"]["type"], "success", "{status}: {ev:?}");
        assert!(text_of(&ev).contains("No VSwitch chosen"), "{ev:?}");
    }
}

#[test]
fn correlation_fields_from_the_client_are_refused_before_the_kernel() {
    let s = stack(AguiProtocol::V1_0);
    let i = selection(&s, "t1");
    let id = i["id"].as_str().unwrap();
    let bad = [
        json!({"status": "selected", "value": "vsw-a", "requestTaskId": "task-other"}),
        json!({"status": "selected", "value": "vsw-a", "inputId": "resource-0"}),
        json!({"status": "selected", "value": "vsw-a", "selectorId": "ecs.instance"}),
        json!({"status": "selected"}),
        json!({"status": "selected", "value": ""}),
        json!({"status": "chosen", "value": "vsw-a"}),
        json!({"status": "canceled", "value": "vsw-a"}),
        json!({"status": "selected", "value": "vsw-a", "source": "x"}),
        json!({"selectedId": "vsw-a"}),
    ];
    for (n, p) in bad.into_iter().enumerate() {
        let ev = answer(&s, "t1", &format!("bad{n}"), id, "resolved", p.clone());
        assert_eq!(code(&ev), "RESUME_PAYLOAD_INVALID", "{p}");
        assert_eq!(
            last(&ev)["message"],
            Msg::ResumePayloadInvalid.text(Lang::En)
        );
    }
    // Still pending and answerable.
    let ev = answer(
        &s,
        "t1",
        "good",
        id,
        "resolved",
        json!({"status": "selected", "value": "vsw-a"}),
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
}

#[test]
fn a_value_the_kernel_refuses_is_resume_rejected_with_its_reason_and_ends_the_task() {
    let s = stack(AguiProtocol::V1_0);
    let i = selection(&s, "t1");
    let id = i["id"].as_str().unwrap();
    // Valid for the schema, not for the selector's profile (a VSwitch id starts `vsw-`).
    let ev = answer(
        &s,
        "t1",
        "r2",
        id,
        "resolved",
        json!({"status": "selected", "value": "subnet-1"}),
    );
    assert_eq!(code(&ev), "RESUME_REJECTED", "{ev:?}");
    let want = Msg::SelectionRejectedTaskEnded.text(Lang::En).replace(
        "{reason}",
        "resource_selection_resume_invalid: selector value is invalid",
    );
    assert_eq!(last(&ev)["message"], want);
    // The kernel failed the task (as iac-code 0.16.0 does): nothing is left to answer.
    let pending = &s.state_file("t1")["execution"]["pending"];
    assert!(pending.get(id).is_none(), "{pending}");
    let r = s.post(&s.resume_body("t1", "r3", json!([{"interruptId": id, "status": "resolved", "payload": {"status": "selected", "value": "vsw-ok"}}])));
    assert_ne!(r.status, 200, "{}", r.text());
    // A new turn asks again, and a source the profile does not take is the kernel's own words.
    let ev = s.run(&select_body(&s, "t1", "r4", "select a vswitch again"));
    let id = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let ev = answer(
        &s,
        "t1",
        "r5",
        &id,
        "resolved",
        json!({"status": "selected", "value": "vsw-a", "source": {"id": "x"}}),
    );
    assert_eq!(code(&ev), "RESUME_REJECTED");
    assert!(
        last(&ev)["message"]
            .as_str()
            .unwrap()
            .contains("source mismatch")
    );
    let ev = s.run(&select_body(&s, "t1", "r6", "select a vswitch once more"));
    let id = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let ev = answer(
        &s,
        "t1",
        "r7",
        &id,
        "resolved",
        json!({"status": "selected", "value": "vsw-ok"}),
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
}

#[test]
fn a_resource_selection_survives_an_adapter_restart() {
    let mut s = stack(AguiProtocol::V1_0);
    let i = selection(&s, "t1");
    let id = i["id"].as_str().unwrap().to_string();
    s.start_server(ServerConfig::default());
    // The restarted adapter has only the state file: the answer is built from it.
    let ev = answer(
        &s,
        "t1",
        "r2",
        &id,
        "resolved",
        json!({"status": "selected", "value": "vsw-after", "label": "After"}),
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(text_of(&ev).contains("Using After."));
}

#[test]
fn a_candidate_choice_has_its_own_reason_in_1_0_and_the_references_in_0_1() {
    for (protocol, reason) in [
        (AguiProtocol::V1_0, "candidate_selection"),
        (AguiProtocol::V0_1, "input_required"),
    ] {
        let s = stack(protocol);
        let ev = s.run(&s.body("t1", "r1", "compare candidates"));
        let all = interrupts(&ev);
        assert_eq!(all.len(), 1, "{ev:?}");
        let i = &all[0];
        assert_eq!(i["reason"], reason, "{protocol:?}");
        assert_eq!(i["metadata"]["kind"], "candidate_selection");
        // `{selectedId}` from its options, nothing else.
        let one_of = i["responseSchema"]["oneOf"].as_array().unwrap();
        let ids: Vec<&Value> = one_of
            .iter()
            .map(|b| &b["properties"]["selectedId"]["const"])
            .collect();
        assert_eq!(ids, [&json!("0"), &json!("1")]);
        assert_eq!(i["metadata"]["options"][1]["totalMonthlyCost"], "¥90");
        let id = i["id"].as_str().unwrap();
        let ev = answer(
            &s,
            "t1",
            "r2",
            id,
            "resolved",
            json!({"freeText": "the cheap one"}),
        );
        assert_eq!(code(&ev), "RESUME_PAYLOAD_INVALID");
        let ev = answer(&s, "t1", "r3", id, "resolved", json!({"selectedId": "1"}));
        assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
        let step_text: String = ev
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert!(
            step_text.contains("Deploying Candidate 2: Function Compute."),
            "{ev:?}"
        );
    }
}

#[test]
#[cfg(feature = "threads")]
fn a_listing_shows_a_waiting_selection_with_its_kind() {
    let s = stack(AguiProtocol::V1_0);
    let i = selection(&s, "t1");
    let r = get(s.addr(), "/threads/t1");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let listed = &v["interrupts"][0];
    assert_eq!(listed["id"], i["id"]);
    assert_eq!(listed["reason"], "cloud_resource_selection");
    assert_eq!(listed["kind"], "cloud_resource_selection");
    assert_eq!(listed["metadata"]["selector"]["id"], "vpc.vswitch");
}

#[cfg(feature = "threads")]
fn get(addr: std::net::SocketAddr, path: &str) -> Resp {
    raw(addr, &request("GET", path, &[], b""))
}

#[test]
fn the_resource_selector_is_advertised_only_when_the_client_says_it_can_answer() {
    let s = stack(AguiProtocol::V1_0);
    // Without the capability the kernel offers no selection (the demo says what it needs).
    let ev = s.run(&s.body("t1", "r1", "select a vswitch"));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(interrupts(&ev).is_empty());
    // A wrong shape is named.
    for (bad, field) in [
        (json!(true), "forwardedProps.iacCode.resourceSelector"),
        (
            json!({"queryMode": "ros_api_json", "profileHash": "h"}),
            "forwardedProps.iacCode.resourceSelector.schemaVersion",
        ),
        (
            json!({"schemaVersion": 1, "profileHash": "h"}),
            "forwardedProps.iacCode.resourceSelector.queryMode",
        ),
        (
            json!({"schemaVersion": 1, "queryMode": "q", "profileHash": "h", "x": 1}),
            "forwardedProps.iacCode.resourceSelector.x",
        ),
    ] {
        let mut b = s.body("t2", "r2", "select a vswitch");
        b["forwardedProps"]["iacCode"]["resourceSelector"] = bad.clone();
        let r = s.post(&b);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (400, "INVALID_INPUT"),
            "{bad}"
        );
        assert!(
            r.error_message().contains(field),
            "{bad}: {}",
            r.error_message()
        );
    }
}

#[test]
fn a_select_without_the_resource_selector_is_told_what_it_needs() {
    // Regression (issue 57 item 9): the demo answered `select` from a client that did not
    // advertise the selector with its plain greeting, so nobody could tell why.
    let s = stack(AguiProtocol::V1_0);
    for (i, text) in ["select a vswitch", "pipeline select a vswitch"]
        .into_iter()
        .enumerate()
    {
        let ev = s.run(&s.body(&format!("t{i}"), "r1", text));
        assert_eq!(last(&ev)["outcome"]["type"], "success", "{text}: {ev:?}");
        assert!(interrupts(&ev).is_empty(), "{text}");
        let said = text_of(&ev);
        assert!(
            said.contains("forwardedProps.iacCode.resourceSelector")
                && said.contains("GET /capabilities"),
            "{text}: {said}"
        );
    }
}

#[test]
fn a_pipeline_steps_resource_selection_is_a_resource_interrupt_answered_with_the_input_response() {
    // The kernel's pipeline publisher wraps the selection in the step's `input_required`
    // event and projects it as `iac_code.input` and `iac_code.inputRequired` both.
    for protocol in [AguiProtocol::V1_0, AguiProtocol::V0_1] {
        let s = stack(protocol);
        let ev = s.run(&select_body(&s, "t1", "r1", "pipeline: select a vswitch"));
        assert!(
            ev.iter().any(|e| e["type"] == "STEP_STARTED"),
            "{protocol:?}: {ev:?}"
        );
        let all = interrupts(&ev);
        assert_eq!(all.len(), 1, "{protocol:?}: {ev:?}");
        let i = &all[0];
        assert_eq!(i["reason"], "cloud_resource_selection", "{protocol:?}");
        assert_eq!(i["message"], "Which VSwitch should the instance use?");
        assert_eq!(i["metadata"]["selector"]["id"], "vpc.vswitch");
        assert_eq!(i["metadata"]["options"], json!([]));
        let one_of = i["responseSchema"]["oneOf"].as_array().unwrap();
        assert_eq!(one_of[0]["properties"]["status"]["const"], "selected");
        let id = i["id"].as_str().unwrap();
        assert!(id.starts_with("resource-"), "{id}");
        // The demo kernel takes only the structured answer (a text one is "pending input not
        // found") and checks its correlation against the projection it sent.
        let ev = answer(
            &s,
            "t1",
            "r2",
            id,
            "resolved",
            json!({"status": "selected", "value": "vsw-pipe1", "label": "Pipeline VSwitch"}),
        );
        assert_eq!(
            last(&ev)["outcome"]["type"],
            "success",
            "{protocol:?}: {ev:?}"
        );
        assert!(text_of(&ev).contains("Using Pipeline VSwitch."), "{ev:?}");
        assert!(ev.iter().any(|e| e["type"] == "STEP_FINISHED"), "{ev:?}");
    }
}

#[test]
fn a_pipeline_steps_resource_selection_is_cancelled_or_refused_as_the_kernel_does() {
    let s = stack(AguiProtocol::V1_0);
    let ev = s.run(&select_body(&s, "t1", "r1", "pipeline: select a vswitch"));
    let id = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let ev = answer(&s, "t1", "r2", &id, "cancelled", Value::Null);
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(text_of(&ev).contains("No VSwitch chosen"), "{ev:?}");
    let ev = s.run(&select_body(&s, "t2", "r1", "pipeline: select a vswitch"));
    let id = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let ev = answer(
        &s,
        "t2",
        "r2",
        &id,
        "resolved",
        json!({"status": "selected", "value": "subnet-1"}),
    );
    assert_eq!(code(&ev), "RESUME_REJECTED", "{ev:?}");
    assert!(
        last(&ev)["message"]
            .as_str()
            .unwrap()
            .contains("resource_selection_resume_invalid: selector value is invalid")
    );
    // Without the capability the pipeline asks nothing of the kind.
    let ev = s.run(&s.body("t3", "r1", "pipeline: select a vswitch"));
    assert!(
        interrupts(&ev)
            .iter()
            .all(|i| i["reason"] != "cloud_resource_selection"),
        "{ev:?}"
    );
}

#[test]
fn a_deployment_confirmation_is_its_own_interrupt_in_1_0_answered_as_the_runner_parses() {
    let s = stack(AguiProtocol::V1_0);
    let ev = s.run(&s.body("t1", "r1", "pipeline: confirm the deployment"));
    let all = interrupts(&ev);
    assert_eq!(all.len(), 1, "{ev:?}");
    let i = &all[0];
    assert_eq!(i["reason"], "deployment_confirmation");
    assert!(i["id"].as_str().unwrap().starts_with("confirm-evt-"), "{i}");
    assert_eq!(
        i["message"],
        "Choose the next action\n- confirm: Confirm deployment\n- reselect: Choose another solution\n- cancel: Cancel"
    );
    let m = &i["metadata"];
    assert_eq!(m["kind"], "deployment_confirmation");
    assert_eq!(
        m["deployment"]["solution_summary"],
        "Two ECS instances behind an SLB."
    );
    assert_eq!(m["deployment"]["preview_ready_for_create"], true);
    assert_eq!(
        m["standardOptions"][0],
        json!({"id": "confirm", "title": "Confirm deployment"})
    );
    assert_eq!(
        i["responseSchema"]["oneOf"][0]["properties"]["action"]["enum"],
        json!(["confirm", "reselect", "cancel"])
    );
    #[cfg(feature = "threads")]
    {
        let r = get(s.addr(), "/threads/t1");
        assert_eq!(r.json()["interrupts"][0]["kind"], "deployment_confirmation");
    }
    let id = i["id"].as_str().unwrap();
    // An action the step did not offer, or a blank override name, is refused before the kernel.
    for (run, bad) in [
        ("r2", json!({"action": "adjust"})),
        (
            "r2b",
            json!({"action": "confirm", "parameterOverrides": {" ": "x"}}),
        ),
    ] {
        let ev = answer(&s, "t1", run, id, "resolved", bad.clone());
        assert_eq!(code(&ev), "RESUME_PAYLOAD_INVALID", "{bad}: {ev:?}");
    }
    let ev = answer(
        &s,
        "t1",
        "r3",
        id,
        "resolved",
        json!({"action": "confirm", "parameterOverrides": {"InstanceType": "ecs.g7.xlarge"}}),
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    // The kernel got `encode_deployment_confirmation`'s text and read it as structured.
    assert!(
        text_of(&ev)
            .contains(r#"Action confirm; parameter overrides {"InstanceType":"ecs.g7.xlarge"}."#),
        "{ev:?}"
    );
    // Free text is the kernel's natural-language reading.
    let ev = s.run(&s.body("t2", "r1", "pipeline: confirm the deployment"));
    let id = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let ev = answer(
        &s,
        "t2",
        "r2",
        &id,
        "resolved",
        json!({"freeText": "go ahead"}),
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(
        text_of(&ev).contains("Not a structured confirmation: go ahead"),
        "{ev:?}"
    );
}

#[test]
fn a_deployment_confirmation_in_0_1_is_the_references_no_interrupt() {
    let s = stack(AguiProtocol::V0_1);
    let ev = s.run(&s.body("t1", "r1", "pipeline: confirm the deployment"));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(interrupts(&ev).is_empty(), "{ev:?}");
}
