//! AG-UI runs end to end through real sockets: adapter in front of the scripted demo kernel.
//! Every stream passes the stream checker (one terminal event, last; balanced spans).

use crate::common;

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::Write;
use std::time::Duration;

use common::*;
use iac_agui::catalog::Msg;
use iac_agui::config::AguiProtocol;
use iac_agui::i18n::Lang;
use iac_agui::server::ServerConfig;
use serde_json::{Value, json};

fn code(events: &[Value]) -> String {
    last(events)["code"].as_str().unwrap_or("").to_string()
}

fn pending_id(events: &[Value]) -> String {
    interrupts(events)[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn plain_run_is_complete_and_well_formed() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "hello"));
    assert_eq!(
        types(&ev),
        [
            "RUN_STARTED",
            "CUSTOM",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let sess = session_event(&ev);
    assert_eq!(sess["threadId"], "t1");
    assert_eq!(sess["aguiRunId"], "r1");
    assert!(sess["taskId"].is_string() && sess["sessionId"].is_string());
    assert!(sess["contextId"].as_str().unwrap().starts_with("agui-"));
    let fin = last(&ev);
    assert_eq!(fin["outcome"], json!({"type": "success"}));
    assert_eq!(fin["usage"][0]["inputTokens"], 120);
    // The assistantFinal status repeating the text was not emitted again.
    let text: String = ev
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello! This is the iac-agui demo kernel.");
    // The execution is terminal and the thread file says so.
    let st = s.state_file("t1");
    assert_eq!(st["execution"]["taskId"], Value::Null);
    assert_eq!(st["terminalExecutionIds"][0], sess["executionId"]);
    assert!(st["runDigests"]["r1"].is_string());
}

#[test]
fn thinking_becomes_reasoning() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "think first"));
    let ty = types(&ev);
    assert!(ty.contains(&"REASONING_START".to_string()));
    let r = ev.iter().find(|e| e["type"] == "REASONING_START").unwrap();
    assert_eq!(r["messageId"], "reasoning-r1");
    let deltas: Vec<&str> = ev
        .iter()
        .filter(|e| e["type"] == "REASONING_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        deltas,
        [
            "The user wants to see reasoning. ",
            "I will think out loud first."
        ]
    );
}

#[test]
fn permission_interrupt_resume_and_replays() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "permission please"));
    let fin = last(&ev);
    assert_eq!(fin["outcome"]["type"], "interrupt");
    let i = &interrupts(&ev)[0];
    assert_eq!(i["reason"], "tool_call");
    assert_eq!(i["metadata"]["kind"], "permission");
    assert_eq!(i["metadata"]["standardOptions"][0]["id"], "allow_once");
    assert!(i["toolCallId"].is_string());
    let pid = pending_id(&ev);
    // The interrupt was durable before RUN_FINISHED was written.
    let st = s.state_file("t1");
    assert!(st["execution"]["pending"][&pid].is_object());
    assert_eq!(st["execution"]["pending"][&pid]["sideband"], false);
    // A new normal run is refused while the interrupt waits.
    let r = s.post(&s.body("t1", "r2", "hello"));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (409, "RESUME_REQUIRED")
    );
    // Resume: the tool result then the continuation; no replayed text.
    let answer =
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]);
    let ev2 = s.run(&s.resume_body("t1", "r3", answer.clone()));
    assert_eq!(last(&ev2)["outcome"]["type"], "success");
    assert_eq!(types(&ev2)[1], "CUSTOM");
    assert_eq!(
        session_event(&ev2)["executionId"],
        session_event(&ev)["executionId"]
    );
    let result = ev2
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert_eq!(result["content"], "Exit code: 0");
    let st = s.state_file("t1");
    assert_eq!(st["execution"]["pending"], json!({}));
    assert_eq!(
        st["appliedResumeDigests"][0]["digest"],
        "289281c743b2a91d60f25b59680f04683bd82766f7a9b2eb405975140373868e"
    );
    // The identical answer again: already applied. A conflicting one after the end: lost.
    let ev3 = s.run(&s.resume_body("t1", "r4", answer));
    assert_eq!(code(&ev3), "RESUME_ALREADY_APPLIED");
    let deny = json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "deny"}}]);
    let ev4 = s.run(&s.resume_body("t1", "r5", deny));
    assert_eq!(code(&ev4), "EXECUTION_LOST");
    assert_eq!(
        last(&ev4)["message"],
        Msg::ResumeTaskUnavailable.text(Lang::En)
    );
    // And a next turn works, with a new execution.
    let ev5 = s.run(&s.body("t1", "r6", "hello"));
    assert_eq!(last(&ev5)["outcome"]["type"], "success");
    assert_ne!(
        session_event(&ev5)["executionId"],
        session_event(&ev)["executionId"]
    );
}

#[test]
fn deny_and_cancelled_permissions() {
    for status in ["deny", "cancelled"] {
        let s = Stack::new();
        let ev = s.run(&s.body("t1", "r1", "permission please"));
        let pid = pending_id(&ev);
        let entry = if status == "deny" {
            json!({"interruptId": pid, "status": "resolved", "payload": {"decision": "deny"}})
        } else {
            json!({"interruptId": pid, "status": "cancelled"})
        };
        let ev2 = s.run(&s.resume_body("t1", "r2", json!([entry])));
        assert_eq!(last(&ev2)["outcome"]["type"], "success", "{status}");
        let r = ev2
            .iter()
            .find(|e| e["type"] == "TOOL_CALL_RESULT")
            .unwrap();
        assert!(
            r["content"].as_str().unwrap().contains("denied"),
            "{status}"
        );
    }
}

#[test]
fn question_answer_sends_the_label_and_a_resolved_tool_result() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "ask me a question"));
    let i = &interrupts(&ev)[0];
    assert_eq!(i["reason"], "input_required");
    assert!(
        i["message"]
            .as_str()
            .unwrap()
            .contains("- cn-hangzhou: Hangzhou")
    );
    let pid = pending_id(&ev);
    let ev2 = s.run(&s.resume_body("t1", "r2", json!([{"interruptId": pid, "status": "resolved", "payload": {"selectedId": "cn-hangzhou"}}])));
    assert_eq!(last(&ev2)["outcome"]["type"], "success");
    let ty = types(&ev2);
    assert_eq!(&ty[..3], ["RUN_STARTED", "CUSTOM", "TOOL_CALL_RESULT"]);
    assert_eq!(ev2[2]["content"], "Hangzhou");
    let text: String = ev2
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(text.contains("Using Hangzhou."), "{text}");
}

