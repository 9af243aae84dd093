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
fn ids_of_every_body_and_path_are_bounded_and_printable() {
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
        use crate::routes::Work;
        let id = bad.to_string();
        for work in [
            Work::Thread {
                thread_id: id.clone(),
            },
            Work::RenameThread {
                thread_id: id.clone(),
            },
            Work::ThreadMessages {
                thread_id: id.clone(),
                query: String::new(),
            },
            Work::DeleteThread {
                thread_id: id.clone(),
            },
        ] {
            let Err(BodyError::Field(e)) =
                ThreadsRequest::parse(&work, br#"{"title":"x"}"#, Lang::En)
            else {
                panic!("{work:?}");
            };
            names_field(&e, "threadId");
        }
    }
    let at = "x".repeat(crate::limits::MAX_ID_BYTES);
    let body = format!(r#"{{"threadId":"{at}","runId":"{at}","rosInvocationId":"x"}}"#);
    assert_eq!(subscribe(body.as_bytes(), None).unwrap().thread_id, at);
}

#[test]
fn titles_and_searches_refuse_bidi_controls_and_search_folds_case() {
    use crate::routes::Work;
    let rename = |title: &str| {
        let body = format!(r#"{{"title":{}}}"#, json(title));
        let work = Work::RenameThread {
            thread_id: "t".into(),
        };
        ThreadsRequest::parse(&work, body.as_bytes(), Lang::En)
    };
    for bad in ["a\u{202e}gnp.exe", "x\u{2067}y", "\u{200f}", "\u{61c}"] {
        let Err(BodyError::Field(e)) = rename(bad) else {
            panic!("{bad:?}");
        };
        names_field(&e, "title");
    }
    // Joiners and tags stay: emoji need them.
    for ok in [
        "👨\u{200d}👩\u{200d}👧 family",
        "🏴\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f}",
    ] {
        assert!(rename(ok).is_ok(), "{ok:?}");
    }
    let list = |q: &str| {
        let work = Work::ListThreads {
            query: format!("q={q}"),
        };
        ThreadsRequest::parse(&work, b"", Lang::En)
    };
    let Err(BodyError::Field(e)) = list("a%E2%80%AEb") else {
        panic!("an override in q");
    };
    names_field(&e, "q");
    let Ok(ThreadsRequest {
        what: ThreadsQuery::List { filter, .. },
        ..
    }) = list(" STRASSE ")
    else {
        panic!("q");
    };
    assert_eq!(filter.q.as_deref(), Some("strasse"));
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
