//! Resume edge cases of reference §9.5, plus cancel and guidance paths that need exact kernel
//! timing, against a script kernel that answers each call exactly.

use crate::common;

use common::*;
use iac_agui::catalog::Msg;
use iac_agui::i18n::Lang;
use serde_json::{Value, json};
use std::time::Duration;

const THREAD: &str = "th-edge";
const SSE: &str = "text/event-stream; charset=utf-8";
const JS: &str = "application/json";

fn ctx() -> String {
    iac_agui::adapter::admission::context_id(THREAD)
}

fn status(state: &str, iac: Value) -> Value {
    json!({"statusUpdate": {"taskId": "task-1", "contextId": ctx(), "status": {"state": state}, "metadata": {"iac_code": iac}}})
}

fn question(id: &str) -> Value {
    json!({"kind": "ask_user_question", "inputId": id, "requestTaskId": "task-1", "contextId": ctx(), "prompt": "Pick", "options": [{"id": "a", "label": "Alpha"}], "required": true, "toolUseId": format!("tool-{id}")})
}

fn permission(id: &str) -> Value {
    json!({"kind": "permission", "inputId": id, "requestTaskId": "task-1", "contextId": ctx(), "toolUseId": format!("tool-{id}"), "prompt": "Allow?", "required": true})
}

fn canned(expect: &str, status: u16, ct: &'static str, body: Vec<u8>) -> Canned {
    Canned {
        expect: expect.into(),
        status,
        content_type: ct,
        body,
    }
}

fn stream(frames: &[Value]) -> Canned {
    canned("SendStreamingMessage", 200, SSE, sse_body(frames))
}

fn rpc(method: &str, result: Value) -> Canned {
    canned(
        method,
        200,
        JS,
        serde_json::to_vec(&json!({"result": result, "id": "x", "jsonrpc": "2.0"})).unwrap(),
    )
}

fn snapshot(state: &str, iac: Value) -> Value {
    json!({"id": "task-1", "contextId": ctx(), "status": {"state": state}, "metadata": {"iac_code": iac}})
}

/// The first run: an interrupt asking `input`.
fn first_run(input: Value, with_session: bool) -> Canned {
    let mut iac = json!({"input": input});
    if with_session {
        iac["iacCodeSessionId"] = "sess-1".into();
    }
    stream(&[
        json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_SUBMITTED"}}}),
        status("TASK_STATE_INPUT_REQUIRED", iac),
    ])
}

fn restored() -> Canned {
    canned(
        "/iac-code/session/ensure-restored",
        200,
        JS,
        br#"{"status":"current"}"#.to_vec(),
    )
}

fn no_pipeline() -> Canned {
    canned(
        "/iac-code/pipeline/state",
        404,
        JS,
        br#"{"error":"A2A pipeline state not found"}"#.to_vec(),
    )
}

struct Case {
    kernel: ScriptKernel,
    srv: TestServer,
    dir: std::path::PathBuf,
    ws: String,
}

impl Case {
    fn new(name: &str, script: Vec<Canned>) -> Case {
        Case::paced(
            name,
            script.into_iter().map(|c| (c, Duration::ZERO)).collect(),
        )
    }

    fn paced(name: &str, script: Vec<(Canned, Duration)>) -> Case {
        let dir = std::env::temp_dir().join(format!("iac-agui-edge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        let kernel = ScriptKernel::start_paced(script);
        let srv = adapter_for(&kernel.url, &dir);
        let ws = dir.join("ws").to_string_lossy().into_owned();
        Case {
            kernel,
            srv,
            dir,
            ws,
        }
    }

    fn body(&self, run: &str, resume: Option<Value>) -> Value {
        let mut b = json!({"threadId": THREAD, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m1", "role": "user", "content": "go"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": self.ws}}});
        if let Some(r) = resume {
            b["resume"] = r;
        }
        b
    }

