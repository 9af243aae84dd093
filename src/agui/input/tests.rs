use super::*;
use serde_json::json;

fn base() -> Value {
    json!({"threadId":"t","runId":"r","state":{},"messages":[{"id":"m","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"ros","cwd":"/tmp"}}})
}

fn with(mut v: Value, f: impl FnOnce(&mut Map<String, Value>)) -> Value {
    f(v.as_object_mut().unwrap());
    v
}

#[test]
fn envelope_rules() {
    assert!(parse_envelope(&base()).is_ok());
    let bad = [
        with(base(), |o| {
            o.insert("tools".into(), json!({}));
        }),
        with(base(), |o| {
            o.insert("context".into(), json!("x"));
        }),
        with(base(), |o| {
            o.insert("threadId".into(), json!(5));
        }),
        with(base(), |o| {
            o.insert("threadId".into(), json!(""));
        }),
        with(base(), |o| {
            o.insert("messages".into(), json!([{"id":"m","content":"x"}]));
        }),
        with(base(), |o| {
            o.insert(
                "messages".into(),
                json!([{"id":"m","role":"user","content":5}]),
            );
        }),
        with(base(), |o| {
            o.insert("messages".into(), json!([{"id":"m","role":"user","content":[{"type":"image","source":{"type":"data","value":"x"}}]}]));
        }),
        with(base(), |o| {
            o.insert(
                "resume".into(),
                json!([{"interruptId":"i","status":"maybe"}]),
            );
        }),
        with(base(), |o| {
            o.insert("tools".into(), json!([{"name":"x"}]));
        }),
    ];
    for b in bad {
        assert!(parse_envelope(&b).is_err(), "{b}");
    }
    let ok = [
        with(base(), |o| {
            o.insert("state".into(), Value::Null);
        }),
        // AG-UI 1.0 SDKs omit empty state, tools and context.
        with(base(), |o| {
            o.remove("state");
            o.remove("tools");
            o.remove("context");
        }),
        with(base(), |o| {
            let t = o.remove("threadId").unwrap();
            o.insert("thread_id".into(), t);
            o.insert("foo".into(), json!(1));
        }),
        with(base(), |o| {
            o.insert("runId".into(), json!(""));
        }),
        with(base(), |o| {
            o.insert("messages".into(), json!([{"id":"a","role":"assistant","content":null,"toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"id":"b","role":"tool","content":"x","tool_call_id":"c"},{"id":"c","role":"activity","activityType":"x","content":{}},{"id":"d","role":"user","content":[{"type":"binary","mimeType":"a/b","url":"u"},{"type":"audio","source":{"type":"url","value":"u"}}]}]));
        }),
    ];
    for b in ok {
        assert!(parse_envelope(&b).is_ok(), "{b}");
    }
    let r = parse_envelope(&with(base(), |o| {
        o.insert("resume".into(), json!([]));
    }))
    .unwrap();
    assert_eq!(r.resume, Some(vec![]));
    let r = parse_envelope(&with(base(), |o| {
        o.insert("resume".into(), Value::Null);
    }))
    .unwrap();
    assert_eq!(r.resume, None);
}

fn props(iac: Value) -> Result<IacProps, FieldError> {
    parse_iac_props(&json!({"iacCode": iac}))
}

#[test]
fn forwarded_props_rules() {
    let ok = json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/tmp"});
    assert!(props(ok.clone()).is_ok());
    assert!(parse_iac_props(&json!({"iac_code":{"schema_version":1,"ros_invocation_id":"r","cwd":"/w","llm_headers":{"a":"b"}}})).is_ok());
    assert!(parse_iac_props(&json!({"iacCode":ok.clone(),"other":1})).is_err());
    assert!(parse_iac_props(&Value::Null).is_err());
    assert!(parse_iac_props(&json!({})).is_err());
    let emoji = "😀".repeat(256);
    let mut cases_ok = vec![
        json!({"schemaVersion":1.0,"rosInvocationId":"r","cwd":"/w"}),
        json!({"schemaVersion":1,"rosInvocationId":emoji,"cwd":"/w"}),
        json!({"schemaVersion":1,"rosInvocationId":"x".repeat(256),"cwd":"/w"}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"enabled":true,"effort":"high","budget":123456789012345678901234567890u128.to_string().parse::<Value>().unwrap()}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","activeGuidance":true,"runMode":"pipeline","llmHeaders":{}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","alibabaCloud":{"accessKeyId":"a","access_key_secret":"s","securityToken":null}}),
    ];
    for c in cases_ok.drain(..) {
        assert!(props(c.clone()).is_ok(), "{c}");
    }
    let bad = [
        json!({"schemaVersion":"1","rosInvocationId":"r","cwd":"/w"}),
        json!({"schemaVersion":2,"rosInvocationId":"r","cwd":"/w"}),
        json!({"schemaVersion":true,"rosInvocationId":"r","cwd":"/w"}),
        json!({"rosInvocationId":"r","cwd":"/w"}),
        json!({"schemaVersion":1,"schema_version":1,"rosInvocationId":"r","cwd":"/w"}),
        json!({"schemaVersion":1,"rosInvocationId":"","cwd":"/w"}),
        json!({"schemaVersion":1,"rosInvocationId":"x".repeat(257),"cwd":"/w"}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"budget":0}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"budget":5.0}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"enabled":1}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"enabled":null}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"x":1}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","cleanupOnly":null}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","llmHeaders":{"a":1}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","expiresAt":"x"}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","runMode":"fast"}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","candidatePresentation":"fancy"}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","alibabaCloud":{"x":"y"}}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":5}),
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","userId":7}),
    ];
    for c in bad {
        assert!(props(c.clone()).is_err(), "{c}");
    }
    let p = props(
        json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","preferred_language":"ja"}),
    )
    .unwrap();
    assert_eq!(p.preferred_language.as_deref(), Some("ja"));
}