#[test]
fn cancelled_question_cancels_the_execution() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "a question"));
    let pid = pending_id(&ev);
    let tid = session_event(&ev)["taskId"].as_str().unwrap().to_string();
    let ev2 = s.run(&s.resume_body(
        "t1",
        "r2",
        json!([{"interruptId": pid, "status": "cancelled"}]),
    ));
    assert_eq!(code(&ev2), "CANCELLED");
    assert_eq!(
        last(&ev2)["message"],
        Msg::CancelledByResponse.text(Lang::En)
    );
    assert_eq!(
        s.kernel.task_state(&tid).as_deref(),
        Some("TASK_STATE_CANCELED")
    );
    assert_eq!(
        last(&s.run(&s.body("t1", "r3", "hello")))["outcome"]["type"],
        "success"
    );
}

#[test]
fn resume_validation_errors_keep_the_interrupt_answerable() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "a question"));
    let pid = pending_id(&ev);
    let cases: Vec<(Value, &str, Msg)> = vec![
        (json!([]), "INCOMPLETE_RESUME", Msg::ResumeIncomplete),
        (
            json!([{"interruptId": pid, "status": "resolved", "payload": {"freeText": "a"}}, {"interruptId": pid, "status": "resolved", "payload": {"freeText": "b"}}]),
            "INCOMPLETE_RESUME",
            Msg::ResumeDuplicateIds,
        ),
        (
            json!([{"interruptId": pid, "status": "resolved", "payload": {"freeText": "x"}}, {"interruptId": "nope", "status": "resolved", "payload": {}}]),
            "UNKNOWN_INTERRUPT",
            Msg::ResumeUnknownInterrupt,
        ),
        (
            json!([{"interruptId": pid, "status": "resolved"}]),
            "RESUME_PAYLOAD_INVALID",
            Msg::ResumePayloadRequired,
        ),
        (
            json!([{"interruptId": pid, "status": "resolved", "payload": {"freeText": ""}}]),
            "RESUME_PAYLOAD_INVALID",
            Msg::ResumePayloadInvalid,
        ),
        (
            json!([{"interruptId": pid, "status": "resolved", "payload": {"selectedId": "mars"}}]),
            "RESUME_PAYLOAD_INVALID",
            Msg::ResumePayloadInvalid,
        ),
        // Regression (second red-team, fault 4): white space only passed `minLength: 1`, the
        // kernel refused it, and the run ended A2A_UNAVAILABLE ("retry later").
        (
            json!([{"interruptId": pid, "status": "resolved", "payload": {"freeText": " \t "}}]),
            "RESUME_PAYLOAD_INVALID",
            Msg::ResumePayloadInvalid,
        ),
    ];
    for (n, (resume, want, msg)) in cases.into_iter().enumerate() {
        let ev = s.run(&s.resume_body("t1", &format!("bad{n}"), resume.clone()));
        assert_eq!(code(&ev), want, "{resume}");
        assert_eq!(last(&ev)["message"], msg.text(Lang::En), "{resume}");
    }
    assert!(s.state_file("t1")["execution"]["pending"][&pid].is_object());
    // A corrected resume (new runId) still works.
    let ev = s.run(&s.resume_body(
        "t1",
        "good",
        json!([{"interruptId": pid, "status": "resolved", "payload": {"freeText": "Beijing"}}]),
    ));
    assert_eq!(last(&ev)["outcome"]["type"], "success");
}

#[test]
fn permission_payload_schema_is_enforced() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "permission"));
    let pid = pending_id(&ev);
    let ev2 = s.run(&s.resume_body("t1", "r2", json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_always"}}])));
    assert_eq!(code(&ev2), "RESUME_PAYLOAD_INVALID");
}

#[test]
fn admission_gates_over_http() {
    let s = Stack::new();
    // Resume on an unknown thread, with a wrong rosInvocationId, with nothing pending.
    let r = s.post(&s.resume_body("nobody", "r1", json!([])));
    assert_eq!((r.status, r.error_code().as_str()), (409, "EXECUTION_LOST"));
    assert_eq!(r.error_message(), Msg::ResumeExecutionGone.text(Lang::En));
    s.run(&s.body("t1", "r1", "hello"));
    let mut b = s.resume_body("t1", "r2", json!([]));
    b["forwardedProps"]["iacCode"]["rosInvocationId"] = "other".into();
    let r = s.post(&b);
    assert_eq!(
        (r.status, r.error_message()),
        (409, Msg::ResumeMismatch.text(Lang::En).to_string())
    );
    let ev = s.run(&s.resume_body("t1", "r3", json!([])));
    assert_eq!(code(&ev), "EXECUTION_LOST");
    // Idempotency: same body → duplicate; different body → conflict; other thread → fine.
    let r = s.post(&s.body("t1", "r1", "hello"));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (409, "DUPLICATE_RUN_ID")
    );
    let r = s.post(&s.body("t1", "r1", "hello again"));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (409, "RUN_ID_CONFLICT")
    );
    assert_eq!(
        last(&s.run(&s.body("t2", "r1", "hello")))["outcome"]["type"],
        "success"
    );
    // Binding: another workspace or another user.
    std::fs::create_dir_all(s.dir.join("ws2")).unwrap();
    let mut b = s.body("t1", "r9", "hello");
    b["forwardedProps"]["iacCode"]["cwd"] = s.dir.join("ws2").to_string_lossy().into_owned().into();
    assert_eq!(s.post(&b).error_code(), "THREAD_BINDING_CONFLICT");
    let mut b = s.body("t1", "r9", "hello");
    b["forwardedProps"]["iacCode"]["userId"] = "u2".into();
    assert_eq!(s.post(&b).error_code(), "THREAD_BINDING_CONFLICT");
    // A refused runId is not burned.
    assert_eq!(
        last(&s.run(&s.body("t1", "r9", "hello")))["outcome"]["type"],
        "success"
    );
}

#[test]
fn thread_busy_while_streaming_and_duplicate_of_the_running_run() {
    let s = Stack::new();
    let mut r = s.open_stream(&s.body("t1", "slow1", "slow please"));
    let mut raw = Vec::new();
    let session = loop {
        raw.extend(r.chunk().unwrap());
        if let Some(e) = sse_events(&raw)
            .0
            .into_iter()
            .find(|e| e["name"] == "iac-code.session.v1")
        {
            break e;
        }
    };
    let busy = s.post(&s.body("t1", "other", "hello"));
    assert_eq!(
        (busy.status, busy.error_code().as_str()),
        (409, "THREAD_BUSY")
    );
    // It names the active run, so a client can subscribe to it or cancel it.
    let err = &busy.json()["error"];
    assert_eq!(err["executionId"], session["value"]["executionId"]);
    assert_eq!(err["runId"], "slow1");
    assert!(err["message"].as_str().unwrap().contains("executionId"));
    let dup = s.post(&s.body("t1", "slow1", "slow please"));
    assert_eq!(dup.error_code(), "DUPLICATE_RUN_ID");
    drop(r);
}

