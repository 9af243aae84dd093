//! Projection unit tests: every mapping rule against hand-written and captured A2A events.

use super::*;
use crate::a2a::types::{Kind, Payload};
use crate::adapter::rules::env::TestEnv;

fn ev(obj: Value) -> A2aEvent {
    match Payload::from_value(json!({ "result": obj })) {
        Payload::Event(e) => e,
        Payload::Error(_) => panic!(),
    }
}

fn status(msg: Option<Value>, iac: Value) -> A2aEvent {
    let mut st = json!({"state": "TASK_STATE_WORKING"});
    if let Some(m) = msg {
        st["message"] = m;
    }
    ev(
        json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": st, "metadata": {"iac_code": iac}}}),
    )
}

fn text(id: Option<&str>, t: &str, role: Option<&str>) -> Value {
    let mut m = json!({"parts": [{"text": t}]});
    if let Some(i) = id {
        m["messageId"] = i.into();
    }
    if let Some(r) = role {
        m["role"] = r.into();
    }
    m
}

/// (type, main id or delta) pairs, for compact assertions.
fn brief(evs: &[Stamped]) -> Vec<String> {
    evs.iter()
        .map(|s| {
            let v: Value = serde_json::from_slice(&s.to_json()).unwrap();
            let ty = v["type"].as_str().unwrap().to_string();
            let detail = [
                "delta",
                "messageId",
                "toolCallId",
                "stepName",
                "name",
                "content",
            ]
            .iter()
            .find_map(|k| v[*k].as_str().map(str::to_string))
            .unwrap_or_default();
            format!("{ty} {detail}")
        })
        .collect()
}

fn mapper(env: &TestEnv) -> Mapper<'_> {
    Mapper::new(env, "th", "run1", BTreeSet::new(), BTreeSet::new())
}

#[test]
fn status_text_without_message_id_gets_a_generated_one() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(
        &status(Some(text(None, "hi", Some("ROLE_AGENT"))), json!({})),
        true,
        true,
    );
    let out = brief(&m.take());
    assert_eq!(out[0], format!("TEXT_MESSAGE_START assistant-{:032x}", 1));
    assert_eq!(out[1], "TEXT_MESSAGE_CONTENT hi");
}

#[test]
fn assistant_final_repeat_is_suppressed_and_user_role_ignored() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(
        &status(Some(text(Some("t-message"), "Hello", None)), json!({})),
        true,
        true,
    );
    m.map(
        &status(Some(text(Some("u"), "echo", Some("ROLE_USER"))), json!({})),
        true,
        true,
    );
    m.map(
        &status(
            Some(text(Some("t-2"), "Hello", Some("ROLE_AGENT"))),
            json!({"assistantFinal": {"complete": true}}),
        ),
        true,
        true,
    );
    assert_eq!(
        brief(&m.take()),
        ["TEXT_MESSAGE_START t-message", "TEXT_MESSAGE_CONTENT Hello"]
    );
}

#[test]
fn history_fallback_uses_the_trailing_agent_block() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    let task = ev(
        json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}, "history": [
            text(Some("a0"), "old ", Some("ROLE_AGENT")),
            text(Some("u1"), "question", Some("ROLE_USER")),
            text(Some("a1"), "one ", Some("ROLE_AGENT")),
            text(None, "two", Some("agent")),
            text(Some("u2"), "trailing user", Some("ROLE_USER")),
        ]}}),
    );
    assert_eq!(task.kind, Kind::Task);
    m.map(&task, true, true);
    assert_eq!(
        brief(&m.take()),
        ["TEXT_MESSAGE_START a1", "TEXT_MESSAGE_CONTENT one two"]
    );
}

#[test]
fn reasoning_ids_and_types() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(
        &status(
            None,
            json!({"thinking": {"type": "raw_thinking", "text": "a"}}),
        ),
        true,
        true,
    );
    m.map(
        &status(
            None,
            json!({"thinking": {"type": "summary", "text": "dropped"}}),
        ),
        true,
        true,
    );
    m.map(
        &status(Some(text(Some("m1"), "x", None)), json!({})),
        true,
        true,
    );
    m.map(
        &status(
            None,
            json!({"thinking": {"type": "raw_thinking", "text": "b"}}),
        ),
        true,
        true,
    );
    m.close_all();
    assert_eq!(
        brief(&m.take()),
        [
            "REASONING_START reasoning-run1",
            "REASONING_MESSAGE_START reasoning-run1",
            "REASONING_MESSAGE_CONTENT a",
            "REASONING_MESSAGE_END reasoning-run1",
            "REASONING_END reasoning-run1",
            "TEXT_MESSAGE_START m1",
            "TEXT_MESSAGE_CONTENT x",
            "REASONING_START reasoning-m1",
            "REASONING_MESSAGE_START reasoning-m1",
            "REASONING_MESSAGE_CONTENT b",
            "REASONING_MESSAGE_END reasoning-m1",
            "REASONING_END reasoning-m1",
            "TEXT_MESSAGE_END m1",
        ]
    );
}

