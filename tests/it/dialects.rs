//! One server, every client generation (issue 57, item 8): each request is served in the AG-UI
//! dialect its `protocolVersion` declares, one that declares none in `--agui-protocol`'s, and
//! the choice travels with the run — its events, its re-attach, its thread's listing.

use crate::common;

use common::*;
use iac_agui::config::AguiProtocol;
use iac_agui::server::ServerConfig;
use serde_json::{Value, json};
use std::time::Duration;

fn declaring(mut body: Value, version: &str) -> Value {
    body["protocolVersion"] = json!(version);
    body
}

fn v1_stack() -> Stack {
    Stack::with(
        AguiProtocol::V1_0,
        ServerConfig::default(),
        Duration::from_secs(30),
    )
}

fn pending_id(events: &[Value]) -> String {
    interrupts(events)[0]["id"].as_str().unwrap().to_string()
}

fn execution(events: &[Value]) -> String {
    session_event(events)["executionId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A question answered `cancelled`: how the run's end is written is the dialect's.
fn cancelled_question(s: &Stack, thread: &str, version: Option<&str>) -> Vec<Value> {
    let with = |b: Value| match version {
        Some(v) => declaring(b, v),
        None => b,
    };
    let ev = s.run(&with(s.body(thread, "r1", "a question")));
    let resume = json!([{"interruptId": pending_id(&ev), "status": "cancelled"}]);
    s.run(&with(s.resume_body(thread, "r2", resume)))
}

/// Regression (issue 57, item 8): a default server served everything in 0.1, so the shipped
/// 1.0 client logged `Removed unrecognised material at '/threadId'` on every Stop and glued a
/// resumed answer onto the interrupted message. Now a request that declares 1.0 gets 1.0, on
/// the same server and thread-by-thread beside one that declares nothing (the reference's).
#[test]
fn a_default_server_serves_each_request_in_the_dialect_it_declares() {
    let s = Stack::new();
    // Declared 1.0: the 1.0 wire, on a server started with no dialect flag.
    let ev = s.run(&declaring(s.body("v1", "r0", "hello"), "1.0"));
    assert_eq!(ev[0]["protocolVersion"], "1.0", "{ev:?}");
    let end = cancelled_question(&s, "v1-cancel", Some("1.0"));
    assert_eq!(last(&end)["type"], "RUN_FINISHED", "{end:?}");
    assert_eq!(last(&end)["outcome"], json!({"type": "cancelled"}));
    let failed = s.run(&declaring(s.body("v1-fail", "r1", "fail"), "1.0"));
    let err = last(&failed);
    assert_eq!(err["type"], "RUN_ERROR", "{failed:?}");
    assert!(
        err.get("threadId").is_none() && err.get("runId").is_none(),
        "{err}"
    );
    // Each run's answer is a message of its own in 1.0 (a resume's too).
    let first = s.run(&declaring(s.body("v1-ids", "r1", "hello"), "1.0"));
    let second = s.run(&declaring(s.body("v1-ids", "r2", "hello again"), "1.0"));
    let id = |ev: &[Value]| {
        ev.iter()
            .find(|e| e["type"] == "TEXT_MESSAGE_START")
            .map(|e| e["messageId"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert!(id(&first).contains('.'), "run-scoped: {}", id(&first));
    assert_ne!(id(&first), id(&second));
    // Declared nothing, on the same server: the reference's wire, byte for byte.
    let ev = s.run(&s.body("v01", "r0", "hello"));
    assert!(ev[0].get("protocolVersion").is_none(), "{}", ev[0]);
    let end = cancelled_question(&s, "v01-cancel", None);
    assert_eq!(last(&end)["type"], "RUN_ERROR", "{end:?}");
    assert_eq!(last(&end)["code"], "CANCELLED");
    let failed = s.run(&s.body("v01-fail", "r1", "fail"));
    assert_eq!(last(&failed)["threadId"], "v01-fail");
    assert_eq!(last(&failed)["runId"], "r1");
    // Declared 0.1 on a server whose own dialect is 1.0: the 0.1 wire.
    let v1 = v1_stack();
    let ev = v1.run(&declaring(v1.body("d01", "r0", "hello"), "0.1"));
    assert!(ev[0].get("protocolVersion").is_none(), "{}", ev[0]);
    let end = cancelled_question(&v1, "d01-cancel", Some("0.1"));
    assert_eq!(last(&end)["code"], "CANCELLED", "{end:?}");
    assert_eq!(last(&end)["threadId"], "d01-cancel");
    let ev = v1.run(&v1.body("undeclared", "r0", "hello"));
    assert_eq!(ev[0]["protocolVersion"], "1.0");
}

/// What admission decides by the dialect (how messages are read, context forwarded, unknown
/// resume ids refused, a short history restated) follows the request's declaration too.
#[test]
fn admission_reads_a_request_by_the_rules_of_the_dialect_it_declares() {
    let s = Stack::new();
    // An unknown role: 1.0 skips it and says so; 0.1 refuses it as the reference does.
    let mut b = s.body("roles", "r1", "hello");
    b["messages"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"id": "odd", "role": "narrator", "content": "x"}));
    let refused = s.post(&b);
    assert_eq!(refused.status, 400, "{}", refused.text());
    let ev = s.run(&declaring(b, "1.0"));
    let skipped = ev
        .iter()
        .find(|e| e["name"] == "iac-code.input.skipped.v1")
        .unwrap_or_else(|| panic!("no skipped event: {ev:?}"));
    assert_eq!(skipped["value"]["skipped"][0]["reason"], "unknown-role");
    // A resume naming no pending interrupt: 409 before the stream in 1.0, in the stream in 0.1.
    let ev = s.run(&s.body("resume", "r1", "a question"));
    assert!(!interrupts(&ev).is_empty());
    let wrong = json!([{"interruptId": "nope", "status": "cancelled"}]);
    let r = s.post(&declaring(
        s.resume_body("resume", "r2", wrong.clone()),
        "1.0",
    ));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.error_code(), "UNKNOWN_INTERRUPT");
    let ev = s.run(&s.resume_body("resume", "r3", wrong));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    // The thread's snapshot rule: a 1.0 request that restates less than the thread holds
    // gets the conversation back; a 0.1 one does not; without stored conversations (feature
    // `threads`) there is none to restate.
    s.run(&s.body("short", "r1", "hello"));
    let ev = s.run(&s.body("short", "r2", "hello again"));
    assert!(!types(&ev).contains(&"MESSAGES_SNAPSHOT".to_string()));
    let ev = s.run(&declaring(s.body("short", "r3", "and again"), "1.0"));
    if cfg!(feature = "threads") {
        assert_eq!(ev[1]["type"], "MESSAGES_SNAPSHOT", "{ev:?}");
    } else {
        let snapshot = "MESSAGES_SNAPSHOT".to_string();
        assert!(!types(&ev).contains(&snapshot), "{ev:?}");
    }
}

/// A declaration the server cannot read — newer than 1.0 or not `MAJOR.MINOR` — is served
/// (AG-UI 1.0: proceed, and warn) in the newest dialect the server speaks; a malformed one (not
/// a string) is refused, whatever the server's own dialect, and one it reads is not warned about.
#[test]
fn a_declaration_the_server_cannot_read_is_served_as_1_0_and_warned_about() {
    let (p, log) = procs::start_logged("dialect-unread", &[], &[]);
    let run = |thread: &str, version: Value| {
        let mut b: Value = serde_json::from_slice(&p.body(thread, "r1", "hello")).unwrap();
        b["protocolVersion"] = version;
        post_json(p.addr, "/", &[], &serde_json::to_vec(&b).unwrap())
    };
    for (thread, version) in [("newer", "2.0"), ("odd", "abc\u{7}def"), ("minor", "1.1")] {
        let r = run(thread, json!(version));
        assert_eq!(r.status, 200, "{}", r.text());
        let (ev, _) = sse_events(&r.body);
        assert_eq!(ev[0]["protocolVersion"], "1.0", "{version}: {}", ev[0]);
        assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{version}");
    }
    let r = run("known", json!("1.0"));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = run("number", json!(1.0));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error_code(), "INVALID_INPUT");
    assert!(
        r.error_message().contains("protocolVersion"),
        "{}",
        r.text()
    );
    let warned = |needle: &str| {
        wait_until(Duration::from_secs(5), || {
            log.lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("WARN") && l.contains(needle))
        })
    };
    assert!(warned("protocolVersion \"2.0\" is not a version"));
    assert!(warned("protocolVersion \"1.1\" is not a version"));
    // The client's string is escaped in the log, never written raw.
    assert!(warned("protocolVersion \"abc\\u{7}def\""));
    let lines = log.lock().unwrap().clone();
    let about = |thread: &str| {
        lines
            .iter()
            .filter(|l| l.contains("protocolVersion") && l.contains(&format!("thread {thread}")))
            .count()
    };
    assert_eq!(about("newer"), 1, "{lines:#?}");
    assert_eq!(
        about("known"),
        0,
        "a readable declaration is not warned about"
    );
}

