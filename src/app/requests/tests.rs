use super::*;

fn subscribe(body: &[u8], last: Option<&str>) -> Result<SubscribeRequest, BodyError> {
    SubscribeRequest::parse("e".into(), body, last, Lang::En)
}

fn cancel(body: &[u8]) -> Result<CancelRequest, BodyError> {
    CancelRequest::parse("e".into(), body, Lang::En)
}

/// Every refusal names its field, in every language.
fn names_field(e: &FieldError, want: &str) {
    assert_eq!(e.path, want);
    for lang in Lang::ALL {
        let shown = if want.is_empty() { "body" } else { want };
        assert!(e.message(lang).contains(&format!("`{shown}`")), "{lang:?}");
    }
}

#[test]
fn subscribe_body_rules() {
    let ok = br#"{"threadId":"t","runId":"r","rosInvocationId":"x"}"#;
    let r = subscribe(ok, None).unwrap();
    assert_eq!(
        (
            r.thread_id.as_str(),
            r.run_id.as_str(),
            r.ros_invocation_id.as_str()
        ),
        ("t", "r", "x")
    );
    assert_eq!(r.after_sequence, None);
    assert_eq!(subscribe(ok, Some(" 7 ")).unwrap().after_sequence, Some(7));
    let with = br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":-1}"#;
    assert_eq!(subscribe(with, Some("9")).unwrap().after_sequence, Some(-1));
    assert_eq!(subscribe(b"{", None), Err(BodyError::Json));
    let Err(BodyError::Field(e)) = subscribe(ok, Some("x")) else {
        panic!("a bad Last-Event-ID is refused");
    };
    names_field(&e, "Last-Event-ID");
    let cases: [(&[u8], &str); 8] = [
        (
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":-2}"#,
            "afterSequence",
        ),
        (
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":1.5}"#,
            "afterSequence",
        ),
        (
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","afterSequence":"1"}"#,
            "afterSequence",
        ),
        (
            br#"{"threadId":"t","runId":"r","rosInvocationId":"x","extra":1}"#,
            "extra",
        ),
        (
            br#"{"threadId":"","runId":"r","rosInvocationId":"x"}"#,
            "threadId",
        ),
        (
            br#"{"threadId":"t","runId":5,"rosInvocationId":"x"}"#,
            "runId",
        ),
        (br#"{"threadId":"t","runId":"r"}"#, "rosInvocationId"),
        (br#"[]"#, ""),
    ];
    for (b, want) in cases {
        let Err(BodyError::Field(e)) = subscribe(b, None) else {
            panic!("{}", String::from_utf8_lossy(b));
        };
        names_field(&e, want);
    }
}

#[test]
fn cancel_body_rules() {
    let r = cancel(br#"{"threadId":"t","rosInvocationId":"x","more":1}"#).unwrap();
    assert_eq!(
        (
            r.execution_id.as_str(),
            r.thread_id.as_str(),
            r.ros_invocation_id.as_str()
        ),
        ("e", "t", "x")
    );
    assert_eq!(cancel(b"{bad"), Err(BodyError::Json));
    let cases: [(&[u8], &str); 6] = [
        (br#"{"rosInvocationId":"x"}"#, "threadId"),
        (br#"{"threadId":null,"rosInvocationId":"x"}"#, "threadId"),
        (br#"{"threadId":"","rosInvocationId":"x"}"#, "threadId"),
        (br#"{"threadId":1,"rosInvocationId":"x"}"#, "threadId"),
        (
            br#"{"threadId":"t","rosInvocationId":[]}"#,
            "rosInvocationId",
        ),
        (br#""t""#, ""),
    ];
    for (b, want) in cases {
        let Err(BodyError::Field(e)) = cancel(b) else {
            panic!("{}", String::from_utf8_lossy(b));
        };
        names_field(&e, want);
    }
}

#[test]
fn run_body_rules() {
    let r = RunRequest::parse(br#"{"threadId":"t","runId":5}"#, Lang::Fr).unwrap();
    assert_eq!((r.thread_id.as_str(), r.run_id.as_str()), ("t", ""));
    assert_eq!(r.payload_lang, Lang::Fr);
    assert_eq!(
        RunRequest::parse(b"[1]", Lang::En).err(),
        Some(RunBodyError::NotObject)
    );
    assert_eq!(
        RunRequest::parse(b"{", Lang::En).err(),
        Some(RunBodyError::Json)
    );
}

#[test]
fn json_parsing_rules() {
    assert!(parse_json(b"\xEF\xBB\xBF{}").is_some());
    assert!(parse_json(b"{bad").is_none());
    assert!(parse_json(b"\xff\xfe").is_none());
    assert!(parse_json(b"[NaN]").is_none());
    assert!(parse_json(br#"{"a":"\ud800"}"#).is_none());
    let deep = "[".repeat(100_000);
    assert!(parse_json(deep.as_bytes()).is_none());
    let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert!(parse_json(ok.as_bytes()).is_some());
    let too = format!("{}{}", "[".repeat(101), "]".repeat(101));
    assert!(parse_json(too.as_bytes()).is_none());
    assert!(crate::scan::json_depth_at_most(br#"["[[[[","\"[["]"#, 1));
    let v = parse_json(br#"{"a":1,"a":2}"#).unwrap();
    assert_eq!(v["a"], 2);
}

#[test]
fn ids_of_every_body_are_bounded_and_printable() {
    let long = "x".repeat(crate::limits::MAX_ID_BYTES + 1);
    let rlo = "t\u{202e}";
    for bad in [long.as_str(), rlo] {
        let s = |t: &str, r: &str| {
            format!(
                r#"{{"threadId":{},"runId":{},"rosInvocationId":"x"}}"#,
                json(t),
                json(r)
            )
        };
        for (body, want) in [(s(bad, "r"), "threadId"), (s("t", bad), "runId")] {
            let Err(BodyError::Field(e)) = subscribe(body.as_bytes(), None) else {
                panic!("{body}");
            };
            assert_eq!(e.problem, Problem::Id);
            names_field(&e, want);
        }
        let body = format!(r#"{{"threadId":{},"rosInvocationId":"x"}}"#, json(bad));
        let Err(BodyError::Field(e)) = cancel(body.as_bytes()) else {
            panic!("{body}");
        };
        names_field(&e, "threadId");
        let body = format!(r#"{{"threadId":"t","runId":{}}}"#, json(bad));
        let body = body.replace(
            '}',
            r#","forwardedProps":{"iacCode":{"preferredLanguage":"de"}}}"#,
        );
        let Err(RunBodyError::Id(e, lang)) = RunRequest::parse(body.as_bytes(), Lang::En) else {
            panic!("{body}");
        };
        names_field(&e, "runId");
        assert_eq!(lang, Lang::De, "in the payload language");
    }
    let at = "x".repeat(crate::limits::MAX_ID_BYTES);
    let body = format!(r#"{{"threadId":"{at}","runId":"{at}","rosInvocationId":"x"}}"#);
    assert_eq!(subscribe(body.as_bytes(), None).unwrap().thread_id, at);
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap()
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
    let peer: std::net::SocketAddr = "10.0.0.7:4242".parse().unwrap();
    let o = RequestOrigin::of(Some(peer), Some(&span));
    assert_eq!(o.client, Some(peer));
    assert_eq!(o.trace_id.as_deref(), Some("0a".repeat(16).as_str()));
    assert_eq!(o.request_id.as_deref(), Some("b7".repeat(8).as_str()));
    assert_eq!(RequestOrigin::of(None, None), RequestOrigin::default());
}
