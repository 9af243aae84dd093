//! The demo kernel, driven through the real A2A client, produces the same frame shapes as the
//! captured real kernel (wrappers, states, metadata keys, ids), and supports every scripted flow.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::time::Duration;

use iac_agui::a2a::client::{A2aClient, A2aConfig, EventStream, Restore, Session};
use iac_agui::a2a::types::{A2aEvent, Kind, Payload, TaskState};
use iac_agui::kernel::demo::{DemoConfig, DemoKernel};
use serde_json::{Value, json};

const CTX: &str = "agui-8dc04b090fefc214a8f43890387f1829f4523e96";

fn kernel() -> (DemoKernel, A2aClient) {
    let k = DemoKernel::start(DemoConfig {
        token: Some("testtoken".into()),
        frame_delay: Duration::ZERO,
        tick: Duration::from_millis(50),
        cancel_linger: Duration::ZERO,
    })
    .unwrap();
    let c = A2aClient::new(A2aConfig::new(k.base_url(), Some("testtoken".into())));
    (k, c)
}

fn message(text: &str, task: Option<&str>, parts: Option<Value>) -> Value {
    let mut m = json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts.unwrap_or(json!([{"text": text}])),
        "metadata": {"iac_code": {"preferredLanguage": "en", "cleanupOnly": false, "rosInvocationId": "r1", "cwd": "/tmp"}},
        "contextId": CTX});
    if let Some(t) = task {
        m["taskId"] = t.into();
    }
    json!({"message": m, "configuration": {"acceptedOutputModes": ["text/plain"]}})
}

fn drain(s: &Session, params: Value) -> Vec<A2aEvent> {
    let mut st = s.send_streaming_message(params).unwrap();
    let mut out = Vec::new();
    while let Some(v) = st.next_value().unwrap() {
        match Payload::from_value(v) {
            Payload::Event(e) => out.push(e),
            Payload::Error(e) => panic!("rpc error {e:?}"),
        }
    }
    out
}

/// (wrapper, state, sorted iac keys, has message, has timestamp), with repeats collapsed.
type Shape = (String, String, Vec<String>, bool, bool);

fn shape(e: &A2aEvent) -> Shape {
    let keys: BTreeSet<String> = e
        .iac()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    (
        format!("{:?}", e.kind),
        e.state()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        keys.into_iter().collect(),
        e.value().unwrap()["status"]["message"].is_object(),
        e.value().unwrap()["status"]["timestamp"].is_string(),
    )
}

fn shapes(evs: &[A2aEvent]) -> Vec<Shape> {
    let mut out: Vec<Shape> = Vec::new();
    for e in evs {
        let s = shape(e);
        if out.last() != Some(&s) {
            out.push(s);
        }
    }
    out
}

fn fixture_events(name: &str) -> Vec<A2aEvent> {
    let text = std::fs::read_to_string(format!("tests/fixtures/a2a/{name}")).unwrap();
    text.split("\r\n")
        .filter_map(|l| l.strip_prefix("data: "))
        .map(
            |d| match Payload::from_value(serde_json::from_str(d).unwrap()) {
                Payload::Event(e) => e,
                _ => panic!(),
            },
        )
        .collect()
}

#[test]
fn plain_turn_matches_the_captured_shape() {
    let (_k, c) = kernel();
    let evs = drain(&c.session(), message("hello", None, None));
    assert_eq!(
        shapes(&evs),
        shapes(&fixture_events("plain.00.response.sse"))
    );
    let tid = evs[0].task_id().unwrap().to_string();
    assert_eq!(evs[0].kind, Kind::Task);
    assert_eq!(
        evs[0].value().unwrap()["history"][0]["taskId"],
        tid.as_str()
    );
    let texts: Vec<&Value> = evs
        .iter()
        .filter_map(|e| {
            e.value().unwrap()["status"]["message"]
                .as_object()
                .map(|_| &e.value().unwrap()["status"]["message"])
        })
        .collect();
    assert_eq!(texts[0]["messageId"], format!("{tid}-message"));
    assert_eq!(texts.last().unwrap()["messageId"], format!("{tid}-2"));
    // Proto-JSON doubles inside metadata.
    let usage = evs
        .iter()
        .find_map(|e| e.iac().and_then(|m| m.get("usage")))
        .unwrap();
    assert!(
        serde_json::to_string(usage)
            .unwrap()
            .contains("\"inputTokens\":120.0")
    );
    assert!(evs.iter().skip(1).all(|e| e.session_id().is_some()));
}

