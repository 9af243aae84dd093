use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;
use crate::agui::input::{ResumeEntry, ResumeStatus};

fn at() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_796_000_000_123)
}

fn parsed(line: &[u8]) -> Value {
    assert_eq!(line.last(), Some(&b'\n'));
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
    serde_json::from_slice(line).unwrap()
}

fn pending(id: &str, kind: &str) -> (String, PendingInput) {
    let value = json!({"kind": kind, "prompt": "p"});
    (
        id.into(),
        PendingInput {
            value: value.as_object().unwrap().clone(),
            sideband: false,
        },
    )
}

fn answer(id: &str, status: ResumeStatus, payload: Value) -> ResumeEntry {
    ResumeEntry {
        interrupt_id: id.into(),
        status,
        payload: Some(payload),
    }
}

fn origin(peer: &str) -> Origin {
    Origin {
        client: Some(peer.parse().unwrap()),
        trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
        request_id: Some("b7ad6b7169203331".into()),
    }
}

#[test]
fn origin_names_the_peer_and_the_requests_span() {
    let span = crate::trace::SpanContext {
        trace_id: [0x0a; 16],
        span_id: [0xb7; 8],
        flags: 1,
        state: None,
        principal: None,
    };
    let peer: SocketAddr = "10.0.0.7:4242".parse().unwrap();
    let o = Origin::of(Some(peer), Some(&span));
    assert_eq!(o.client, Some(peer));
    assert_eq!(o.trace_id.as_deref(), Some("0a".repeat(16).as_str()));
    assert_eq!(o.request_id.as_deref(), Some("b7".repeat(8).as_str()));
    assert_eq!(Origin::of(None, None), Origin::default());
}

#[test]
fn an_admission_record_names_who_when_where_and_the_mode() {
    let caller = Caller::named(b"alice").unwrap();
    let o = origin("127.0.0.1:5000");
    let s = Subject {
        caller: &caller,
        thread_id: "T",
        run_id: Some("r1"),
        execution_id: Some("e1"),
    };
    let r = parsed(&record(at(), &o, &s, &Action::RunAdmitted { mode: "new" }));
    assert_eq!(
        r,
        json!({"time": "2026-11-30T00:53:20.123Z", "event": "run.admitted", "caller": "alice",
            "threadId": "T", "runId": "r1", "executionId": "e1", "client": "127.0.0.1:5000",
            "traceId": "0af7651916cd43dd8448eb211c80319c", "requestId": "b7ad6b7169203331",
            "mode": "new"})
    );
}

#[test]
fn the_shared_principal_is_shared_and_absent_facts_are_left_out() {
    let s = Subject {
        caller: &Caller::Shared,
        thread_id: "T",
        run_id: None,
        execution_id: Some(""),
    };
    let r = parsed(&record(at(), &Origin::default(), &s, &Action::ThreadDelete));
    assert_eq!(r["caller"], "shared");
    assert_eq!(r["event"], "thread.delete");
    for k in ["runId", "executionId", "client", "traceId", "requestId"] {
        assert!(r.get(k).is_none(), "{k}: {r}");
    }
}

#[test]
fn a_run_end_record_has_its_outcome_and_usage() {
    let s = Subject {
        caller: &Caller::Shared,
        thread_id: "T",
        run_id: Some("r"),
        execution_id: Some("e"),
    };
    let usage = crate::quota::Used {
        input_tokens: 3,
        output_tokens: 4,
        total_tokens: 7,
        cached_input_tokens: 1,
    };
    let action = Action::RunEnd {
        outcome: "success",
        usage,
    };
    let r = parsed(&record(at(), &Origin::default(), &s, &action));
    assert_eq!(r["outcome"], "success");
    assert_eq!(
        r["usage"],
        json!({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7, "cachedInputTokens": 1})
    );
}