#[test]
fn every_validation_failure_names_its_field_in_every_language() {
    use crate::i18n::Lang;
    let iac = |f: fn(&mut Map<String, Value>)| {
        with(base(), |o| {
            f(o["forwardedProps"]["iacCode"].as_object_mut().unwrap())
        })
    };
    // (body, the path the message must name)
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), "body"),
        (
            with(base(), |o| {
                o.remove("threadId");
            }),
            "threadId",
        ),
        (
            with(base(), |o| {
                o.insert("threadId".into(), json!(5));
            }),
            "threadId",
        ),
        (
            with(base(), |o| {
                o.remove("runId");
            }),
            "runId",
        ),
        (
            with(base(), |o| {
                o.insert("parentRunId".into(), json!(1));
            }),
            "parentRunId",
        ),
        (
            with(base(), |o| {
                o.remove("messages");
            }),
            "messages",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!({}));
            }),
            "messages",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!([5]));
            }),
            "messages[0]",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id": "m", "content": "x"}]));
            }),
            "messages[0].role",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id": "m", "role": "user"}]));
            }),
            "messages[0].content",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!([{"role": "user", "content": "x"}]));
            }),
            "messages[0].id",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id": "m", "role": "user", "content": [{"type": "image", "source": {"type": "data", "value": "x"}}]}]));
            }),
            "messages[0].content[0].source.mimeType",
        ),
        (
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id": "a", "role": "assistant", "toolCalls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}]));
            }),
            "messages[0].toolCalls[0].function.arguments",
        ),
        (
            with(base(), |o| {
                o.insert("tools".into(), json!([{"name": "x"}]));
            }),
            "tools[0].description",
        ),
        (
            with(base(), |o| {
                o.insert("context".into(), json!([{"value": "x"}]));
            }),
            "context[0].description",
        ),
        (
            with(base(), |o| {
                o.insert("resume".into(), json!({}));
            }),
            "resume",
        ),
        (
            with(base(), |o| {
                o.insert(
                    "resume".into(),
                    json!([{"interruptId": "i", "status": "maybe"}]),
                );
            }),
            "resume[0].status",
        ),
        (
            with(base(), |o| {
                o.insert("resume".into(), json!([{"status": "resolved"}]));
            }),
            "resume[0].interruptId",
        ),
    ];
    let iac_cases: Vec<(Value, &str)> = vec![
        (
            with(base(), |o| {
                o.insert("forwardedProps".into(), json!({}));
            }),
            "forwardedProps.iacCode",
        ),
        (
            with(base(), |o| {
                o.remove("forwardedProps");
            }),
            "forwardedProps.iacCode",
        ),
        (
            with(base(), |o| {
                o.insert("forwardedProps".into(), json!([]));
            }),
            "forwardedProps",
        ),
        (
            with(base(), |o| {
                o["forwardedProps"]["other"] = json!(1);
            }),
            "forwardedProps.other",
        ),
        (
            with(base(), |o| {
                o.insert("forwardedProps".into(), json!({"iacCode": 5}));
            }),
            "forwardedProps.iacCode",
        ),
        (
            iac(|o| {
                o.remove("schemaVersion");
            }),
            "forwardedProps.iacCode.schemaVersion",
        ),
        (
            iac(|o| {
                o.insert("schemaVersion".into(), json!(true));
            }),
            "forwardedProps.iacCode.schemaVersion",
        ),
        (
            iac(|o| {
                o.remove("rosInvocationId");
            }),
            "forwardedProps.iacCode.rosInvocationId",
        ),
        (
            iac(|o| {
                o.insert("rosInvocationId".into(), json!(""));
            }),
            "forwardedProps.iacCode.rosInvocationId",
        ),
        (
            iac(|o| {
                o.remove("cwd");
            }),
            "forwardedProps.iacCode.cwd",
        ),
        (
            iac(|o| {
                o.insert("cwd".into(), json!(1));
            }),
            "forwardedProps.iacCode.cwd",
        ),
        (
            iac(|o| {
                o.insert("colour".into(), json!("red"));
            }),
            "forwardedProps.iacCode.colour",
        ),
        (
            iac(|o| {
                o.insert("run_mode".into(), json!("x"));
                o.insert("runMode".into(), json!("x"));
            }),
            "forwardedProps.iacCode.runMode",
        ),
        (
            iac(|o| {
                o.insert("runMode".into(), json!("fast"));
            }),
            "forwardedProps.iacCode.runMode",
        ),
        (
            iac(|o| {
                o.insert("candidatePresentation".into(), json!("x"));
            }),
            "forwardedProps.iacCode.candidatePresentation",
        ),
        (
            iac(|o| {
                o.insert("llmHeaders".into(), json!({"a": 1}));
            }),
            "forwardedProps.iacCode.llmHeaders.a",
        ),
        (
            iac(|o| {
                o.insert("thinking".into(), json!({"budget": 0}));
            }),
            "forwardedProps.iacCode.thinking.budget",
        ),
        (
            iac(|o| {
                o.insert("thinking".into(), json!({"enabled": 1}));
            }),
            "forwardedProps.iacCode.thinking.enabled",
        ),
        (
            iac(|o| {
                o.insert("thinking".into(), json!({"x": 1}));
            }),
            "forwardedProps.iacCode.thinking.x",
        ),
        (
            iac(|o| {
                o.insert("alibabaCloud".into(), json!({"region": "x"}));
            }),
            "forwardedProps.iacCode.alibabaCloud.region",
        ),
        (
            iac(|o| {
                o.insert("cleanupOnly".into(), json!("yes"));
            }),
            "forwardedProps.iacCode.cleanupOnly",
        ),
    ];
    let check = |e: FieldError, want: &str, body: &Value| {
        assert_eq!(
            e.path.replace("body", ""),
            want.replace("body", ""),
            "{body}"
        );
        for lang in Lang::ALL {
            let m = e.message(lang);
            assert!(m.contains(&format!("`{want}`")), "{lang:?}: {m} ({body})");
        }
    };
    for (body, want) in cases {
        check(parse_envelope(&body).unwrap_err(), want, &body);
    }
    for (body, want) in iac_cases {
        let inp = parse_envelope(&body).unwrap();
        check(
            parse_iac_props(&inp.forwarded_props).unwrap_err(),
            want,
            &body,
        );
    }
}