#[test]
fn tools_args_summary_duplicates_and_missing_ids() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(&status(None, json!({"tool": {"status": "input_complete", "toolUseId": "c1", "name": "bash", "inputSummary": "ls -l"}})), true, true);
    m.map(&status(None, json!({"tool": {"status": "completed", "toolUseId": "c1", "result": {"b": 1, "a": "é"}}})), true, true);
    m.map(
        &status(
            None,
            json!({"tool": {"status": "completed", "toolUseId": "c1", "result": "again"}}),
        ),
        true,
        true,
    );
    m.map(
        &status(None, json!({"tool": {"status": "failed"}})),
        true,
        true,
    );
    m.map(
        &status(
            None,
            json!({"tool": {"status": "input_delta", "toolUseId": "c1"}}),
        ),
        true,
        true,
    );
    assert_eq!(
        brief(&m.take()),
        [
            "TOOL_CALL_START c1",
            "TOOL_CALL_ARGS {\"summary\":\"ls -l\"}",
            "TOOL_CALL_END c1",
            "TOOL_CALL_RESULT tool-result-c1",
            format!("TOOL_CALL_RESULT tool-result-tool-{:032x}", 1).as_str(),
        ]
    );
}

#[test]
fn tool_result_content_is_sorted_compact_json_or_null() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(&status(None, json!({"tool": {"status": "completed", "toolUseId": "c1", "result": {"b": 1, "a": "é"}}})), true, true);
    m.map(
        &status(
            None,
            json!({"tool": {"status": "completed", "toolUseId": "c2"}}),
        ),
        true,
        true,
    );
    let evs = m.take();
    let contents: Vec<String> = evs
        .iter()
        .map(|s| match &s.event {
            Event::ToolResult { content, .. } => content.clone(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(contents, ["{\"a\":\"é\",\"b\":1}", "null"]);
}

#[test]
fn usage_aggregates_by_provider_and_model() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    for u in [
        json!({"provider": "qwen", "model": "m1", "inputTokens": 5.0, "outputTokens": 3, "totalTokens": 8, "cachedInputTokens": 7}),
        json!({"provider": "qwen", "model": "m1", "inputTokens": 6, "outputTokens": 3.0, "totalTokens": 9}),
        json!({"provider": "other", "inputTokens": 1}),
        json!({"provider": "bad", "inputTokens": -1}),
        json!({"provider": "bad", "inputTokens": 1.5}),
    ] {
        m.map(&status(None, json!({"usage": u})), true, true);
    }
    let u = m.usage();
    assert_eq!(u.len(), 2);
    assert_eq!(
        (
            u[0].input_tokens,
            u[0].output_tokens,
            u[0].total_tokens,
            u[0].cached_input_tokens
        ),
        (11, 6, 17, 7)
    );
    assert_eq!(u[1].model, None);
}

fn env_obj(event_type: &str, seq: i64, id: &str, extra: Value) -> Value {
    let mut e = json!({"eventId": id, "sequence": seq, "eventType": event_type, "scope": "step", "data": {}});
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

#[test]
fn pipeline_dedup_steps_and_custom_allowlist() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    let step = json!({"step": {"id": "s1", "runId": "step-s1-1"}});
    let batch = vec![
        env_obj("step_started", 1, "e1", step.clone()),
        env_obj("step_started", 1, "e1", step.clone()),
        env_obj(
            "text_delta",
            2,
            "e2",
            json!({"step": {"id": "s1", "runId": "step-s1-1"}, "data": {"text": "hi"}}),
        ),
        env_obj(
            "text_delta",
            2,
            "e3",
            json!({"data": {"text": "same sequence: dropped"}}),
        ),
        env_obj("step_failed", 4, "e4", step.clone()),
        env_obj("usage", 5, "e5", json!({"data": {"inputTokens": 3}})),
        env_obj("permission_requested", 6, "e6", json!({})),
    ];
    m.map(
        &status(None, json!({"pipelineBatch": {"events": batch}})),
        true,
        true,
    );
    let out = brief(&m.take());
    assert_eq!(
        out,
        [
            "STEP_STARTED s1",
            "TEXT_MESSAGE_START pipeline-message:pipeline-th:step:step-s1-1",
            "TEXT_MESSAGE_CONTENT hi",
            "STEP_FINISHED s1",
            "CUSTOM iac-code.pipeline.v1",
        ]
    );
    assert_eq!(m.usage()[0].input_tokens, 3);
    assert_eq!(m.last_sequence, 6);
    assert!(m.open_steps.is_empty());
}

#[test]
fn parallel_candidates_keep_separate_messages_and_step_keys() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    let c = |i: u32| json!({"candidate": {"id": format!("c{i}"), "runId": format!("cand-{i}")}, "candidateStep": {"id": "design", "runId": format!("cand-{i}-design")}, "scope": "candidate_step"});
    let mut events = Vec::new();
    for i in 1..=2u32 {
        events.push(env_obj(
            "candidate_step_started",
            i64::from(i),
            &format!("s{i}"),
            c(i),
        ));
    }
    for i in 1..=2u32 {
        let mut e = env_obj("text_delta", i64::from(i) + 2, &format!("t{i}"), c(i));
        e["data"] = json!({"text": format!("cand {i}")});
        events.push(e);
    }
    m.map(
        &status(None, json!({"pipelineBatch": {"events": events}})),
        true,
        true,
    );
    m.close_all();
    let out = brief(&m.take());
    assert_eq!(
        out,
        [
            "STEP_STARTED candidate:c1:design",
            "STEP_STARTED candidate:c2:design",
            "TEXT_MESSAGE_START pipeline-message:pipeline-th:candidate_step:cand-1:cand-1-design",
            "TEXT_MESSAGE_CONTENT cand 1",
            "TEXT_MESSAGE_START pipeline-message:pipeline-th:candidate_step:cand-2:cand-2-design",
            "TEXT_MESSAGE_CONTENT cand 2",
            "TEXT_MESSAGE_END pipeline-message:pipeline-th:candidate_step:cand-1:cand-1-design",
            "TEXT_MESSAGE_END pipeline-message:pipeline-th:candidate_step:cand-2:cand-2-design",
            "STEP_FINISHED candidate:c1:design",
            "STEP_FINISHED candidate:c2:design",
        ]
    );
    // Durable open steps survive close_all; the next run reopens them sorted.
    assert_eq!(m.open_steps.len(), 2);
}