#[test]
fn resume_decisions_say_what_was_chosen_never_free_text_or_payload() {
    let p = vec![
        pending("p1", "permission"),
        pending("q1", "ask_user_question"),
        pending("q2", "ask_user_question"),
        pending("s1", "cloud_resource_selection"),
        pending("s2", "cloud_resource_selection"),
    ];
    let r = vec![
        answer(
            "p1",
            ResumeStatus::Resolved,
            json!({"decision": "allow_once"}),
        ),
        answer(
            "q1",
            ResumeStatus::Resolved,
            json!({"selectedId": "cn-hangzhou"}),
        ),
        answer(
            "q2",
            ResumeStatus::Resolved,
            json!({"freeText": "my password is hunter2"}),
        ),
        answer(
            "s1",
            ResumeStatus::Resolved,
            json!({"status": "selected", "value": "vpc-1", "label": "secret label"}),
        ),
        answer("s2", ResumeStatus::Resolved, json!({"status": "canceled"})),
        answer("x9", ResumeStatus::Cancelled, json!({"decision": "deny"})),
        answer(
            "p1",
            ResumeStatus::Resolved,
            json!({"decision": "Bearer abc.def"}),
        ),
    ];
    let d = resume_decisions(&p, &r);
    assert_eq!(
        Value::Array(d.clone()),
        json!([
            {"id": "p1", "kind": "permission", "decision": "allow_once"},
            {"id": "q1", "kind": "ask_user_question", "decision": "selected", "option": "cn-hangzhou"},
            {"id": "q2", "kind": "ask_user_question", "decision": "free_text"},
            {"id": "s1", "kind": "cloud_resource_selection", "decision": "selected", "resource": "vpc-1"},
            {"id": "s2", "kind": "cloud_resource_selection", "decision": "cancelled"},
            {"id": "x9", "kind": "unknown", "decision": "cancelled"},
            {"id": "p1", "kind": "permission", "decision": "other"},
        ])
    );
    let line = String::from_utf8(record(
        at(),
        &Origin::default(),
        &Subject {
            caller: &Caller::Shared,
            thread_id: "T",
            run_id: Some("r"),
            execution_id: None,
        },
        &Action::Resume { interrupts: d },
    ))
    .unwrap();
    for secret in ["hunter2", "secret label", "Bearer", "prompt"] {
        assert!(!line.contains(secret), "{secret} in {line}");
    }
}

#[test]
fn a_record_stays_bounded_whatever_the_client_sends() {
    let huge = "x".repeat(100_000);
    let s = Subject {
        caller: &Caller::Shared,
        thread_id: &huge,
        run_id: Some(&huge),
        execution_id: Some(&huge),
    };
    let many: Vec<ResumeEntry> = (0..1000)
        .map(|i| {
            answer(
                &format!("{i}{huge}"),
                ResumeStatus::Resolved,
                json!({"selectedId": huge}),
            )
        })
        .collect();
    let action = Action::Resume {
        interrupts: resume_decisions(&[], &many),
    };
    let line = record(at(), &Origin::default(), &s, &action);
    let r = parsed(&line);
    assert_eq!(r["interrupts"].as_array().unwrap().len(), MAX_INTERRUPTS);
    assert_eq!(r["interruptsOmitted"], 1000 - MAX_INTERRUPTS);
    assert!(line.len() < 64 * 1024, "{}", line.len());
}

/// Issue 57, 4: a right-to-left override in a client's string (an interrupt id) reached the
/// audit log raw, and a viewer showed the rest of the record reversed.
#[test]
fn format_characters_in_a_record_are_escaped() {
    let s = Subject {
        caller: &Caller::Shared,
        thread_id: "t1",
        run_id: Some("r1"),
        execution_id: None,
    };
    let id = "i1\u{202e}deifitrec\u{2066}\u{2028}";
    let action = Action::Resume {
        interrupts: resume_decisions(&[], &[answer(id, ResumeStatus::Cancelled, json!({}))]),
    };
    let line = record(at(), &Origin::default(), &s, &action);
    let text = String::from_utf8(line.clone()).unwrap();
    let record = text.strip_suffix('\n').unwrap();
    assert!(!record.contains(crate::logging::unsafe_in_line), "{text:?}");
    assert!(text.contains(r"i1\u202edeifitrec\u2066\u2028"), "{text}");
    assert_eq!(parsed(&line)["interrupts"][0]["id"], id, "the same string");
}