#[test]
fn permission_interrupt_and_resume_match_the_captured_shapes() {
    let (_k, c) = kernel();
    let s = c.session();
    let evs = drain(&s, message("please create a file (permission)", None, None));
    let want: Vec<Shape> = shapes(&fixture_events("permission_turn.00.response.sse"));
    assert_eq!(shapes(&evs), want);
    let last = evs.last().unwrap();
    assert_eq!(last.state(), Some(TaskState::InputRequired));
    let input = last.iac().unwrap()["input"].clone();
    let fixture_input = fixture_events("permission_turn.00.response.sse")
        .last()
        .unwrap()
        .iac()
        .unwrap()["input"]
        .clone();
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(keys(&input), keys(&fixture_input));
    let tid = evs[0].task_id().unwrap().to_string();

    // The snapshot carries the pending input; extension endpoints answer like the kernel.
    let Payload::Event(snap) = s.get_task(&tid).unwrap() else {
        panic!()
    };
    assert_eq!(snap.iac().unwrap()["input"]["inputId"], input["inputId"]);
    let sid = evs[1].session_id().unwrap().to_string();
    assert_eq!(
        s.ensure_restored(Some("/tmp"), Some(&sid), Some(&tid))
            .unwrap(),
        Restore::Current
    );
    assert_eq!(s.pipeline_state(&tid, 0).unwrap(), None);

    let answer = json!([{"data": {"schemaVersion": 1, "kind": "permission", "requestTaskId": tid, "inputId": input["inputId"], "toolUseId": input["toolUseId"], "decision": "allow_once"}, "mediaType": "application/json"}]);
    let evs2 = drain(&s, message("", Some(&tid), Some(answer.clone())));
    assert_eq!(
        shapes(&evs2),
        shapes(&fixture_events("permission_resume.00.response.sse"))
    );
    assert!(evs2[0].iac().unwrap().contains_key("inputReceived"));
    // A repeated answer is acknowledged as a duplicate and runs nothing.
    let evs3 = drain(&s, message("", Some(&tid), Some(answer)));
    assert_eq!(evs3.len(), 1);
    assert_eq!(evs3[0].iac().unwrap()["inputReceived"]["duplicate"], true);
    // The finished turn cannot be subscribed to or cancelled.
    let mut sub = s.subscribe(&tid).unwrap();
    assert!(
        matches!(sub.next_payload().unwrap(), Some(Payload::Error(e)) if e.message.contains("is not active"))
    );
    assert!(matches!(s.cancel_task(&tid).unwrap(), Payload::Error(e) if e.code == Some(-32002)));
}

#[test]
fn deny_reports_a_failed_tool() {
    let (_k, c) = kernel();
    let s = c.session();
    let evs = drain(&s, message("permission please", None, None));
    let tid = evs[0].task_id().unwrap().to_string();
    let input = evs.last().unwrap().iac().unwrap()["input"].clone();
    let answer = json!([{"data": {"schemaVersion": 1, "kind": "permission", "requestTaskId": tid, "inputId": input["inputId"], "toolUseId": input["toolUseId"], "decision": "deny"}, "mediaType": "application/json"}]);
    let evs = drain(&s, message("", Some(&tid), Some(answer)));
    assert!(evs.iter().any(|e| {
        e.iac()
            .is_some_and(|m| m.get("tool").is_some_and(|t| t["status"] == "failed"))
    }));
}