#[test]
fn cancel_a_running_execution() {
    let s = Stack::new();
    let mut r = s.open_stream(&s.body("t1", "r1", "slow please"));
    let mut events = Vec::new();
    let exec = loop {
        let c = r.chunk().unwrap();
        let (evs, _) = sse_events(&c);
        events.extend(evs.clone());
        if let Some(e) = evs.iter().find(|e| e["name"] == "iac-code.session.v1") {
            break e["value"]["executionId"].as_str().unwrap().to_string();
        }
    };
    assert_eq!(s.cancel(&exec, "t1", "wrong-ros").status, 404);
    assert_eq!(s.cancel(&exec, "other-thread", "ros-1").status, 404);
    let c = s.cancel(&exec, "t1", "ros-1");
    assert_eq!(c.status, 200);
    assert_eq!(
        c.json(),
        json!({"executionId": exec, "status": "cancelled"})
    );
    while let Some(ch) = r.chunk() {
        events.extend(sse_events(&ch).0);
    }
    check_stream(&events).unwrap();
    assert_eq!(code(&events), "CANCELLED");
    assert_eq!(
        s.cancel(&exec, "t1", "ros-1").json()["status"],
        "already_terminal"
    );
    assert_eq!(
        s.cancel("unknown", "t1", "ros-1").error_code(),
        "EXECUTION_NOT_FOUND"
    );
    assert_eq!(s.cancel(&exec, "nobody", "ros-1").status, 404);
    // The thread is free again.
    assert_eq!(
        last(&s.run(&s.body("t1", "r2", "hello")))["outcome"]["type"],
        "success"
    );
}

#[test]
fn cancel_a_paused_execution() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "permission"));
    let exec = session_event(&ev)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let task = session_event(&ev)["taskId"].as_str().unwrap().to_string();
    assert_eq!(s.cancel(&exec, "t1", "ros-1").json()["status"], "cancelled");
    assert_eq!(
        s.kernel.task_state(&task).as_deref(),
        Some("TASK_STATE_CANCELED")
    );
    assert_eq!(s.state_file("t1")["execution"]["pending"], json!({}));
    assert_eq!(
        last(&s.run(&s.body("t1", "r2", "hello")))["outcome"]["type"],
        "success"
    );
    // An old rotated execution is already terminal.
    assert_eq!(
        s.cancel(&exec, "t1", "ros-1").json()["status"],
        "already_terminal"
    );
}

#[test]
fn client_disconnect_mid_run_cancels_the_task() {
    let s = Stack::new();
    let mut r = s.open_stream(&s.body("t1", "r1", "slow please"));
    let task = loop {
        let (evs, _) = sse_events(&r.chunk().unwrap());
        if let Some(e) = evs.iter().find(|e| e["name"] == "iac-code.session.v1") {
            break e["value"]["taskId"].as_str().unwrap().to_string();
        }
    };
    drop(r);
    assert!(wait_until(Duration::from_secs(10), || s
        .kernel
        .task_state(&task)
        .as_deref()
        == Some("TASK_STATE_CANCELED")));
    // The thread is released and usable.
    assert!(wait_until(Duration::from_secs(5), || s
        .post(&s.body("t1", "probe", "hello"))
        .status
        == 200));
}

#[test]
fn disconnect_after_an_interrupt_keeps_it() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "permission"));
    let pid = pending_id(&ev);
    let task = session_event(&ev)["taskId"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        s.kernel.task_state(&task).as_deref(),
        Some("TASK_STATE_INPUT_REQUIRED")
    );
    assert!(s.state_file("t1")["execution"]["pending"][&pid].is_object());
}

#[test]
fn restart_between_interrupt_and_resume() {
    let mut s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "permission"));
    let pid = pending_id(&ev);
    s.start_server(ServerConfig::default());
    let ev2 = s.run(&s.resume_body(
        "t1",
        "r2",
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]),
    ));
    assert_eq!(last(&ev2)["outcome"]["type"], "success");
    // The same runId is still burned after the restart.
    assert_eq!(
        s.post(&s.body("t1", "r1", "permission")).error_code(),
        "DUPLICATE_RUN_ID"
    );
}

#[test]
fn failed_task_is_an_execution_failure_after_its_text() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "please fail"));
    assert_eq!(code(&ev), "A2A_EXECUTION_FAILED");
    let text: String = ev
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(text.contains("demo failure"));
    assert!(last(&ev)["threadId"] == "t1" && last(&ev)["runId"] == "r1");
}

#[test]
fn artifacts_and_tool_progress_become_custom_events() {
    let s = Stack::new();
    let ev = s.run(&s.body("t1", "r1", "make an artifact"));
    let names: Vec<&str> = ev
        .iter()
        .filter(|e| e["type"] == "CUSTOM")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"iac-code.artifact.v1"));
    assert!(names.contains(&"iac-code.tool-progress.v1"));
    let art = ev
        .iter()
        .find(|e| e["name"] == "iac-code.artifact.v1")
        .unwrap();
    assert_eq!(art["value"]["schemaVersion"], 1);
    assert_eq!(art["value"]["name"], "template.yml");
}

#[test]
fn pipeline_run_question_and_resume() {
    let s = Stack::new();
    let mut b = s.body("t1", "r1", "deploy something");
    b["forwardedProps"]["iacCode"]["runMode"] = "pipeline".into();
    let ev = s.run(&b);
    let ty = types(&ev);
    assert!(ty.contains(&"STEP_STARTED".to_string()));
    assert_eq!(last(&ev)["outcome"]["type"], "interrupt");
    let customs: Vec<&str> = ev
        .iter()
        .filter(|e| e["name"] == "iac-code.pipeline.v1")
        .map(|e| e["value"]["eventType"].as_str().unwrap())
        .collect();
    assert_eq!(customs, ["pipeline_started"]);
    let text = ev
        .iter()
        .find(|e| e["type"] == "TEXT_MESSAGE_START")
        .unwrap();
    assert!(
        text["messageId"]
            .as_str()
            .unwrap()
            .starts_with("pipeline-message:pipeline-t1:step:step-intent_parsing-1")
    );
    let st = s.state_file("t1");
    assert_eq!(
        st["execution"]["pipelineOpenSteps"],
        json!(["step:intent_parsing"])
    );
    assert!(st["execution"]["pipelineSequence"].as_i64().unwrap() >= 6);
    let pid = pending_id(&ev);
    let mut r = s.resume_body(
        "t1",
        "r2",
        json!([{"interruptId": pid, "status": "resolved", "payload": {"selectedId": "website"}}]),
    );
    r["forwardedProps"]["iacCode"]["runMode"] = "pipeline".into();
    let ev2 = s.run(&r);
    let ty2 = types(&ev2);
    // Durable steps reopen first; the recovery snapshot follows.
    assert_eq!(&ty2[..2], ["RUN_STARTED", "STEP_STARTED"]);
    assert!(ty2.contains(&"ACTIVITY_SNAPSHOT".to_string()));
    assert_eq!(last(&ev2)["outcome"]["type"], "success");
    let names: Vec<&str> = ev2
        .iter()
        .filter(|e| e["type"] == "STEP_STARTED")
        .map(|e| e["stepName"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("candidate:cand-1:")),
        "{names:?}"
    );
    let customs: Vec<&str> = ev2
        .iter()
        .filter(|e| e["name"] == "iac-code.pipeline.v1")
        .map(|e| e["value"]["eventType"].as_str().unwrap())
        .collect();
    assert!(
        customs.contains(&"pipeline_completed")
            && customs.contains(&"candidate_started")
            && customs.contains(&"stack_progress")
    );
    // Parallel candidate texts have separate message ids.
    let ids: std::collections::BTreeSet<&str> = ev2
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .map(|e| e["messageId"].as_str().unwrap())
        .collect();
    assert!(ids.len() >= 2, "{ids:?}");
}