    fn run(&self, run: &str, resume: Option<Value>) -> Vec<Value> {
        let r = post_json(
            self.srv.addr,
            "/",
            &[],
            &serde_json::to_vec(&self.body(run, resume)).unwrap(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let (ev, _) = sse_events(&r.body);
        check_stream(&ev)
            .and_then(|_| check_ids(&r.body))
            .unwrap_or_else(|e| panic!("{e}: {}", r.text()));
        ev
    }

    fn state_path(&self) -> std::path::PathBuf {
        self.dir
            .join("state/threads")
            .join(format!("{THREAD}.json"))
    }

    fn state(&self) -> Option<Value> {
        serde_json::from_slice(&std::fs::read(self.state_path()).ok()?).ok()
    }

    fn pending(&self) -> Value {
        self.state().unwrap()["execution"]["pending"].clone()
    }

    fn calls(&self) -> Vec<(String, Value)> {
        self.kernel.requests.lock().unwrap().clone()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn answer(id: &str, payload: Value) -> Value {
    json!([{"interruptId": id, "status": "resolved", "payload": payload}])
}

fn code(ev: &[Value]) -> (String, String) {
    let l = last(ev);
    (
        l["code"].as_str().unwrap_or("").into(),
        l["message"].as_str().unwrap_or("").into(),
    )
}

#[test]
fn ensure_restored_not_found_loses_the_execution_but_keeps_pending() {
    let c = Case::new(
        "restore404",
        vec![
            first_run(permission("p1"), true),
            canned(
                "/iac-code/session/ensure-restored",
                404,
                JS,
                br#"{"status":"not_found"}"#.to_vec(),
            ),
        ],
    );
    c.run("r1", None);
    let ev = c.run("r2", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(
        code(&ev),
        (
            "EXECUTION_LOST".into(),
            Msg::ResumeSessionUnavailable.text(Lang::En).into()
        )
    );
    assert!(c.pending()["p1"].is_object());
}

#[test]
fn backup_not_ready_is_retryable_and_translated() {
    let en = r#"{"error":{"code":"SESSION_BACKUP_NOT_READY","retryable":true,"message":"Session backup is still synchronizing. Retry after 3 seconds."}}"#;
    let other = r#"{"error":{"code":"SESSION_BACKUP_NOT_READY","retryable":true,"message":"custom wait text"}}"#;
    let c = Case::new(
        "backup",
        vec![
            first_run(permission("p1"), true),
            canned(
                "/iac-code/session/ensure-restored",
                409,
                JS,
                en.as_bytes().to_vec(),
            ),
            canned(
                "/iac-code/session/ensure-restored",
                409,
                JS,
                other.as_bytes().to_vec(),
            ),
        ],
    );
    c.run("r1", None);
    let ev = c.run("r2", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(
        code(&ev),
        (
            "SESSION_BACKUP_NOT_READY".into(),
            Msg::SessionBackupNotReady.text(Lang::En).into()
        )
    );
    let ev = c.run("r3", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(
        code(&ev),
        ("SESSION_BACKUP_NOT_READY".into(), "custom wait text".into())
    );
    assert!(c.pending()["p1"].is_object());
}

/// A refused or unanswered answer keeps the interrupt pending; `rejected` is the first
/// run's expected (code, message).
fn rejected_or_silent_answer(name: &str, err: Value, rejected: (String, String)) {
    let c = Case::new(
        name,
        vec![
            first_run(permission("p1"), true),
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1", "input": permission("p1")}),
                ),
            ),
            no_pipeline(),
            canned(
                "SendStreamingMessage",
                200,
                JS,
                serde_json::to_vec(&err).unwrap(),
            ),
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1"}),
                ),
            ),
            no_pipeline(),
            canned("SendStreamingMessage", 200, SSE, Vec::new()),
        ],
    );
    c.run("r1", None);
    let ev = c.run("r2", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(code(&ev), rejected);
    let ev = c.run("r3", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(
        code(&ev),
        (
            "A2A_UNAVAILABLE".into(),
            Msg::PermissionResponseNotAccepted.text(Lang::En).into()
        )
    );
    assert!(c.pending()["p1"].is_object());
}

/// Regression (second red-team, fault 4): the kernel's refusal of an answer (JSON-RPC
/// "invalid params") is an input error with its own code, not "unavailable, retry later".
#[test]
fn an_answer_the_kernel_refuses_is_resume_rejected_and_stays_answerable() {
    let err = json!({"error": {"code": -32602, "message": "A2A server received empty input."}, "id": "x", "jsonrpc": "2.0"});
    let msg = Msg::ResumeRejectedByAgent
        .text(Lang::En)
        .replace("{reason}", "A2A server received empty input.");
    rejected_or_silent_answer("rejected", err, ("RESUME_REJECTED".into(), msg));
}

#[test]
fn a_kernel_error_on_an_answer_is_unavailable_and_keeps_the_interrupt() {
    let err = json!({"error": {"code": -32603, "message": "boom"}, "id": "x", "jsonrpc": "2.0"});
    let want = (
        "A2A_UNAVAILABLE".into(),
        Msg::A2aRejectedResponse.text(Lang::En).into(),
    );
    rejected_or_silent_answer("kernel-error", err, want);
}

#[test]
fn a_terminal_snapshot_clears_pending_and_the_answer_is_unknown() {
    let c = Case::new(
        "terminal",
        vec![
            first_run(permission("p1"), true),
            restored(),
            rpc(
                "GetTask",
                snapshot("TASK_STATE_CANCELED", json!({"iacCodeSessionId": "sess-1"})),
            ),
            no_pipeline(),
        ],
    );
    c.run("r1", None);
    let ev = c.run("r2", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(code(&ev).0, "UNKNOWN_INTERRUPT");
    assert_eq!(c.pending(), json!({}));
}

/// The real kernel keeps listing a waiting candidate permission in `pendingPermissions` on
/// every status until it is answered, so the question's answer stream repeats it.
fn mixed_resume_where_the_first_answer_repeats_the_pending_permission(end: &str) -> Vec<Value> {
    let pending_p1 = |state: &str| {
        status(
            state,
            json!({"iacCodeSessionId": "sess-1", "pendingPermissions": [permission("p1")]}),
        )
    };
    let c = Case::new(
        &format!("mixed-repeat-{end}"),
        vec![
            stream(&[
                json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                status(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1", "input": question("q1"), "pendingPermissions": [permission("p1")]}),
                ),
            ]),
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1", "input": question("q1"), "pendingPermissions": [permission("p1")]}),
                ),
            ),
            no_pipeline(),
            stream(&[
                status(
                    "TASK_STATE_WORKING",
                    json!({"inputReceived": {"inputId": "q1"}, "iacCodeSessionId": "sess-1"}),
                ),
                pending_p1("TASK_STATE_WORKING"),
                pending_p1("TASK_STATE_INPUT_REQUIRED"),
            ]),
            stream(&[
                status(
                    "TASK_STATE_WORKING",
                    json!({"inputReceived": {"kind": "permission", "inputId": "p1", "toolUseId": "tool-p1", "decision": "allow_once"}}),
                ),
                status(
                    "TASK_STATE_WORKING",
                    json!({"tool": {"status": "completed", "toolUseId": "tool-p1", "result": "done"}, "iacCodeSessionId": "sess-1"}),
                ),
                status(end, json!({"iacCodeSessionId": "sess-1"})),
            ]),
        ],
    );
    let ev = c.run("r1", None);
    let ids: Vec<String> = interrupts(&ev)
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["q1", "p1"]);
    let both = json!([
        {"interruptId": "q1", "status": "resolved", "payload": {"selectedId": "a"}},
        {"interruptId": "p1", "status": "resolved", "payload": {"decision": "allow_once"}},
    ]);
    let ev = c.run("r2", Some(both));
    assert_eq!(c.pending(), json!({}), "both answers were delivered");
    ev
}

#[test]
fn mixed_resume_never_ends_with_an_empty_interrupt_list() {
    // Regression: the repeated permission was counted as a new interrupt, so the run ended
    // `{"type":"interrupt","interrupts":[]}` after both answers were delivered.
    for end in ["TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED"] {
        let ev = mixed_resume_where_the_first_answer_repeats_the_pending_permission(end);
        assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{end}");
        assert_eq!(
            last(&ev)["outcome"]["type"],
            "success",
            "{end}: {:?}",
            last(&ev)
        );
    }
}

#[test]
fn new_inputs_found_while_resuming_end_in_an_interrupt_listing_all_then_mixed_answers_are_all_delivered()
 {
    let c = Case::new(
        "mixed",
        vec![
            first_run(question("q1"), true),
            // Resume 1: the snapshot shows a permission p1 besides q1 → interrupt [q1, p1].
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1", "input": permission("p1")}),
                ),
            ),
            no_pipeline(),
            // Resume 2: answer both; each answer is its own message.
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1", "input": permission("p1")}),
                ),
            ),
            no_pipeline(),
            stream(&[status(
                "TASK_STATE_WORKING",
                json!({"inputReceived": {"inputId": "q1"}}),
            )]),
            stream(&[
                status(
                    "TASK_STATE_WORKING",
                    json!({"inputReceived": {"inputId": "p1"}}),
                ),
                status(
                    "TASK_STATE_WORKING",
                    json!({"tool": {"status": "completed", "toolUseId": "tool-p1", "result": "done"}, "iacCodeSessionId": "sess-1"}),
                ),
                status(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1"}),
                ),
            ]),
        ],
    );
    c.run("r1", None);
    let ev = c.run("r2", Some(answer("q1", json!({"selectedId": "a"}))));
    assert_eq!(last(&ev)["outcome"]["type"], "interrupt");
    let ids: Vec<String> = interrupts(&ev)
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["q1", "p1"]);
    // REC: the session event is there even on this path.
    session_event(&ev);
    let both = json!([
        {"interruptId": "q1", "status": "resolved", "payload": {"selectedId": "a"}},
        {"interruptId": "p1", "status": "resolved", "payload": {"decision": "allow_once"}},
    ]);
    let ev = c.run("r3", Some(both));
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    assert_eq!(c.pending(), json!({}));
    let sends: Vec<Value> = c
        .calls()
        .into_iter()
        .filter(|(m, _)| m == "SendStreamingMessage")
        .map(|(_, b)| b)
        .collect();
    let (q, p) = (
        &sends[1]["params"]["message"],
        &sends[2]["params"]["message"],
    );
    assert_eq!(q["parts"], json!([{"text": "Alpha"}]));
    assert_eq!(q["messageId"], "agui-resume-r3");
    assert_eq!(p["parts"][0]["data"]["decision"], "allow_once");
    assert_eq!(p["messageId"], "agui-resume-r3-p1");
    // The question's tool result came from the answer, with no TOOL_CALL_START.
    let r = ev
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "tool-q1")
        .unwrap();
    assert_eq!(r["content"], "Alpha");
}