#[test]
fn question_interrupt_and_answer() {
    let (_k, c) = kernel();
    let s = c.session();
    let evs = drain(&s, message("ask me a question", None, None));
    let input = evs.last().unwrap().iac().unwrap()["input"].clone();
    assert_eq!(input["kind"], "ask_user_question");
    assert_eq!(input["options"].as_array().unwrap().len(), 2);
    let tid = evs[0].task_id().unwrap().to_string();
    let evs = drain(&s, message("Hangzhou", Some(&tid), None));
    assert_eq!(evs.last().unwrap().state(), Some(TaskState::InputRequired));
    assert!(evs.iter().any(|e| {
        e.value().unwrap()["status"]["message"]["parts"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Hangzhou"))
    }));
}

#[test]
fn pipeline_run_with_question_candidates_and_state() {
    let (_k, c) = kernel();
    let s = c.session();
    let evs = drain(&s, message("deploy a pipeline", None, None));
    assert_eq!(evs[0].kind, Kind::Task);
    // No SUBMITTED/WORKING status updates in pipeline mode; envelopes only.
    assert!(evs[1].iac().unwrap().contains_key("pipeline"));
    assert!(
        evs.iter()
            .any(|e| e.iac().is_some_and(|m| m.contains_key("pipelineBatch")))
    );
    let env = &evs[1].iac().unwrap()["pipeline"];
    assert_eq!(env["schemaVersion"], "1.0");
    assert!(
        serde_json::to_string(&env["sequence"])
            .unwrap()
            .ends_with(".0")
    );
    let fixture = fixture_events("pipeline_ask_turn.00.response.sse");
    let fkeys: BTreeSet<String> = fixture[1].iac().unwrap()["pipeline"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let keys: BTreeSet<String> = env.as_object().unwrap().keys().cloned().collect();
    assert!(
        fkeys.is_subset(&keys) || keys.is_subset(&fkeys),
        "{keys:?} vs {fkeys:?}"
    );
    let last = evs.last().unwrap();
    assert_eq!(last.state(), Some(TaskState::InputRequired));
    let input = last.iac().unwrap()["input"].clone();
    assert_eq!(input["required"], true);
    let tid = evs[0].task_id().unwrap().to_string();
    let st = s.pipeline_state(&tid, 3).unwrap().unwrap();
    assert!(st["snapshot"]["lastSequence"].as_i64().unwrap() >= 6);
    assert!(
        st["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["sequence"].as_i64().unwrap() > 3)
    );
    let evs = drain(&s, message("A website", Some(&tid), None));
    assert_eq!(evs.last().unwrap().state(), Some(TaskState::Completed));
    let types: Vec<String> = evs
        .iter()
        .filter_map(|e| {
            e.iac()?
                .get("pipeline")?
                .get("eventType")?
                .as_str()
                .map(str::to_string)
        })
        .collect();
    for t in [
        "input_received",
        "step_completed",
        "candidate_started",
        "candidate_step_started",
        "candidate_completed",
        "pipeline_completed",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} missing in {types:?}");
    }
}

#[test]
fn failed_task() {
    let (_k, c) = kernel();
    let evs = drain(&c.session(), message("please fail", None, None));
    assert!(evs.iter().any(|e| e.state() == Some(TaskState::Failed)));
}

/// A new task's stream, its first frame read, and the task's id.
fn started(s: &Session, text: &str) -> (EventStream, String) {
    let mut st = s.send_streaming_message(message(text, None, None)).unwrap();
    let Some(Payload::Event(first)) = st.next_payload().unwrap() else {
        panic!("the task frame")
    };
    let tid = first.task_id().unwrap().to_string();
    (st, tid)
}

#[test]
fn cancelling_a_slow_stream() {
    let (_k, c) = kernel();
    let s = c.session();
    let (mut st, tid) = started(&s, "slow please");
    let c2 = c.clone();
    let t2 = tid.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        c2.session().cancel_task(&t2).unwrap()
    });
    let mut last = None;
    while let Some(p) = st.next_payload().unwrap() {
        if let Payload::Event(e) = p {
            last = e.state();
        }
    }
    assert_eq!(last, Some(TaskState::Canceled));
    let Payload::Event(r) = canceller.join().unwrap() else {
        panic!()
    };
    assert_eq!(r.state(), Some(TaskState::Canceled));
    assert!(matches!(s.cancel_task(&tid).unwrap(), Payload::Error(e) if e.code == Some(-32002)));
}

