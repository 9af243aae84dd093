//! The reference adapter's own example thread (`tests/fixtures/agui/`), replayed: the same A2A
//! events in, the same AG-UI bytes out (timestamps, the random execution id and the workspace
//! path aside), the same A2A calls, the same state files.

use crate::common;

use common::*;
use serde_json::{Value, json};

const THREAD: &str = "8473547e-c8ed-4aef-a84c-603a6a8d42da";
const CTX: &str = "agui-1770b0bf824e9baef15a0dd4d95308def8aad5a5";

fn perm_input() -> Value {
    json!({"schemaVersion":1,"kind":"permission","requestTaskId":"task-1","contextId":CTX,"inputId":"perm-1","toolUseId":"tu1","toolName":"bash","title":"Run a local shell command","purpose":"Execute a local command needed for the requested infrastructure task.","effect":"local_execution","target":"the current local workspace; command: ls","isReadOnly":false,"prompt":"Run a local shell command Allow once?","safeSummary":"ls","options":[{"id":"allow_once","label":"Allow once"},{"id":"deny","label":"Deny"}],"language":"en","required":true})
}

fn status(state: &str, message: Option<Value>, iac: Value) -> Value {
    let mut st = json!({"state": state});
    if let Some(m) = message {
        st["message"] = m;
    }
    json!({"statusUpdate": {"taskId": "task-1", "contextId": CTX, "status": st, "metadata": {"iac_code": iac}}})
}

fn text(t: &str) -> Value {
    json!({"messageId": "task-1-message", "contextId": CTX, "taskId": "task-1", "role": "ROLE_AGENT", "parts": [{"text": t}]})
}

/// Each event with `timestamp` zeroed and the execution id replaced, as compact JSON.
fn normalised(sse: &[u8], exec: &str) -> Vec<String> {
    let (events, _) = sse_events(sse);
    events
        .into_iter()
        .map(|mut e| {
            e["timestamp"] = 0.into();
            if e["name"] == "iac-code.session.v1" {
                e["value"]["executionId"] = exec.into();
            }
            serde_json::to_string(&e).unwrap()
        })
        .collect()
}

fn normalise_state(mut v: Value, cwd: &str) -> Value {
    v["cwd"] = "<cwd>".into();
    v["execution"]["executionId"] = "<exec>".into();
    for d in v["appliedResumeDigests"].as_array_mut().unwrap() {
        d["executionId"] = "<exec>".into();
    }
    for t in v["terminalExecutionIds"].as_array_mut().unwrap() {
        *t = "<exec>".into();
    }
    for (_, d) in v["runDigests"].as_object_mut().unwrap() {
        *d = "<digest>".into();
    }
    let _ = cwd;
    v
}

