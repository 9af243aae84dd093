use super::*;

fn tool(id: &str, name: &str, parent: Option<&str>) -> Event {
    Event::ToolStart {
        tool_call_id: id.into(),
        name: name.into(),
        parent_message_id: parent.map(str::to_string),
    }
}

fn text(id: &str, parts: &[&str]) -> Vec<Event> {
    let mut v = vec![Event::TextStart {
        message_id: id.into(),
    }];
    v.extend(parts.iter().map(|p| Event::TextContent {
        message_id: id.into(),
        delta: (*p).into(),
    }));
    v.push(Event::TextEnd {
        message_id: id.into(),
    });
    v
}

fn ops(events: &[Event]) -> Ops {
    let mut o = Ops::default();
    for e in events {
        o.record(e);
    }
    o
}

fn user(id: &str, content: &str) -> Value {
    json!({"id": id, "role": "user", "content": content})
}

#[test]
fn a_plain_run_is_the_user_message_and_one_assistant_message() {
    let mut t = Transcript::new("t", 1);
    t.add_input(&[user("u1", "hello")]);
    t.apply(&ops(&text("m1", &["Hel", "lo", "!"])), "r1");
    assert_eq!(
        t.messages,
        vec![
            user("u1", "hello"),
            json!({"id": "m1", "role": "assistant", "content": "Hello!"})
        ]
    );
    // Deltas of one message are one op.
    assert_eq!(ops(&text("m1", &["a", "b", "c"])).ops.len(), 2);
}

#[test]
fn a_runs_text_is_held_up_to_the_cap_and_the_cut_is_marked() {
    let mut o = Ops::with_cap(10);
    for e in text("m1", &["0123456", "789abc", "never"]) {
        o.record(&e);
    }
    o.record(&tool("c1", "bash", Some("m1")));
    o.record(&Event::ToolResult {
        tool_call_id: "c1".into(),
        content: "a big result".into(),
    });
    let mut t = Transcript::new("t", 1);
    t.apply(&o, "r0");
    assert_eq!(t.messages[0]["content"], format!("0123456789{CUT_MARK}"));
    assert_eq!(t.messages[1]["content"], "[…]");
    // Multi-byte text is cut on a character boundary.
    let mut o = Ops::with_cap(4);
    o.record(&Event::TextStart {
        message_id: "m".into(),
    });
    o.record(&Event::TextContent {
        message_id: "m".into(),
        delta: "日本語".into(),
    });
    let mut t = Transcript::new("t", 1);
    t.apply(&o, "r0");
    assert_eq!(t.messages[0]["content"], format!("日{CUT_MARK}"));
}

#[test]
fn reasoning_is_a_reasoning_message_before_the_answer() {
    let mut events = vec![
        Event::ReasoningStart {
            message_id: "r1".into(),
        },
        Event::ReasoningMessageStart {
            message_id: "r1".into(),
        },
        Event::ReasoningContent {
            message_id: "r1".into(),
            delta: "thinking".into(),
        },
        Event::ReasoningMessageEnd {
            message_id: "r1".into(),
        },
        Event::ReasoningEnd {
            message_id: "r1".into(),
        },
    ];
    events.extend(text("m1", &["done"]));
    let mut t = Transcript::new("t", 1);
    t.apply(&ops(&events), "r2");
    assert_eq!(
        t.messages[0],
        json!({"id": "r1", "role": "reasoning", "content": "thinking"})
    );
    assert_eq!(t.messages[1]["role"], "assistant");
}

#[test]
fn a_tool_result_of_a_later_run_goes_after_its_call() {
    // Run 1: text, a tool call under it, then an interrupt (permission).
    let mut run1 = text("m1", &["I will create it."]);
    run1.push(tool("c1", "write_file", Some("m1")));
    run1.push(Event::ToolArgs {
        tool_call_id: "c1".into(),
        delta: "{\"path\":".into(),
    });
    run1.push(Event::ToolArgs {
        tool_call_id: "c1".into(),
        delta: "\"a\"}".into(),
    });
    let mut t = Transcript::new("t", 1);
    t.add_input(&[user("u1", "create a file")]);
    t.apply(&ops(&run1), "r3");
    // Run 2 (the resume): the result, then the answer.
    let mut run2 = vec![Event::ToolResult {
        tool_call_id: "c1".into(),
        content: "ok".into(),
    }];
    run2.extend(text("m2", &["Created."]));
    t.add_input(&[user("u1", "create a file")]);
    t.apply(&ops(&run2), "r4");
    let roles: Vec<&str> = t
        .messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(
        t.messages[1]["toolCalls"],
        json!([{"id": "c1", "type": "function",
            "function": {"name": "write_file", "arguments": "{\"path\":\"a\"}"}}])
    );
    assert_eq!(
        t.messages[2],
        json!({"id": "tool-result-c1", "toolCallId": "c1", "role": "tool", "content": "ok"})
    );
}