/// Regression: the demo writes its big frames while it generates them, and a cancel that
/// came in the middle left the frame unfinished, so the CANCELED frame was glued to it: one
/// event of invalid JSON, and no cancel seen.
#[test]
fn a_cancel_in_the_middle_of_a_big_frame_keeps_every_frame_whole() {
    let (_k, c) = kernel();
    let s = c.session();
    let (mut st, tid) = started(&s, "big 12 12");
    // Not reading: the kernel blocks in its first big frame (24 MiB, past the socket buffers).
    std::thread::sleep(Duration::from_millis(300));
    let Payload::Event(r) = c.session().cancel_task(&tid).unwrap() else {
        panic!()
    };
    assert_eq!(r.state(), Some(TaskState::Canceled));
    let mut last = None;
    while let Some(p) = st.next_payload().expect("every frame is whole JSON") {
        if let Payload::Event(e) = p {
            last = e.state();
        }
    }
    assert_eq!(last, Some(TaskState::Canceled));
}

#[test]
fn subscribe_to_a_live_task() {
    let (_k, c) = kernel();
    let s = c.session();
    let mut st = s
        .send_streaming_message(message("slow", None, None))
        .unwrap();
    let Some(Payload::Event(first)) = st.next_payload().unwrap() else {
        panic!()
    };
    let tid = first.task_id().unwrap().to_string();
    let mut sub = c.session().subscribe(&tid).unwrap();
    let Some(Payload::Event(snap)) = sub.next_payload().unwrap() else {
        panic!()
    };
    assert_eq!(snap.kind, Kind::Task);
    let Some(Payload::Event(next)) = sub.next_payload().unwrap() else {
        panic!()
    };
    assert_eq!(next.kind, Kind::StatusUpdate);
    c.session().cancel_task(&tid).unwrap();
}

#[test]
fn protocol_errors_like_the_kernel() {
    let (k, c) = kernel();
    let s = c.session();
    let mut st = s
        .send_streaming_message(message("x", Some("task-nope"), None))
        .unwrap();
    assert!(
        matches!(st.next_payload().unwrap(), Some(Payload::Error(e)) if e.code == Some(-32001))
    );
    assert!(matches!(s.get_task("nope").unwrap(), Payload::Error(e) if e.code == Some(-32001)));
    // Wrong token → 401.
    let bad = A2aClient::new(A2aConfig::new(k.base_url(), Some("wrong".into())));
    assert!(bad.session().get_task("x").is_err());
    // No A2A-Version → -32009.
    let mut sock = std::net::TcpStream::connect(k.addr()).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":"1","method":"GetTask","params":{"id":"x"}}"#;
    write!(sock, "POST / HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer testtoken\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut resp = String::new();
    sock.read_to_string(&mut resp).unwrap();
    assert!(resp.contains("-32009"), "{resp}");
}

// Issue 46 item 8: the prompt ran its title and question together ("Run a local shell command
// Allow once?"); a client shows the title and the question apart.
#[test]
fn the_demo_permission_prompt_is_a_question_apart_from_its_title() {
    let (_k, c) = kernel();
    let s = c.session();
    let evs = drain(&s, message("please create a file (permission)", None, None));
    let input = evs.last().unwrap().iac().unwrap()["input"].clone();
    let title = input["title"].as_str().unwrap();
    let prompt = input["prompt"].as_str().unwrap();
    assert!(!title.is_empty() && prompt.ends_with('?'), "{input}");
    assert!(
        !prompt.contains(title),
        "the prompt repeats its title: {prompt:?}"
    );
}