#[test]
fn guidance_gates() {
    let s = Stack::new();
    let mut g = s.body("t1", "g1", "go faster");
    g["forwardedProps"]["iacCode"]["activeGuidance"] = true.into();
    g["forwardedProps"]["iacCode"]["runMode"] = "pipeline".into();
    assert_eq!(s.post(&g).error_code(), "EXECUTION_LOST");
    s.run(&s.body("t1", "r1", "hello"));
    // After the task completed there is nothing to guide.
    assert_eq!(s.post(&g).error_code(), "EXECUTION_LOST");
    g["forwardedProps"]["iacCode"]["runMode"] = "normal".into();
    assert_eq!(s.post(&g).error_code(), "EXECUTION_LOST");
}

#[test]
fn message_content_is_validated_before_the_stream() {
    let s = Stack::new();
    let mut b = s.body("t1", "r1", "x");
    b["messages"] = json!([{"id": "a", "role": "assistant", "content": "only me"}]);
    let r = s.post(&b);
    assert_eq!((r.status, r.error_code().as_str()), (400, "INVALID_INPUT"));
    assert_eq!(r.error_message(), Msg::UserMessageRequired.text(Lang::En));
    b["messages"] = json!([{"id": "u", "role": "user", "content": [{"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}]}]);
    assert_eq!(
        s.post(&b).error_message(),
        Msg::RemoteMediaUnsupported.text(Lang::En)
    );
    // Nothing was recorded: the same runId works once the content is fixed.
    let ok = s.body("t1", "r1", "hello");
    assert_eq!(last(&s.run(&ok))["outcome"]["type"], "success");
}

#[test]
fn envelope_props_cwd_and_tools_errors() {
    let s = Stack::new();
    let msg = |b: &Value| {
        let r = s.post(b);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (400, "INVALID_INPUT"),
            "{}",
            r.text()
        );
        r.error_message()
    };
    let mut b = s.body("t1", "r1", "x");
    b["tools"] = json!({"not": "a list"});
    assert_eq!(msg(&b), "`tools` must be of type array.");
    let mut b = s.body("", "r1", "x");
    b["threadId"] = "".into();
    assert_eq!(msg(&b), "`threadId` is required.");
    let mut b = s.body("t1", "r1", "x");
    b["forwardedProps"]["iacCode"]["schemaVersion"] = 2.into();
    assert_eq!(
        msg(&b),
        "`forwardedProps.iacCode.schemaVersion` does not have an allowed value."
    );
    let mut b = s.body("t1", "r1", "x");
    b["forwardedProps"]["iacCode"]["colour"] = "red".into();
    assert_eq!(
        msg(&b),
        "`forwardedProps.iacCode.colour` is not a known field."
    );
    let mut b = s.body("t1", "r1", "x");
    b["forwardedProps"] = json!({});
    assert!(
        msg(&b).starts_with(
            "`forwardedProps.iacCode` is required (schemaVersion, rosInvocationId, cwd)"
        )
    );
    let mut b = s.body("t1", "r1", "x");
    b["forwardedProps"]["iacCode"]["cwd"] = "/etc".into();
    assert_eq!(msg(&b), Msg::CwdOutsideRoots.text(Lang::En));
    let mut b = s.body("t1", "r1", "x");
    b["forwardedProps"]["iacCode"]["cwd"] = "relative".into();
    let m = msg(&b);
    assert!(
        m.contains("`forwardedProps.iacCode.cwd`") && m.contains("absolute path"),
        "{m}"
    );
    let mut b = s.body("t1", "r1", "x");
    b["tools"] = json!([{"name": "t", "description": "d"}]);
    let r = s.post(&b);
    assert_eq!(
        (r.status, r.error_message()),
        (400, Msg::ToolsUnsupported.text(Lang::En).to_string())
    );
    // Japanese preferred in the payload, even for an envelope error.
    let mut b = s.body("t1", "r1", "x");
    b["context"] = json!("not a list");
    b["forwardedProps"]["iacCode"]["preferredLanguage"] = "ja".into();
    assert_eq!(msg(&b), "`context` の型は array でなければなりません。");
}

#[test]
fn upstream_faults_end_in_one_run_error() {
    if !alone_in_a_process(module_path!(), "upstream_faults_end_in_one_run_error") {
        return;
    }
    let s = Stack::with(
        AguiProtocol::V0_1,
        ServerConfig::default(),
        Duration::from_secs(2),
    );
    let cases = [
        ("fault-garbage", &["A2A_UNAVAILABLE"][..]),
        ("fault-die", &["A2A_UNAVAILABLE", "A2A_EXECUTION_FAILED"]),
        ("fault-huge", &["A2A_UNAVAILABLE"]),
        ("fault-wrongctx", &["A2A_PROTOCOL_ERROR"]),
        ("fault-wrongtask", &["A2A_PROTOCOL_ERROR"]),
        ("fault-noinputid", &["A2A_PROTOCOL_ERROR"]),
        ("fault-http500", &["A2A_UNAVAILABLE"]),
        ("fault-rpcerror", &["A2A_UNAVAILABLE"]),
        ("fault-hang", &["A2A_UNAVAILABLE"]),
        // A slow drip is slow, not dead: it completes.
        ("fault-drip", &["success"]),
    ];
    let threads = || {
        std::fs::read_dir("/proc/self/task")
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let before = threads();
    for (n, (kw, codes)) in cases.iter().enumerate() {
        let thread = format!("f{n}");
        let start = SystemClock.now();
        let ev = s.run(&s.body(&thread, "r1", kw));
        let got = if code(&ev).is_empty() {
            "success".to_string()
        } else {
            code(&ev)
        };
        assert!(codes.contains(&got.as_str()), "{kw}: {got}");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{kw} took {:?}",
            start.elapsed()
        );
        // The thread is usable afterwards.
        assert_eq!(
            last(&s.run(&s.body(&thread, "r2", "hello")))["outcome"]["type"],
            "success",
            "{kw}"
        );
    }
    // No worker thread or upstream connection outlives its run.
    assert!(
        wait_until(Duration::from_secs(10), || threads() <= before + 2),
        "threads before {before}, after {}",
        threads()
    );
    assert!(
        wait_until(Duration::from_secs(10), || s.kernel.open_connections() == 0),
        "kernel connections still open: {}",
        s.kernel.open_connections()
    );
}

#[test]
fn a_kernel_that_refuses_our_token_is_unavailable() {
    let mut s = Stack::new();
    // The same kernel, but the adapter presents a wrong bearer token: every call is a 401.
    if let Some(old) = s.server.take() {
        old.stop();
    }
    let store = iac_agui::store::files::FileStore::open(&s.dir.join("state")).unwrap();
    let shared = std::sync::Arc::new(iac_agui::adapter::Shared::new(
        iac_agui::adapter::threads::Registry::files(std::sync::Arc::new(store)),
        iac_agui::a2a::client::A2aClient::new(iac_agui::a2a::client::A2aConfig::new(
            s.kernel.base_url(),
            Some("wrong".into()),
        )),
        std::sync::Arc::new(iac_agui::adapter::env::SystemEnv),
        vec![s.dir.clone()],
        None,
        AguiProtocol::V0_1,
    ));
    s.server = Some(TestServer::start(
        std::sync::Arc::new(iac_agui::adapter::AguiBackend { shared }),
        None,
        ServerConfig::default(),
        16,
    ));
    let ev = s.run(&s.body("t1", "r1", "hello"));
    assert_eq!(code(&ev), "A2A_UNAVAILABLE");
}

/// AG-UI 1.0's `protocolVersion` is an optional string: a number is a 400 that names it
/// (issue 36, request rules), whatever the server's own dialect (issue 57: the field chooses
/// the request's dialect, and only a client that knows it sends it).
#[test]
fn a_malformed_protocol_version_is_a_400_naming_it_whatever_the_servers_dialect() {
    let v1 = Stack::with(
        AguiProtocol::V1_0,
        ServerConfig::default(),
        Duration::from_secs(30),
    );
    let mut b = v1.body("pv", "r1", "hello");
    b["protocolVersion"] = json!(1.0);
    let r = v1.post(&b);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error_code(), "INVALID_INPUT");
    assert!(
        r.error_message().contains("protocolVersion"),
        "{}",
        r.text()
    );
    b["protocolVersion"] = json!("1.0");
    assert_eq!(last(&v1.run(&b))["type"], "RUN_FINISHED");
    let v01 = Stack::new();
    let mut b = v01.body("pv", "r1", "hello");
    b["protocolVersion"] = json!(1);
    let r = v01.post(&b);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.error_message().contains("protocolVersion"),
        "{}",
        r.text()
    );
    b["protocolVersion"] = Value::Null;
    assert_eq!(last(&v01.run(&b))["type"], "RUN_FINISHED");
}

#[test]
fn agui_1_0_mode() {
    let s = Stack::with(
        AguiProtocol::V1_0,
        ServerConfig::default(),
        Duration::from_secs(30),
    );
    let ev = s.run(&s.body("t1", "r1", "hello"));
    assert_eq!(ev[0]["protocolVersion"], "1.0");
    let ev = s.run(&s.body("t2", "r1", "a question"));
    let pid = pending_id(&ev);
    let ev2 = s.run(&s.resume_body(
        "t2",
        "r2",
        json!([{"interruptId": pid, "status": "cancelled"}]),
    ));
    assert_eq!(last(&ev2)["outcome"], json!({"type": "cancelled"}));
    // Regression (stock clients): a resume's answer is a message of its own, not more of the
    // interrupted run's message (HttpAgent 1.0 appended it above the tool result).
    let (first, resumed) = permission_then_allow(&s, "t4");
    let (before, after) = (text_message_ids(&first), text_message_ids(&resumed));
    assert!(
        !before.is_empty() && !after.is_empty(),
        "{first:?} {resumed:?}"
    );
    assert!(
        after.iter().all(|a| !before.contains(a)),
        "the resume reused a message id: {before:?} {after:?}"
    );
    // Regression (stock clients): the 1.0 RunErrorEvent has no threadId/runId, and
    // `HttpAgent` 1.0 warns about (and strips) the unknown keys on every RUN_ERROR.
    let ev = s.run(&s.body("t3", "r1", "fail"));
    let end = last(&ev);
    assert_eq!(end["type"], "RUN_ERROR", "{ev:?}");
    assert!(
        end.get("threadId").is_none() && end.get("runId").is_none(),
        "{end}"
    );
    assert!(end["code"].is_string() && end["message"].is_string());
}

#[test]
fn agui_0_1_mode_keeps_the_ids_on_run_error() {
    let s = Stack::new();
    let ev = s.run(&s.body("t3", "r1", "fail"));
    let end = last(&ev);
    assert_eq!(end["type"], "RUN_ERROR", "{ev:?}");
    assert_eq!(
        (end["threadId"].as_str(), end["runId"].as_str()),
        (Some("t3"), Some("r1"))
    );
}

#[test]
fn guidance_into_a_running_pipeline() {
    let s = Stack::new();
    let mut main = s.body("t1", "main", "slow pipeline");
    main["forwardedProps"]["iacCode"]["runMode"] = "pipeline".into();
    let mut r = Reader::new(s.server.as_ref().unwrap().connect());
    r.sock
        .write_all(&request(
            "POST",
            "/",
            &[("Content-Type", "application/json")],
            &serde_json::to_vec(&main).unwrap(),
        ))
        .unwrap();
    assert_eq!(r.head().unwrap().0, 200);
    let mut events = Vec::new();
    loop {
        let (evs, _) = sse_events(&r.chunk().unwrap());
        let started = evs.iter().any(|e| e["type"] == "STEP_STARTED");
        events.extend(evs);
        if started {
            break;
        }
    }
    // Guidance skips THREAD_BUSY, is validated but not projected, and has no session event.
    let mut g = s.body("t1", "g1", "focus on cost");
    g["forwardedProps"]["iacCode"]["activeGuidance"] = true.into();
    g["forwardedProps"]["iacCode"]["runMode"] = "pipeline".into();
    let ev = s.run(&g);
    assert_eq!(types(&ev), ["RUN_STARTED", "RUN_FINISHED"]);
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    // The main run goes on; its stream carries the kernel's reaction to the guidance.
    while let Some(c) = r.chunk() {
        events.extend(sse_events(&c).0);
    }
    check_stream(&events).unwrap();
    assert_eq!(last(&events)["outcome"]["type"], "success");
    // Guidance runIds are idempotent too.
    assert_eq!(s.post(&g).error_code(), "DUPLICATE_RUN_ID");
}

#[test]
fn long_thread_ids_are_accepted() {
    let s = Stack::new();
    // Up to the id bound (256 bytes; the reference refused 300 with a 400 and 240 with a 503).
    for n in [200, 240, 256] {
        let t = "x".repeat(n);
        assert_eq!(
            last(&s.run(&s.body(&t, "r1", "hello")))["outcome"]["type"],
            "success",
            "{n}"
        );
    }
    let names: Vec<String> = std::fs::read_dir(s.dir.join("state/threads"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&format!("{}.json", "x".repeat(200))));
    // Each with its conversation beside it (`~` never occurs in a stem), when they are kept.
    let state = |n: &&String| n.starts_with("aguihash~") && !n.contains("~history");
    assert_eq!(names.iter().filter(state).count(), 2);
    assert_eq!(
        names
            .iter()
            .filter(|n| n.ends_with("~history.jsonl"))
            .count(),
        if cfg!(feature = "threads") { 3 } else { 0 }
    );
}

/// Issue 57, 3–4: a 6 MiB thread id was repeated in every event, kept in the replay log and
/// the thread cache; a right-to-left override reached the logs raw. Both ids, in every route
/// and both dialects, are refused with a 400 naming the field before anything is kept.
#[test]
fn over_long_or_unshowable_ids_are_refused_before_anything_is_stored() {
    for protocol in [AguiProtocol::V0_1, AguiProtocol::V1_0] {
        let s = Stack::with(protocol, ServerConfig::default(), Duration::from_secs(30));
        let huge = "x".repeat(6 << 20);
        let over = "x".repeat(257);
        let refused = |r: &Resp, field: &str| {
            assert_eq!(r.status, 400, "{protocol:?} {field}: {}", r.text());
            assert_eq!(r.error_code(), "INVALID_INPUT");
            assert!(
                r.error_message()
                    .starts_with(&format!("`{field}` must be at most 256 bytes")),
                "{}",
                r.error_message()
            );
        };
        for id in [
            huge.as_str(),
            over.as_str(),
            "t\u{202e}1",
            "t\u{2066}1\u{2069}",
            "t\u{200b}",
        ] {
            let mut b = s.body(id, "r1", "hello");
            refused(&s.post(&b), "threadId");
            b["threadId"] = "t1".into();
            b["runId"] = id.into();
            refused(&s.post(&b), "runId");
            b["runId"] = "r1".into();
            b["parentRunId"] = id.into();
            refused(&s.post(&b), "parentRunId");
            let b = json!({"thread_id": id, "run_id": "r1", "state": {}, "tools": [], "context": [],
                "messages": [], "forwardedProps": b["forwardedProps"]});
            refused(&s.post(&b), "threadId");
            if id.len() > 64 * 1024 {
                continue; // past the cancel and subscribe bodies' own bound (413)
            }
            let cancel = json!({"threadId": id, "rosInvocationId": "ros-1"});
            let path = "/extensions/iac-code/v1/executions/e1/cancel";
            let body = serde_json::to_vec(&cancel).unwrap();
            refused(&post_json(s.addr(), path, &[], &body), "threadId");
            let path = "/extensions/iac-code/v1/executions/e1/subscribe";
            for (t, r, field) in [(id, "r1", "threadId"), ("t1", id, "runId")] {
                let sub = json!({"threadId": t, "runId": r, "rosInvocationId": "ros-1"});
                let body = serde_json::to_vec(&sub).unwrap();
                refused(&post_json(s.addr(), path, &[], &body), field);
            }
        }
        // The thread routes' path id (a URI stays under 8 KiB).
        #[cfg(feature = "threads")]
        for (method, path) in [
            ("GET", format!("/threads/{over}")),
            ("GET", format!("/threads/{over}/messages")),
            ("DELETE", format!("/threads/{over}")),
            ("GET", "/threads/t%E2%80%AE1".to_string()),
        ] {
            refused(
                &raw(s.addr(), &request(method, &path, &[], b"")),
                "threadId",
            );
        }
        #[cfg(feature = "threads")]
        {
            let rename = raw(
                s.addr(),
                &request(
                    "PATCH",
                    "/threads/t%E2%81%A6",
                    &[("Content-Type", "application/json")],
                    br#"{"title":"x"}"#,
                ),
            );
            refused(&rename, "threadId");
        }
        // Nothing was kept: no thread, no conversation, nothing listed.
        let files = std::fs::read_dir(s.dir.join("state/threads"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(files, 0, "{protocol:?}");
        #[cfg(feature = "threads")]
        {
            let list = raw(s.addr(), &request("GET", "/threads", &[], b""));
            assert_eq!(list.status, 200);
            assert_eq!(list.json()["threads"], json!([]), "{protocol:?}");
        }
        // The bound itself is usable.
        let at = "y".repeat(256);
        let events = s.run(&s.body(&at, &at, "hello"));
        assert_eq!(last(&events)["threadId"], at.as_str());
    }
}

#[test]
fn the_workspace_is_created_even_when_admission_then_refuses() {
    let s = Stack::new();
    let _r = s.open_stream(&s.body("t1", "slow1", "slow please"));
    let fresh = s.dir.join("ws/new/deeper");
    let mut b = s.body("t1", "other", "hello");
    b["forwardedProps"]["iacCode"]["cwd"] = fresh.to_string_lossy().into_owned().into();
    // Busy beats binding; the directory exists anyway (reference §2.3 step 7).
    assert_eq!(s.post(&b).error_code(), "THREAD_BUSY");
    assert!(fresh.is_dir());
}

#[test]
fn the_routing_header_must_name_the_body_thread_and_is_echoed() {
    let s = Stack::new();
    let body = serde_json::to_vec(&s.body("t-route", "r1", "hello")).unwrap();
    let ok = post_json(s.addr(), "/", &[("X-Iac-Code-Thread-Id", "t-route")], &body);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("x-iac-code-thread-id"), Some("t-route"));
    let (ev, _) = sse_events(&ok.body);
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    let body = serde_json::to_vec(&s.body("t-route", "r2", "hello")).unwrap();
    let bad = post_json(s.addr(), "/", &[("X-Iac-Code-Thread-Id", "t-other")], &body);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.error_code(), "THREAD_ID_MISMATCH");
    assert_eq!(bad.header("x-iac-code-thread-id"), Some("t-other"));
    // Nothing was admitted: the same runId still starts a run.
    let again = post_json(s.addr(), "/", &[("X-Iac-Code-Thread-Id", "t-route")], &body);
    assert_eq!(again.status, 200);
    // The cancel route follows the same rule.
    let c = post_json(
        s.addr(),
        "/extensions/iac-code/v1/executions/x/cancel",
        &[("X-Iac-Code-Thread-Id", "t-other")],
        br#"{"threadId":"t-route","rosInvocationId":"ros-1"}"#,
    );
    assert_eq!(c.status, 400);
    assert_eq!(c.error_code(), "THREAD_ID_MISMATCH");
    // Without the header nothing changes.
    let plain = s.post(&s.body("t-route", "r3", "hello"));
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("x-iac-code-thread-id"), None);
}

#[test]
fn an_ag_ui_1_0_sdk_body_without_state_tools_or_context_runs() {
    // The AG-UI 1.0 SDKs omit empty `state`, `tools` and `context` (`exclude_none`, optional
    // fields): such a body was a 400 in both modes.
    let s = Stack::new();
    let mut b = s.body("sdk10", "r1", "hello");
    for k in ["state", "tools", "context"] {
        b.as_object_mut().unwrap().remove(k);
    }
    let events = s.run(&b);
    assert_eq!(last(&events)["outcome"]["type"], "success", "{events:?}");
}

#[test]
fn without_iac_code_properties_a_default_cwd_lets_a_stock_client_run_pause_and_resume() {
    // A stock AG-UI client (or a browser that must not choose server paths) sends
    // `forwardedProps: {}`; with --default-cwd the server supplies the properties.
    let dir = tempdir("default-cwd");
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let kernel = common::procs::free_port();
    let mut k = common::procs::kernel(kernel);
    let ws = dir.join("ws");
    let (adapter, addr) =
        common::procs::adapter(&dir, kernel, &["--default-cwd", ws.to_str().unwrap()]);
    let _adapter = common::procs::Stopper(adapter);
    let body = |run: &str, text: &str, resume: Option<Value>| {
        let mut b = json!({"threadId": "stock", "runId": run,
            "messages": [{"id": run, "role": "user", "content": text}], "forwardedProps": {}});
        if let Some(r) = resume {
            b["messages"] = json!([]);
            b["resume"] = r;
        }
        serde_json::to_vec(&b).unwrap()
    };
    let r = post_json(addr, "/", &[], &body("r1", "hello", None));
    let (events, _) = sse_events(&r.body);
    assert_eq!(last(&events)["outcome"]["type"], "success", "{}", r.text());
    let r = post_json(
        addr,
        "/",
        &[],
        &body("r2", "create a file (permission)", None),
    );
    let (events, _) = sse_events(&r.body);
    let pending = interrupts(&events);
    assert_eq!(pending.len(), 1, "{}", r.text());
    let ros = session_event(&events)["rosInvocationId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ros.starts_with("agui-default-"), "{ros}");
    let resume = json!([{"interruptId": pending[0]["id"], "status": "resolved",
        "payload": {"decision": "allow_once"}}]);
    let r = post_json(addr, "/", &[], &body("r3", "", Some(resume)));
    let (events, _) = sse_events(&r.body);
    assert_eq!(last(&events)["outcome"]["type"], "success", "{}", r.text());
    assert_eq!(session_event(&events)["rosInvocationId"], ros.as_str());
    // A request that carries iacCode is validated as sent: its own cwd must be allowed.
    let mut own: Value = serde_json::from_slice(&body("r4", "hello", None)).unwrap();
    own["threadId"] = "own".into();
    own["forwardedProps"] =
        json!({"iacCode": {"schemaVersion": 1, "rosInvocationId": "x", "cwd": "/etc"}});
    let r = post_json(addr, "/", &[], &serde_json::to_vec(&own).unwrap());
    assert_eq!(r.status, 400, "{}", r.text());
    let _ = k.kill();
    let _ = k.wait();
}

#[test]
fn iac_code_properties_without_a_cwd_take_the_default_cwd() {
    // A client with its own rosInvocationId (the shipped JS client, CopilotKit's agent) but
    // no say in the workspace: the server fills `cwd` from --default-cwd, the rest as sent.
    let dir = tempdir("default-cwd-fill");
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("other")).unwrap();
    let kernel = common::procs::free_port();
    let mut k = common::procs::kernel(kernel);
    let (adapter, addr) =
        common::procs::adapter(&dir, kernel, &["--default-cwd", ws.to_str().unwrap()]);
    let _adapter = common::procs::Stopper(adapter);
    let body = |thread: &str, run: &str, props: Value| {
        let b = json!({"threadId": thread, "runId": run,
            "messages": [{"id": run, "role": "user", "content": "hello"}],
            "forwardedProps": props});
        serde_json::to_vec(&b).unwrap()
    };
    for (thread, props) in [
        (
            "absent",
            json!({"iacCode": {"schemaVersion": 1, "rosInvocationId": "mine-1"}}),
        ),
        (
            "null",
            json!({"iacCode": {"schemaVersion": 1, "rosInvocationId": "mine-2", "cwd": null}}),
        ),
        (
            "snake",
            json!({"iac_code": {"schema_version": 1, "ros_invocation_id": "mine-3"}}),
        ),
    ] {
        let r = post_json(addr, "/", &[], &body(thread, "r1", props));
        let (events, _) = sse_events(&r.body);
        assert_eq!(last(&events)["outcome"]["type"], "success", "{}", r.text());
        assert!(
            session_event(&events)["rosInvocationId"]
                .as_str()
                .is_some_and(|r| r.starts_with("mine-")),
            "the client's rosInvocationId is kept: {}",
            r.text()
        );
    }
    // The thread is bound to the server's directory: the same one named runs, another is
    // a binding conflict.
    let named = |cwd: &std::path::Path, run: &str| {
        let props =
            json!({"iacCode": {"schemaVersion": 1, "rosInvocationId": "mine-1", "cwd": cwd}});
        post_json(addr, "/", &[], &body("absent", run, props))
    };
    let r = named(&ws, "r2");
    let (events, _) = sse_events(&r.body);
    assert_eq!(last(&events)["outcome"]["type"], "success", "{}", r.text());
    let r = named(&ws.join("other"), "r3");
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (409, "THREAD_BINDING_CONFLICT"),
        "{}",
        r.text()
    );
    let _ = k.kill();
    let _ = k.wait();
}