#[test]
fn a_tool_call_without_an_assistant_parent_gets_one_like_the_client_makes() {
    let mut t = Transcript::new("t", 1);
    t.add_input(&[user("u1", "x")]);
    // No parent: a message named after the call. A parent that is a user message: the
    // call's own id too. An unknown parent: a message of that id.
    t.apply(
        &ops(&[
            tool("c1", "a", None),
            tool("c2", "b", Some("u1")),
            tool("c3", "c", Some("p9")),
            tool("c1", "renamed", None),
        ]),
        "r5",
    );
    let ids: Vec<&str> = t
        .messages
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["u1", "c1", "c2", "p9"]);
    assert_eq!(t.messages[1]["toolCalls"][0]["function"]["name"], "renamed");
    assert!(t.messages[1].get("content").is_none());
}

#[test]
fn images_are_kept_as_references_not_bytes() {
    let m = json!({"id": "u1", "role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}},
        {"type": "binary", "mimeType": "image/png", "data": "AAAA"}]});
    let mut t = Transcript::new("t", 1);
    t.add_input(&[m]);
    let c = &t.messages[0]["content"];
    assert_eq!(c[1]["source"]["value"], "[not kept]");
    assert_eq!(c[1]["source"]["mimeType"], "image/png");
    assert_eq!(c[2]["data"], "[not kept]");
    assert_eq!(t.title(), "look");
}

#[test]
fn the_bounds_drop_the_oldest_behind_a_marker() {
    let mut t = Transcript::new("t", 1);
    for i in 0..10 {
        t.add_input(&[user(&format!("u{i}"), "x")]);
    }
    let b = Bounds {
        max_messages: 4,
        max_bytes: 1 << 20,
    };
    t.bound(b);
    assert_eq!(t.dropped, 6);
    assert_eq!(t.messages.len(), 5);
    assert_eq!(t.messages[0]["id"], TRIMMED_ID);
    assert!(t.messages[0]["content"].as_str().unwrap().contains('6'));
    assert_eq!(t.messages[1]["id"], "u6");
    // Bounding again keeps one marker and counts on.
    t.add_input(&[user("u10", "x")]);
    t.bound(b);
    assert_eq!(t.dropped, 7);
    assert_eq!(
        t.messages.iter().filter(|m| m["id"] == TRIMMED_ID).count(),
        1
    );
    // Bytes too.
    t.bound(Bounds {
        max_messages: 100,
        max_bytes: 100,
    });
    assert!(t.messages.len() <= 3, "{:?}", t.messages);
}

#[test]
fn a_damaged_foreign_or_future_file_is_refused() {
    let mut t = Transcript::new("t", 5);
    t.add_input(&[user("u1", "hello")]);
    let bytes = t.to_bytes();
    assert_eq!(Transcript::from_bytes(&bytes, "t"), Ok(t.clone()));
    assert!(matches!(
        Transcript::from_bytes(&bytes, "other"),
        Err(ConversationError::Foreign(_))
    ));
    assert!(matches!(
        Transcript::from_bytes(&bytes[..bytes.len() / 2], "t"),
        Err(ConversationError::Json(_))
    ));
    let future = String::from_utf8(bytes.clone())
        .unwrap()
        .replace("\"schemaVersion\":1", "\"schemaVersion\":2");
    assert_eq!(
        Transcript::from_bytes(future.as_bytes(), "t"),
        Err(ConversationError::Future(2))
    );
    let bad = String::from_utf8(bytes)
        .unwrap()
        .replace("\"role\":\"user\"", "\"role\":7");
    assert!(Transcript::from_bytes(bad.as_bytes(), "t").is_err());
}

#[test]
fn a_message_a_later_run_opens_again_is_a_new_one_after_the_tool_result() {
    // Regression (issue 46.7): 0.1 mode resumes under the interrupted run's message id, and
    // the answer after a permission joined the text before it, above the tool's result.
    let mut run1 = text("m1", &["I'll create it."]);
    run1.push(tool("c1", "bash", Some("m1")));
    let mut t = Transcript::new("t", 1);
    t.add_input(&[user("u1", "create a file")]);
    t.apply(&ops(&run1), "run-1");
    let mut run2 = vec![Event::ToolResult {
        tool_call_id: "c1".into(),
        content: "ok".into(),
    }];
    run2.extend(text("m1", &["Created ", "the file."]));
    run2.push(tool("c2", "bash", Some("m1")));
    t.apply(&ops(&run2), "run-2");
    let again = format!("m1.{}", crate::agui::dialect::run_scope("run-2"));
    let got: Vec<(&str, &str)> = t
        .messages
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap(),
                m["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("u1", "create a file"),
            ("m1", "I'll create it."),
            ("tool-result-c1", "ok"),
            (again.as_str(), "Created the file."),
        ]
    );
    // The run's own later references follow the new id; a message opened twice within one
    // run stays one message.
    assert_eq!(t.messages[3]["toolCalls"][0]["id"], "c2");
    let mut run3 = text("m3", &["a"]);
    run3.extend(text("m3", &["b"]));
    t.apply(&ops(&run3), "run-3");
    assert_eq!(t.messages.last().unwrap()["content"], "ab");
}