fn messages(list: Value) -> Value {
    with(base(), |o| {
        o.insert("messages".into(), list);
    })
}

/// Issue 36 (1.0 request rules): what a 1.0 client may send is accepted in 1.0 mode, and what
/// this server does not know is skipped and listed; 0.1 mode refuses it as the reference does.
#[test]
fn a_1_0_body_with_tool_part_lists_file_sources_and_unknown_kinds_is_accepted_in_1_0_mode() {
    let body = messages(json!([
        {"id":"s","role":"system","content":"be brief"},
        {"id":"x","role":"narrator","content":"???"},
        {"id":"t","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"ok"},{"type":"image","source":{"type":"file","value":"file-123","provider":"openai"}}]},
        {"id":"u","role":"user","content":[{"type":"text","text":"hi"},{"type":"hologram","beam":1},{"type":"image","source":{"type":"file","value":"f","mimeType":"image/png"}}]}
    ]));
    let v1 = parse_envelope_as(&body, &Dialect::V1_0).unwrap();
    let ids: Vec<&str> = v1
        .messages
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s", "t", "u"], "the unknown role is left out");
    let listed: Vec<(Option<&str>, Option<usize>, &str, &str)> = v1
        .skipped
        .iter()
        .map(|s| {
            (
                s.message_id.as_deref(),
                s.part,
                s.kind.as_str(),
                s.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (Some("x"), None, "narrator", "unknown-role"),
            (Some("u"), Some(1), "hologram", "unknown-part-type"),
        ]
    );
    // 0.1 mode: the first of these is a 400 naming it.
    let e = parse_envelope(&body).unwrap_err();
    assert_eq!(e.path, "messages[1].role");
    // Malformed known shapes stay 400 in 1.0 mode too.
    for bad in [
        json!([{"id":"u","role":"user","content":[{"type":"image","source":{"type":"file"}}]}]),
        json!([{"id":"u","role":"user","content":[{"type":"image","source":{"type":"ftp","value":"x"}}]}]),
        json!([{"id":"u","role":"user","content":[{"text":"no type"}]}]),
        json!([{"id":"u","role":"user","content":["not an object"]}]),
        json!([{"id":"t","role":"tool","toolCallId":"c","content":[{"type":"text"}]}]),
        json!([{"id":"t","role":"tool","toolCallId":"c","content":7}]),
        json!([{"id":"x","content":"no role"}]),
    ] {
        assert!(
            parse_envelope_as(&messages(bad.clone()), &Dialect::V1_0).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn ids_past_256_bytes_or_with_unshowable_characters_are_refused_naming_the_field() {
    use crate::agui::dialect::Dialect;
    let max = crate::limits::MAX_ID_BYTES;
    let set = |k: &'static str, v: String| {
        with(base(), |o| {
            o.insert(k.into(), json!(v));
        })
    };
    // At the bound, in bytes (a UUID, a long composite id, 64 four-byte characters): kept.
    for (k, v) in [
        ("threadId", "x".repeat(max)),
        ("runId", "😀".repeat(max / 4)),
        ("parentRunId", "p".repeat(max)),
        ("runId", String::new()),
    ] {
        for dialect in [Dialect::V0_1, Dialect::V1_0] {
            assert!(
                parse_envelope_as(&set(k, v.clone()), &dialect).is_ok(),
                "{k}"
            );
        }
    }
    let hostile = [
        "x".repeat(max + 1),
        "é".repeat(max / 2 + 1),
        "t\u{202e}1 deliver".into(),
        "a\u{2066}b\u{2069}".into(),
        "zero\u{200b}width".into(),
        "bom\u{feff}".into(),
        "tag\u{e0041}".into(),
        "new\nline".into(),
        "sep\u{2028}".into(),
        "c1\u{85}".into(),
    ];
    for k in ["threadId", "runId", "parentRunId"] {
        for v in &hostile {
            for dialect in [Dialect::V0_1, Dialect::V1_0] {
                let e = parse_envelope_as(&set(k, v.clone()), &dialect).unwrap_err();
                assert_eq!((e.path.as_str(), &e.problem), (k, &Problem::Id), "{v:?}");
                assert!(e.message(crate::i18n::Lang::En).contains("256 bytes"));
            }
        }
    }
    // The snake_case spellings too, and the early read of the ids for the stream.
    let snake = with(base(), |o| {
        o.remove("threadId");
        o.insert("thread_id".into(), json!("x".repeat(max + 1)));
    });
    assert_eq!(parse_envelope(&snake).unwrap_err().path, "threadId");
    assert_eq!(run_ids(&snake).unwrap_err().path, "threadId");
    let run = set("runId", "r\u{202e}".into());
    assert_eq!(run_ids(&run).unwrap_err().path, "runId");
    assert_eq!(run_ids(&base()).unwrap(), ("t".into(), "r".into()));
}