#[test]
fn without_a_default_cwd_a_missing_cwd_is_refused_naming_the_option() {
    let s = Stack::new();
    let mut b = s.body("t1", "r1", "hello");
    let props = b["forwardedProps"]["iacCode"].as_object_mut().unwrap();
    props.remove("cwd");
    let r = s.post(&b);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (400, "INVALID_INPUT"),
        "{}",
        r.text()
    );
    let m = r.error_message();
    assert!(
        m.contains("`forwardedProps.iacCode.cwd`") && m.contains("--default-cwd"),
        "{m}"
    );
    assert_eq!(
        m,
        Msg::CwdRequired
            .text(Lang::En)
            .replace("{field}", "forwardedProps.iacCode.cwd")
    );
}

#[test]
fn without_a_default_cwd_a_request_without_iac_code_properties_is_refused() {
    let s = Stack::new();
    let mut b = s.body("t1", "r1", "hello");
    b["forwardedProps"] = json!({});
    let r = s.post(&b);
    assert_eq!((r.status, r.error_code().as_str()), (400, "INVALID_INPUT"));
}

#[test]
fn agui_0_1_mode_keeps_the_kernels_message_ids_across_a_resume() {
    // Byte parity with the reference: in 0.1 mode the resume continues the kernel's message.
    let s = Stack::new();
    let (first, resumed) = permission_then_allow(&s, "t4");
    assert_eq!(
        text_message_ids(&first)[..1],
        text_message_ids(&resumed)[..1]
    );
}