/// A subscriber re-attaches to its run's own events, so a replay is framed as the run was; a
/// snapshot is built for the subscriber: in the dialect it declares, else its run's while the
/// server remembers it, else `--agui-protocol`'s (after a restart).
#[test]
fn a_subscriber_gets_its_runs_dialect_and_a_snapshot_the_one_it_declares() {
    let mut s = Stack::new();
    let body = declaring(s.body("sub", "r1", "compare candidates"), "1.0");
    let ev = s.run(&body);
    let exec = execution(&ev);
    assert_eq!(
        interrupts(&ev)[0]["reason"],
        "candidate_selection",
        "{ev:?}"
    );
    let path = format!("/extensions/iac-code/v1/executions/{exec}/subscribe");
    let subscribe = |s: &Stack, extra: Value| {
        let mut b = json!({"threadId": "sub", "runId": "r1", "rosInvocationId": "ros-1"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = post_json(s.addr(), &path, &[], &serde_json::to_vec(&b).unwrap());
        assert_eq!(r.status, 200, "{}", r.text());
        sse_events(&r.body).0
    };
    // Replay: the run's events as sent, whatever the subscriber declares.
    assert_eq!(subscribe(&s, json!({"afterSequence": -1})), ev);
    let replayed = subscribe(&s, json!({"afterSequence": -1, "protocolVersion": "0.1"}));
    assert_eq!(replayed, ev);
    // Snapshot: the run's dialect (the server still has its log) unless one is declared.
    let snap = subscribe(&s, json!({}));
    assert_eq!(snap[0]["protocolVersion"], "1.0", "{snap:?}");
    assert_eq!(interrupts(&snap)[0]["reason"], "candidate_selection");
    let snap = subscribe(&s, json!({"protocolVersion": "0.1"}));
    assert!(snap[0].get("protocolVersion").is_none(), "{snap:?}");
    assert_eq!(interrupts(&snap)[0]["reason"], "input_required");
    // After a restart nothing remembers the run's dialect: the server's, or the declared one.
    s.start_server(ServerConfig::default());
    let snap = subscribe(&s, json!({}));
    assert!(snap[0].get("protocolVersion").is_none(), "{snap:?}");
    let snap = subscribe(&s, json!({"protocolVersion": "1.0"}));
    assert_eq!(snap[0]["protocolVersion"], "1.0", "{snap:?}");
    assert_eq!(interrupts(&snap)[0]["reason"], "candidate_selection");
    // A malformed declaration is the same 400 as a run's.
    let b =
        json!({"threadId": "sub", "runId": "r1", "rosInvocationId": "ros-1", "protocolVersion": 1});
    let r = post_json(s.addr(), &path, &[], &serde_json::to_vec(&b).unwrap());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.error_message().contains("protocolVersion"),
        "{}",
        r.text()
    );
}

/// A thread's pending interrupts are listed as the run that raised them showed them, so a
/// 1.0 client reads back the interrupt its run ended with (and a 0.1 client its own).
#[test]
#[cfg(feature = "threads")]
fn a_threads_pending_interrupts_are_listed_in_the_dialect_of_the_run_that_raised_them() {
    let s = Stack::new();
    let listed = |thread: &str| {
        let r = raw(
            s.addr(),
            &request("GET", &format!("/threads/{thread}"), &[], b""),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["interrupts"][0].clone()
    };
    let ev = s.run(&declaring(
        s.body("cand-v1", "r1", "compare candidates"),
        "1.0",
    ));
    assert_eq!(interrupts(&ev)[0]["reason"], "candidate_selection");
    assert_eq!(listed("cand-v1")["reason"], "candidate_selection");
    let ev = s.run(&s.body("cand-v01", "r1", "compare candidates"));
    assert_eq!(interrupts(&ev)[0]["reason"], "input_required");
    assert_eq!(listed("cand-v01")["reason"], "input_required");
}