#[test]
fn sideband_permissions_use_send_message_then_follow_the_task() {
    let ack = json!({"message": {"messageId": "ack", "contextId": ctx(), "taskId": "task-1", "role": "ROLE_AGENT", "parts": [{"data": {"kind": "permission_ack", "accepted": true}}]}});
    let first = stream(&[
        json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_SUBMITTED"}}}),
        status(
            "TASK_STATE_WORKING",
            json!({"iacCodeSessionId": "sess-1", "pendingPermissions": [permission("s1"), permission("s2")]}),
        ),
    ]);
    let live = snapshot("TASK_STATE_WORKING", json!({"iacCodeSessionId": "sess-1"}));
    let c = Case::new(
        "sideband",
        vec![
            first,
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_WORKING",
                    json!({"iacCodeSessionId": "sess-1", "pendingPermissions": [permission("s1"), permission("s2")]}),
                ),
            ),
            no_pipeline(),
            rpc("SendMessage", ack.clone()),
            rpc("SendMessage", ack),
            rpc("GetTask", live),
            canned(
                "SubscribeToTask",
                200,
                SSE,
                sse_body(&[status(
                    "TASK_STATE_COMPLETED",
                    json!({"iacCodeSessionId": "sess-1"}),
                )]),
            ),
        ],
    );
    let ev = c.run("r1", None);
    assert_eq!(interrupts(&ev).len(), 2);
    assert_eq!(c.pending()["s1"]["sideband"], true);
    let both = json!([
        {"interruptId": "s1", "status": "resolved", "payload": {"decision": "allow_once"}},
        {"interruptId": "s2", "status": "cancelled"},
    ]);
    let ev = c.run("r2", Some(both));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    let calls = c.calls();
    let sm: Vec<&Value> = calls
        .iter()
        .filter(|(m, _)| m == "SendMessage")
        .map(|(_, b)| b)
        .collect();
    assert_eq!(sm[0]["params"]["message"]["messageId"], "agui-resume-s1");
    assert_eq!(
        sm[1]["params"]["message"]["parts"][0]["data"]["decision"],
        "deny"
    );
    assert_eq!(c.pending(), json!({}));
}