#[test]
fn the_reference_interrupt_and_resume_thread_replays_exactly() {
    let run1 = vec![
        json!({"task": {"id": "task-1", "contextId": CTX, "status": {"state": "TASK_STATE_SUBMITTED"}}}),
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"thinking": {"type": "raw_thinking", "text": "Need to list files."}, "iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_WORKING",
            Some(text("I will list the files.")),
            json!({"iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"tool": {"status": "started", "toolUseId": "tu1", "name": "bash"}, "iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"usage": {"provider": "dashscope", "model": "qwen-max", "inputTokens": 120.0, "outputTokens": 30.0, "totalTokens": 150.0, "cachedInputTokens": 0.0}, "iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_INPUT_REQUIRED",
            None,
            json!({"input": perm_input(), "iacCodeSessionId": "sess-1"}),
        ),
    ];
    let snapshot = json!({"result": {"id": "task-1", "contextId": CTX, "status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "history": [text("I will list the files.")], "metadata": {"iac_code": {"iacCodeSessionId": "sess-1", "input": perm_input()}}}, "id": "x", "jsonrpc": "2.0"});
    let run2 = vec![
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"inputReceived": {"inputId": "perm-1", "kind": "permission", "toolUseId": "tu1"}}),
        ),
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"tool": {"status": "input_complete", "toolUseId": "tu1", "name": "bash", "toolInput": {"command": "ls"}}, "iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_WORKING",
            None,
            json!({"tool": {"status": "completed", "toolUseId": "tu1", "name": "bash", "result": "a.txt\nb.txt"}, "iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_WORKING",
            Some(text("I will list the files. There are two files.")),
            json!({"iacCodeSessionId": "sess-1"}),
        ),
        status(
            "TASK_STATE_INPUT_REQUIRED",
            None,
            json!({"iacCodeSessionId": "sess-1"}),
        ),
    ];
    let sse = "text/event-stream; charset=utf-8";
    let js = "application/json";
    let kernel = ScriptKernel::start(vec![
        Canned {
            expect: "SendStreamingMessage".into(),
            status: 200,
            content_type: sse,
            body: sse_body(&run1),
        },
        Canned {
            expect: "/iac-code/session/ensure-restored".into(),
            status: 200,
            content_type: js,
            body: br#"{"status":"current"}"#.to_vec(),
        },
        Canned {
            expect: "GetTask".into(),
            status: 200,
            content_type: js,
            body: serde_json::to_vec(&snapshot).unwrap(),
        },
        Canned {
            expect: "/iac-code/pipeline/state".into(),
            status: 404,
            content_type: js,
            body: br#"{"error":"A2A pipeline state not found"}"#.to_vec(),
        },
        Canned {
            expect: "SendStreamingMessage".into(),
            status: 200,
            content_type: sse,
            body: sse_body(&run2),
        },
    ]);
    let dir = std::env::temp_dir().join(format!("iac-agui-ref-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let dir = std::fs::canonicalize(dir).unwrap();
    let ws = dir.join("ws").to_string_lossy().into_owned();
    let srv = adapter_for(&kernel.url, &dir);

    let fix = |name: &str| std::fs::read(format!("tests/fixtures/agui/{name}")).unwrap();
    let req1 = String::from_utf8(fix("01_interrupt_run.request.json"))
        .unwrap()
        .replace("/home/user/agui-ws", &ws);
    let r1 = post_json(srv.addr, "/", &[], req1.as_bytes());
    assert_eq!(r1.status, 200, "{}", r1.text());
    let (ev1, _) = sse_events(&r1.body);
    check_stream(&ev1).unwrap();
    let exec = session_event(&ev1)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        normalised(&r1.body, "X"),
        normalised(&fix("01_interrupt_run.sse"), "X")
    );
    let state = |v: &str| {
        serde_json::from_slice::<Value>(
            &std::fs::read(dir.join("state/threads").join(format!("{v}.json"))).unwrap(),
        )
        .unwrap()
    };
    let want1: Value = serde_json::from_slice(&fix("01_after_interrupt.state.json")).unwrap();
    assert_eq!(
        normalise_state(state(THREAD), &ws),
        normalise_state(want1, &ws)
    );

    let req2 = String::from_utf8(fix("02_resume_run.request.json"))
        .unwrap()
        .replace("/home/user/agui-ws", &ws);
    let r2 = post_json(srv.addr, "/", &[], req2.as_bytes());
    let (ev2, _) = sse_events(&r2.body);
    check_stream(&ev2).unwrap();
    assert_eq!(session_event(&ev2)["executionId"], exec.as_str());
    assert_eq!(
        normalised(&r2.body, "X"),
        normalised(&fix("02_resume_run.sse"), "X")
    );
    let want2: Value = serde_json::from_slice(&fix("02_after_resume.state.json")).unwrap();
    assert_eq!(
        normalise_state(state(THREAD), &ws),
        normalise_state(want2, &ws)
    );

    // The A2A calls match the reference's call log.
    let calls = kernel.requests.lock().unwrap().clone();
    let names: Vec<&str> = calls.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(names[0], "SendStreamingMessage");
    assert_eq!(names[1], "/iac-code/session/ensure-restored");
    assert_eq!(names[2], "GetTask");
    assert!(names[3].starts_with("/iac-code/pipeline/state?taskId=task-1&afterSequence=0"));
    assert_eq!(names[4], "SendStreamingMessage");
    let m1 = &calls[0].1["params"]["message"];
    assert_eq!(m1["messageId"], "m1");
    assert_eq!(m1["parts"], json!([{"text": "List my files"}]));
    assert_eq!(m1["contextId"], CTX);
    assert_eq!(
        serde_json::to_string(&m1["metadata"]["iac_code"]).unwrap(),
        format!(
            r#"{{"preferredLanguage":"en","run_mode":"normal","cleanupOnly":false,"rosInvocationId":"invocation-1","cwd":"{ws}"}}"#
        )
    );
    assert_eq!(
        calls[1].1,
        json!({"cwd": ws, "sessionId": "sess-1", "taskId": "task-1"})
    );
    assert_eq!(
        calls[2].1["params"],
        json!({"id": "task-1", "historyLength": 100})
    );
    let m2 = &calls[4].1["params"]["message"];
    assert_eq!(m2["messageId"], "agui-resume-run-2-perm-1");
    assert_eq!(m2["taskId"], "task-1");
    assert_eq!(
        serde_json::to_string(&m2["parts"]).unwrap(),
        r#"[{"data":{"schemaVersion":1,"kind":"permission","requestTaskId":"task-1","inputId":"perm-1","toolUseId":"tu1","decision":"allow_once"},"mediaType":"application/json"}]"#
    );
    srv.stop();
    let _ = std::fs::remove_dir_all(dir);
}