#[test]
fn close_all_order_reasoning_tools_texts_steps() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(
        &status(
            None,
            json!({"pipeline": env_obj("step_started", 1, "e1", json!({"step": {"id": "s"}}))}),
        ),
        true,
        true,
    );
    m.map(
        &status(Some(text(Some("m"), "t", None)), json!({})),
        true,
        true,
    );
    m.map(
        &status(
            None,
            json!({"tool": {"status": "started", "toolUseId": "c", "name": "x"}}),
        ),
        true,
        true,
    );
    m.map(
        &status(
            None,
            json!({"thinking": {"type": "raw_thinking", "text": "r"}}),
        ),
        true,
        true,
    );
    m.take();
    m.close_all();
    assert_eq!(
        brief(&m.take()),
        [
            "REASONING_MESSAGE_END reasoning-m",
            "REASONING_END reasoning-m",
            "TOOL_CALL_END c",
            "TEXT_MESSAGE_END m",
            "STEP_FINISHED s",
        ]
    );
}

#[test]
fn recovery_snapshot_replaces_the_run_id_and_zero_length_steps() {
    let env = TestEnv::new(5);
    let mut steps = BTreeSet::new();
    steps.insert("step:s0".to_string());
    let mut m = Mapper::new(&env, "th", "run1", steps, BTreeSet::new());
    let state = json!({"snapshot": {"pipelineRunId": "ctx-1", "lastSequence": 9}, "events": [
        {"eventId": "a", "sequence": 3, "eventType": "step_completed", "step": {"id": "s0"}, "data": {}},
        {"sequence": 2, "eventType": "pipeline_warning", "data": {}},
    ]});
    m.last_sequence = 2;
    m.pipeline_recovery(&state);
    let evs = m.take();
    assert_eq!(
        brief(&evs),
        [
            "ACTIVITY_SNAPSHOT pipeline:ctx-1",
            "STEP_STARTED s0",
            "STEP_FINISHED s0"
        ]
    );
    assert_eq!(evs[1].ts, evs[2].ts);
    assert_eq!(m.last_sequence, 9);
    assert_eq!(m.pipeline_run_id, "ctx-1");
}

#[test]
fn resume_replay_emits_only_the_new_suffix() {
    let env = TestEnv::new(5);
    let mut digests = BTreeSet::new();
    digests.insert(crate::ids::sha256_hex("I will list the files.".as_bytes()));
    let mut m = Mapper::new(&env, "th", "run2", BTreeSet::new(), digests);
    m.map(
        &status(
            Some(text(
                Some("t-message"),
                "I will list the files. There are two files.",
                None,
            )),
            json!({}),
        ),
        true,
        true,
    );
    assert_eq!(
        brief(&m.take()),
        [
            "TEXT_MESSAGE_START t-message",
            "TEXT_MESSAGE_CONTENT  There are two files."
        ]
    );
    // A fully replayed text emits nothing.
    let mut digests = BTreeSet::new();
    digests.insert(crate::ids::sha256_hex("日本語".as_bytes()));
    let mut m = Mapper::new(&env, "th", "run3", BTreeSet::new(), digests);
    m.map(
        &status(Some(text(Some("x"), "日本語", None)), json!({})),
        true,
        true,
    );
    assert!(m.take().is_empty());
}

#[test]
fn artifacts_override_schema_version() {
    let env = TestEnv::new(5);
    let mut m = mapper(&env);
    m.map(&ev(json!({"artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a", "schemaVersion": 9}}})), true, true);
    let evs = m.take();
    let v: Value = serde_json::from_slice(&evs[0].to_json()).unwrap();
    assert_eq!(v["value"], json!({"schemaVersion": 9, "artifactId": "a"}));
}