#[test]
fn task_snapshot_identity_and_missing_task() {
    let err = json!({"error": {"code": -32001, "message": "Task not found"}, "id": "x", "jsonrpc": "2.0"});
    let c = Case::new(
        "identity",
        vec![
            first_run(permission("p1"), true),
            restored(),
            rpc(
                "GetTask",
                json!({"id": "task-OTHER", "contextId": ctx(), "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}),
            ),
            restored(),
            canned("GetTask", 200, JS, serde_json::to_vec(&err).unwrap()),
        ],
    );
    c.run("r1", None);
    let ev = c.run("r2", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(
        code(&ev),
        (
            "A2A_PROTOCOL_ERROR".into(),
            Msg::TaskIdentityMismatch.text(Lang::En).into()
        )
    );
    let ev = c.run("r3", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(code(&ev).0, "EXECUTION_LOST");
}

#[test]
fn an_expired_interrupt_is_refused_and_its_task_cancelled() {
    let mut p = permission("p1");
    p["expiresAt"] = "2020-01-01T00:00:00Z".into();
    let c = Case::new(
        "expired",
        vec![
            first_run(p, true),
            restored(),
            rpc(
                "GetTask",
                snapshot(
                    "TASK_STATE_INPUT_REQUIRED",
                    json!({"iacCodeSessionId": "sess-1"}),
                ),
            ),
            no_pipeline(),
            rpc("CancelTask", snapshot("TASK_STATE_CANCELED", json!({}))),
        ],
    );
    let ev = c.run("r1", None);
    assert_eq!(interrupts(&ev)[0]["expiresAt"], "2020-01-01T00:00:00Z");
    let ev = c.run("r2", Some(answer("p1", json!({"decision": "allow_once"}))));
    assert_eq!(code(&ev).0, "EXECUTION_EXPIRED");
    assert_eq!(c.pending(), json!({}));
    assert!(c.calls().iter().any(|(m, _)| m == "CancelTask"));
}

#[test]
fn an_interrupt_before_any_session_id_still_gets_the_session_event() {
    let c = Case::new("nosession", vec![first_run(permission("p1"), false)]);
    let ev = c.run("r1", None);
    let s = session_event(&ev);
    assert_eq!(s["taskId"], "task-1");
    assert_eq!(s["sessionId"], Value::Null);
    let ty = types(&ev);
    assert!(ty.iter().position(|t| t == "CUSTOM").unwrap() < ty.len() - 1);
}

#[test]
fn rejected_and_interrupted_streams() {
    let c = Case::new(
        "rejected-state",
        vec![stream(&[
            json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            status("TASK_STATE_REJECTED", json!({})),
        ])],
    );
    let ev = c.run("r1", None);
    assert_eq!(code(&ev).0, "A2A_EXECUTION_FAILED");
}

#[test]
fn cancel_before_the_task_id_is_known_stops_the_run_and_cancels_the_task_once_seen() {
    let c = Case::paced(
        "cancel-early",
        vec![
            // The kernel takes its time before the first frame names the task.
            (
                stream(&[
                    json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                    status("TASK_STATE_WORKING", json!({"iacCodeSessionId": "sess-1"})),
                ]),
                Duration::from_millis(1500),
            ),
            (
                rpc(
                    "CancelTask",
                    json!({"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_CANCELED"}}),
                ),
                Duration::ZERO,
            ),
        ],
    );
    let body = serde_json::to_vec(&c.body("r1", None)).unwrap();
    let addr = c.srv.addr;
    let run = std::thread::spawn(move || post_json(addr, "/", &[], &body));
    // Admission wrote the execution before the kernel was called; no task id yet.
    assert!(wait_until(Duration::from_secs(5), || c
        .state()
        .is_some_and(|s| s["execution"]["executionId"].is_string())));
    // The Stop lands while the kernel is thinking: after the run called it. (Waiting for the
    // admission's save alone let a loaded machine's Stop come before the call, about 4 runs
    // in 10 at load 10: the run then ends cancelled without calling the kernel at all, and
    // there is no task to cancel once seen.)
    assert!(wait_until(Duration::from_secs(5), || c
        .calls()
        .iter()
        .any(|(m, _)| m == "SendStreamingMessage")));
    let state = c.state().unwrap();
    assert!(state["execution"]["taskId"].is_null());
    let exec = state["execution"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let r = post_json(
        addr,
        &format!("/extensions/iac-code/v1/executions/{exec}/cancel"),
        &[],
        br#"{"threadId":"th-edge","rosInvocationId":"ros"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "cancelled");
    assert!(
        !c.calls().iter().any(|(m, _)| m == "CancelTask"),
        "no task to cancel yet"
    );
    let r = run.join().unwrap();
    let (ev, _) = sse_events(&r.body);
    check_stream(&ev).unwrap();
    assert_eq!(code(&ev).0, "CANCELLED", "{}", r.text());
    // The task was cancelled as soon as its id was seen.
    let calls = c.calls();
    let cancel = calls
        .iter()
        .find(|(m, _)| m == "CancelTask")
        .expect("CancelTask once the task id was known");
    assert_eq!(cancel.1["params"]["id"], "task-1");
    let state = c.state().unwrap();
    assert!(state["execution"]["taskId"].is_null());
    assert!(
        state["terminalExecutionIds"]
            .as_array()
            .unwrap()
            .contains(&json!(exec))
    );
}

/// A pipeline task in progress (as after an adapter restart mid-run): task known, nothing
/// pending, not terminal.
fn pipeline_task_in_progress(c: &Case) {
    let doc = iac_agui::store::document::ThreadDoc {
        thread_id: THREAD.into(),
        context_id: ctx(),
        cwd: c.ws.clone(),
        session_id: Some("sess-1".into()),
        execution: iac_agui::store::document::Execution {
            execution_id: "exec-1".into(),
            ros_invocation_id: "ros".into(),
            task_id: Some("task-1".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    std::fs::write(c.state_path(), doc.to_bytes()).unwrap();
}

/// One guidance message into the pipeline run; its events, checked.
fn guidance(c: &Case, run: &str, headers: &[(&str, &str)]) -> Vec<Value> {
    let mut b = c.body(run, None);
    b["forwardedProps"]["iacCode"]["activeGuidance"] = true.into();
    b["forwardedProps"]["iacCode"]["runMode"] = "pipeline".into();
    let r = post_json(c.srv.addr, "/", headers, &serde_json::to_vec(&b).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let (ev, _) = sse_events(&r.body);
    check_stream(&ev).unwrap();
    ev
}

#[test]
fn guidance_while_the_backup_is_not_ready_is_retryable_and_cancels_nothing() {
    let not_ready = json!({"error": {"code": -32602, "message": "Session backup is still synchronizing. Retry after 3 seconds.",
        "data": {"code": "SESSION_BACKUP_NOT_READY", "retryable": true}}, "id": "x", "jsonrpc": "2.0"});
    let c = Case::new(
        "guidance-backup",
        vec![
            canned(
                "SendStreamingMessage",
                200,
                JS,
                serde_json::to_vec(&not_ready).unwrap(),
            ),
            stream(&[status(
                "TASK_STATE_WORKING",
                json!({"iacCodeSessionId": "sess-1"}),
            )]),
        ],
    );
    pipeline_task_in_progress(&c);
    let guide = |run: &str| guidance(&c, run, &[("Accept-Language", "de")]);
    let ev = guide("g1");
    assert_eq!(types(&ev), ["RUN_STARTED", "RUN_ERROR"]);
    assert_eq!(
        code(&ev),
        (
            "SESSION_BACKUP_NOT_READY".into(),
            Msg::SessionBackupNotReady.text(Lang::De).into()
        )
    );
    let sent = &c.calls()[0].1["params"]["message"];
    assert_eq!(sent["taskId"], "task-1");
    // Nothing was cancelled or retired: the same guidance can be sent again and goes through.
    let state = c.state().unwrap();
    assert_eq!(state["execution"]["taskId"], "task-1");
    assert_eq!(state["terminalExecutionIds"], json!([]));
    let ev = guide("g2");
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    assert!(!c.calls().iter().any(|(m, _)| m == "CancelTask"));
}

/// Regression (outside review of issue 36, fault 4): a guidance message the kernel refused
/// as invalid was reported `RESUME_REJECTED` with the words of a refused answer ("the
/// question is still open"); guidance is no answer. It is an input error of its own, and
/// nothing is cancelled or retired.
#[test]
fn guidance_the_kernel_refuses_is_an_input_error_not_a_refused_answer() {
    let invalid = json!({"error": {"code": -32602, "message": "Message text must not be blank."},
        "id": "x", "jsonrpc": "2.0"});
    let c = Case::new(
        "guidance-refused",
        vec![canned(
            "SendStreamingMessage",
            200,
            JS,
            serde_json::to_vec(&invalid).unwrap(),
        )],
    );
    pipeline_task_in_progress(&c);
    let ev = guidance(&c, "g1", &[]);
    assert_eq!(types(&ev), ["RUN_STARTED", "RUN_ERROR"]);
    let (code, message) = code(&ev);
    assert_eq!(code, "INVALID_INPUT");
    assert!(
        message.contains("Message text must not be blank."),
        "{message}"
    );
    assert!(!message.contains("question"), "{message}");
    let state = c.state().unwrap();
    assert_eq!(state["execution"]["taskId"], "task-1");
    assert!(!c.calls().iter().any(|(m, _)| m == "CancelTask"));
}

fn resource(id: &str) -> Value {
    json!({"schemaVersion": 1, "kind": "cloud_resource_selection", "requestTaskId": "task-1", "contextId": ctx(), "inputId": id, "toolUseId": "call_sel", "prompt": "Which VSwitch?", "required": true, "selector": {"id": "vpc.vswitch", "associationProperty": "ALIYUN::VPC::VSwitch::VSwitchId", "outputKind": "resource_id", "associationPropertyMetadata": {"RegionId": "cn-hangzhou"}, "source": null, "profileHash": "sha256:00"}})
}

/// Issue 47: a resource selection and a permission waiting together are both listed, and
/// one resume answers each its own way: the selection as `iac_code.inputResponse` (the
/// correlation from the stored interrupt), the permission as its data part.
#[test]
fn a_resource_selection_beside_a_permission_is_listed_and_answered_each_its_way() {
    let sel = "resource-0123456789abcdef0123456789abcdef";
    let iac = json!({"iacCodeSessionId": "sess-1", "input": resource(sel), "pendingPermissions": [permission("p1")]});
    let c = Case::new(
        "resource-and-permission",
        vec![
            stream(&[
                json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                status("TASK_STATE_INPUT_REQUIRED", iac.clone()),
            ]),
            restored(),
            rpc("GetTask", snapshot("TASK_STATE_INPUT_REQUIRED", iac)),
            no_pipeline(),
            stream(&[status(
                "TASK_STATE_WORKING",
                json!({"inputReceived": {"schemaVersion": 1, "kind": "cloud_resource_selection", "inputId": sel, "toolUseId": "call_sel", "status": "selected", "replayed": false}}),
            )]),
            stream(&[
                status(
                    "TASK_STATE_WORKING",
                    json!({"inputReceived": {"kind": "permission", "inputId": "p1"}}),
                ),
                status("TASK_STATE_COMPLETED", json!({})),
            ]),
        ],
    );
    let ev = c.run("r1", None);
    let listed = interrupts(&ev);
    let reasons: Vec<&str> = listed
        .iter()
        .map(|i| i["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["cloud_resource_selection", "tool_call"]);
    assert_eq!(c.pending()[sel]["value"]["selector"]["id"], "vpc.vswitch");
    let ev = c.run(
        "r2",
        Some(json!([
            {"interruptId": sel, "status": "resolved", "payload": {"status": "selected", "value": "vsw-1", "label": "One"}},
            {"interruptId": "p1", "status": "resolved", "payload": {"decision": "allow_once"}},
        ])),
    );
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{ev:?}");
    let sends: Vec<Value> = c
        .calls()
        .into_iter()
        .filter(|(m, _)| m == "SendStreamingMessage")
        .map(|(_, v)| v["params"]["message"].clone())
        .collect();
    assert_eq!(sends.len(), 3);
    assert_eq!(
        sends[1]["metadata"]["iac_code"]["inputResponse"],
        json!({"schemaVersion": 1, "kind": "cloud_resource_selection", "status": "selected", "requestTaskId": "task-1", "contextId": ctx(), "inputId": sel, "toolUseId": "call_sel", "selectorId": "vpc.vswitch", "value": "vsw-1", "label": "One"})
    );
    assert_eq!(sends[1]["taskId"], "task-1");
    assert_eq!(sends[2]["parts"][0]["data"]["kind"], "permission");
    assert!(
        sends[2]["metadata"]["iac_code"]
            .get("inputResponse")
            .is_none()
    );
}