/// A permission run on `thread`, then its resume allowing it: both runs' events.
fn permission_then_allow(s: &Stack, thread: &str) -> (Vec<Value>, Vec<Value>) {
    let first = s.run(&s.body(thread, "r1", "create a file (permission)"));
    let pid = pending_id(&first);
    let resumed = s.run(&s.resume_body(
        thread,
        "r2",
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]),
    ));
    (first, resumed)
}

fn text_message_ids(ev: &[Value]) -> Vec<String> {
    ev.iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .map(|e| e["messageId"].as_str().unwrap().to_string())
        .collect()
}

/// Issue 36 (1.0 request rules): a resume naming an interrupt the thread does not have is
/// refused before any stream, 409 `UNKNOWN_INTERRUPT` naming the id, whether it comes alone,
/// beside a good answer, or with nothing pending; the good interrupt stays answerable. In
/// 0.1 mode the reference's in-stream `RUN_ERROR` is kept.
#[test]
fn unknown_interrupt_ids_are_refused_before_the_stream_naming_the_id_in_1_0_mode() {
    let s = Stack::with(
        AguiProtocol::V1_0,
        ServerConfig::default(),
        Duration::from_secs(30),
    );
    let ev = s.run(&s.body("t1", "r1", "a question"));
    let pid = pending_id(&ev);
    let good = json!({"interruptId": pid, "status": "resolved", "payload": {"freeText": "x"}});
    let bogus = json!({"interruptId": "no-such-interrupt", "status": "resolved", "payload": {}});
    for (n, resume) in [json!([good, bogus]), json!([bogus])]
        .into_iter()
        .enumerate()
    {
        let r = s.post(&s.resume_body("t1", &format!("bad{n}"), resume.clone()));
        assert_eq!(r.status, 409, "{resume}: {}", r.text());
        assert_eq!(r.error_code(), "UNKNOWN_INTERRUPT", "{}", r.text());
        assert!(
            r.error_message().contains("no-such-interrupt"),
            "{}",
            r.text()
        );
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["error"]["interruptId"], "no-such-interrupt");
    }
    assert!(s.state_file("t1")["execution"]["pending"][&pid].is_object());
    let ev = s.run(&s.resume_body("t1", "good", json!([good])));
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    // Nothing pending any more: the same refusal, before the stream.
    let r = s.post(&s.resume_body("t1", "late", json!([bogus])));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (409, "UNKNOWN_INTERRUPT")
    );
    // 0.1 mode: the run starts and ends RUN_ERROR UNKNOWN_INTERRUPT (the reference).
    let old = Stack::new();
    let ev = old.run(&old.body("t1", "r1", "a question"));
    let good =
        json!({"interruptId": pending_id(&ev), "status": "resolved", "payload": {"freeText": "x"}});
    let ev = old.run(&old.resume_body("t1", "bad", json!([good, bogus])));
    assert_eq!(code(&ev), "UNKNOWN_INTERRUPT");
}

