use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;

fn at() -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_796_000_000_123)
}

fn parsed(line: &[u8]) -> Value {
    assert_eq!(line.last(), Some(&b'\n'));
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
    serde_json::from_slice(line).unwrap()
}

fn origin(peer: &str) -> RequestOrigin {
    RequestOrigin {
        client: Some(peer.parse().unwrap()),
        trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
        request_id: Some("b7ad6b7169203331".into()),
    }
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
    let r = parsed(&record(
        at(),
        &RequestOrigin::default(),
        &s,
        &Action::ThreadDelete,
    ));
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
    let usage = crate::agui::events::RunUsage {
        input_tokens: 3,
        output_tokens: 4,
        total_tokens: 7,
        cached_input_tokens: 1,
    };
    let action = Action::RunEnd {
        outcome: "success",
        usage,
    };
    let r = parsed(&record(at(), &RequestOrigin::default(), &s, &action));
    assert_eq!(r["outcome"], "success");
    assert_eq!(
        r["usage"],
        json!({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7, "cachedInputTokens": 1})
    );
}

fn ans(id: &str, kind: Option<&str>, decided: Decided) -> Answered {
    Answered {
        id: id.into(),
        kind: kind.map(str::to_string),
        decided,
    }
}

#[test]
fn a_resume_record_says_what_each_answer_decided_and_no_other_value() {
    let confirm = Decided::Action {
        action: "confirm".into(),
        overrides: vec!["InstanceType".into(), "Zone".into()],
    };
    let list = vec![
        ans("p1", Some("permission"), Decided::Word("allow_once".into())),
        ans(
            "q1",
            Some("ask_user_question"),
            Decided::Option("cn-hangzhou".into()),
        ),
        ans("q2", Some("ask_user_question"), Decided::FreeText),
        ans(
            "s1",
            Some("cloud_resource_selection"),
            Decided::Resource("vpc-1".into()),
        ),
        ans("s2", Some("cloud_resource_selection"), Decided::Cancelled),
        ans("c1", Some("deployment_confirmation"), confirm),
        ans(
            "c2",
            Some("deployment_confirmation"),
            Decided::Action {
                action: "cancel".into(),
                overrides: vec![],
            },
        ),
        ans("p2", Some("permission"), Decided::Refused(Refused::Invalid)),
        ans("p3", Some("permission"), Decided::Refused(Refused::Expired)),
        ans("x9", None, Decided::Refused(Refused::NotPending)),
        ans("i1", Some("input_required"), Decided::Answered),
    ];
    let r = parsed(&record(
        at(),
        &RequestOrigin::default(),
        &Subject {
            caller: &Caller::Shared,
            thread_id: "T",
            run_id: Some("r"),
            execution_id: None,
        },
        &Action::Resume { interrupts: list },
    ));
    assert_eq!(r["mode"], "resume");
    assert_eq!(
        r["interrupts"],
        json!([
            {"id": "p1", "kind": "permission", "decision": "allow_once"},
            {"id": "q1", "kind": "ask_user_question", "decision": "selected", "option": "cn-hangzhou"},
            {"id": "q2", "kind": "ask_user_question", "decision": "free_text"},
            {"id": "s1", "kind": "cloud_resource_selection", "decision": "selected", "resource": "vpc-1"},
            {"id": "s2", "kind": "cloud_resource_selection", "decision": "cancelled"},
            {"id": "c1", "kind": "deployment_confirmation", "decision": "confirm",
                "overrides": ["InstanceType", "Zone"]},
            {"id": "c2", "kind": "deployment_confirmation", "decision": "cancel"},
            {"id": "p2", "kind": "permission", "decision": "refused", "reason": "invalid"},
            {"id": "p3", "kind": "permission", "decision": "refused", "reason": "expired"},
            {"id": "x9", "kind": "unknown", "decision": "refused", "reason": "not_pending"},
            {"id": "i1", "kind": "input_required", "decision": "answered"},
        ])
    );
}

#[test]
fn a_record_stays_bounded_whatever_the_client_sends() {
    let huge = "x".repeat(100_000);
    let long = "y".repeat(300);
    let s = Subject {
        caller: &Caller::Shared,
        thread_id: &huge,
        run_id: Some(&huge),
        execution_id: Some(&huge),
    };
    let many: Vec<Answered> = (0..1000)
        .map(|i| {
            let decided = if i % 2 == 0 {
                Decided::Option(huge.clone())
            } else {
                Decided::Action {
                    action: huge.clone(),
                    overrides: (0..40).map(|n| format!("{n}{long}")).collect(),
                }
            };
            ans(&format!("{i}{huge}"), Some(&huge), decided)
        })
        .collect();
    let action = Action::Resume { interrupts: many };
    let line = record(at(), &RequestOrigin::default(), &s, &action);
    let r = parsed(&line);
    let listed = r["interrupts"].as_array().unwrap();
    assert_eq!(listed.len(), MAX_INTERRUPTS);
    assert_eq!(r["interruptsOmitted"], 1000 - MAX_INTERRUPTS);
    // The record's override names are shared out: the first answer with some takes them all.
    assert_eq!(
        listed[1]["overrides"].as_array().unwrap().len(),
        MAX_OVERRIDES
    );
    assert_eq!(listed[1]["overridesOmitted"], 40 - MAX_OVERRIDES);
    assert!(listed[3].get("overrides").is_none());
    assert_eq!(listed[3]["overridesOmitted"], 40);
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
        interrupts: vec![ans(id, None, Decided::Cancelled)],
    };
    let line = record(at(), &RequestOrigin::default(), &s, &action);
    let text = String::from_utf8(line.clone()).unwrap();
    let record = text.strip_suffix('\n').unwrap();
    assert!(!record.contains(crate::logging::unsafe_in_line), "{text:?}");
    assert!(text.contains(r"i1\u202edeifitrec\u2066\u2028"), "{text}");
    assert_eq!(parsed(&line)["interrupts"][0]["id"], id, "the same string");
}