/// Issue 36 (1.0 request rules): "content the kernel cannot take must not fail the run". In
/// 1.0 mode media it cannot take, a part of an unknown type and a message of an unknown role
/// are left out and listed in a `CUSTOM iac-code.input.skipped.v1` after `RUN_STARTED`, a
/// tool message with a list of parts is accepted, and the run goes on; a message left with
/// nothing is a 400. 0.1 mode keeps the reference's 400.
#[test]
fn content_the_kernel_cannot_take_is_skipped_with_a_warning_event_in_1_0_mode() {
    let s = Stack::with(
        AguiProtocol::V1_0,
        ServerConfig::default(),
        Duration::from_secs(30),
    );
    let mut b = s.body("t1", "r1", "hello");
    b["messages"] = json!([
        {"id":"x","role":"narrator","content":"?"},
        {"id":"a","role":"assistant","content":"","toolCalls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
        {"id":"t","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"done"}]},
        {"id":"u","role":"user","content":[
            {"type":"text","text":"hello"},
            {"type":"audio","source":{"type":"data","value":"AAAA","mimeType":"audio/wav"}},
            {"type":"image","source":{"type":"file","value":"file-1","provider":"openai"}},
            {"type":"hologram"}
        ]}
    ]);
    let ev = s.run(&b);
    assert_eq!(ev[0]["type"], "RUN_STARTED");
    let notice = ev
        .iter()
        .find(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.input.skipped.v1")
        .unwrap_or_else(|| panic!("no skipped notice: {ev:?}"));
    assert_eq!(
        notice["value"]["skipped"],
        json!([
            {"messageId":"x","type":"narrator","reason":"unknown-role"},
            {"messageId":"u","part":3,"type":"hologram","reason":"unknown-part-type"},
            {"messageId":"u","part":1,"type":"audio","reason":"media-not-supported"},
            {"messageId":"u","part":2,"type":"image","reason":"provider-file"}
        ])
    );
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    // Nothing the kernel takes: refused before the stream.
    let mut b = s.body("t2", "r1", "hello");
    b["messages"] = json!([{"id":"u","role":"user","content":[
        {"type":"video","source":{"type":"url","value":"https://example.com/v.mp4"}}
    ]}]);
    let r = s.post(&b);
    assert_eq!((r.status, r.error_code().as_str()), (400, "INVALID_INPUT"));
    assert_eq!(r.error_message(), Msg::NothingTheAgentTakes.text(Lang::En));
    // 0.1 mode: the reference's refusal.
    let old = Stack::new();
    let mut b = old.body("t1", "r1", "hello");
    b["messages"] = json!([{"id":"u","role":"user","content":[
        {"type":"text","text":"hello"},
        {"type":"audio","source":{"type":"data","value":"AAAA","mimeType":"audio/wav"}}
    ]}]);
    let r = old.post(&b);
    assert_eq!((r.status, r.error_code().as_str()), (400, "INVALID_INPUT"));
}
