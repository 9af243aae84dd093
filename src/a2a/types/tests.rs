use super::*;
use serde_json::json;

#[test]
fn states_normalise() {
    assert_eq!(
        TaskState::parse("TASK_STATE_INPUT_REQUIRED"),
        TaskState::InputRequired
    );
    assert_eq!(TaskState::parse(" working "), TaskState::Working);
    assert_eq!(TaskState::parse("auth_required"), TaskState::AuthRequired);
    assert_eq!(
        TaskState::parse("TASK_STATE_UNSPECIFIED"),
        TaskState::Other("unspecified".into())
    );
    assert!(TaskState::Canceled.is_terminal());
    assert!(TaskState::InputRequired.is_stop());
    assert!(!TaskState::Working.is_stop());
}

/// The shortcut for the kernel's spelling answers what the normalising read does.
#[test]
fn canonical_states_read_like_normalised_ones() {
    for name in [
        "SUBMITTED",
        "WORKING",
        "INPUT_REQUIRED",
        "COMPLETED",
        "CANCELED",
        "FAILED",
        "REJECTED",
        "AUTH_REQUIRED",
    ] {
        let raw = format!("TASK_STATE_{name}");
        assert_eq!(
            TaskState::canonical(&raw),
            Some(TaskState::normalised(&raw)),
            "{raw}"
        );
    }
    for other in ["TASK_STATE_UNSPECIFIED", "TASK_STATE_working", "WORKING"] {
        assert_eq!(TaskState::canonical(other), None, "{other}");
    }
}

#[test]
fn unwrapping() {
    let p = Payload::from_value(
        json!({"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}},"id":"x","jsonrpc":"2.0"}),
    );
    let Payload::Event(e) = p else { panic!() };
    assert_eq!(e.kind, Kind::StatusUpdate);
    assert_eq!(e.task_id(), Some("t"));
    assert_eq!(e.state(), Some(TaskState::Working));
    let p = Payload::from_value(
        json!({"result":{"id":"t2","contextId":"c","status":{"state":"TASK_STATE_CANCELED"}},"id":"x","jsonrpc":"2.0"}),
    );
    let Payload::Event(e) = p else { panic!() };
    assert_eq!((e.kind, e.task_id()), (Kind::Bare, Some("t2")));
}

#[test]
fn rpc_errors_are_never_tasks() {
    let p = Payload::from_value(
        json!({"error":{"code":-32602,"message":"Session backup is still synchronizing. Retry after 3 seconds.","data":{"code":"SESSION_BACKUP_NOT_READY","retryable":true}},"id":"abc","jsonrpc":"2.0"}),
    );
    let Payload::Error(e) = p else { panic!() };
    assert_eq!(e.code, Some(-32602));
    assert!(e.is_backup_not_ready());
    let p = Payload::from_value(
        json!({"error":{"code":-32001,"message":"Task not found","data":[{"reason":"TASK_NOT_FOUND"}]},"id":"abc","jsonrpc":"2.0"}),
    );
    let Payload::Error(e) = p else { panic!() };
    assert!(!e.is_backup_not_ready());
}

#[test]
fn session_id_sources() {
    let e = A2aEvent::new(
        Kind::StatusUpdate,
        json!({"metadata":{"iac_code":{"pipelineBatch":{"events":[{"x":1},{"iacCodeSessionId":"s3"}]}}}}),
    );
    assert_eq!(e.session_id(), Some("s3"));
}

/// Each captured frame read against the template its predecessor in the same capture
/// leaves: the same answer as read alone, and the captured text deltas of one message
/// do take the template.
#[test]
fn every_captured_frame_reads_the_same_against_the_last_ones_template() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/a2a");
    let mut took = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sse") {
            continue;
        }
        let text = std::fs::read(&path).unwrap();
        let frames: Vec<&[u8]> = text
            .split(|&b| b == b'\n')
            .filter_map(|l| l.trim_ascii().strip_prefix(b"data: "))
            .collect();
        for pair in frames.windows(2) {
            match template_agrees(pair[0], pair[1]) {
                Ok(t) => took += usize::from(t),
                Err(e) => panic!("{}: {e}", path.display()),
            }
        }
    }
    assert!(took >= 10, "{took} captured frames took the template");
}

/// A frame that is the template with another text takes the template whatever the new
/// text holds (escapes, quotes, nothing, more); one that differs anywhere else, or whose
/// text ends before the template's tail, is read alone; every answer is the same as
/// reading alone.
#[test]
fn a_frame_like_the_template_is_read_like_one_on_its_own() {
    let base = r#"{"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"hello"}]}},"metadata":{"iac_code":{"iacCodeSessionId":"s"}}}},"id":"1","jsonrpc":"2.0"}"#;
    let with = |t: &str| base.replace(r#""text":"hello""#, &format!(r#""text":"{t}""#));
    for t in [
        "",
        "h",
        "a much longer text than the template's",
        r#"a \"quoted\" word"#,
        r"line\nbreak \u00e9 \ud83d\ude00 \\",
        r#"ends in a quote\""#,
    ] {
        assert_eq!(
            template_agrees(base.as_bytes(), with(t).as_bytes()),
            Ok(true),
            "{t}"
        );
    }
    for other in [
        // the text closes early and something else follows
        with(r#"a"},{"text":"b"#),
        with(r#"a","x":"b"#),
        // a lone backslash, a control byte, a bad escape, a lone surrogate
        with(r"a\"),
        with("a\u{1}b"),
        with(r"\q"),
        with(r"\udc00"),
        // another message, state or task; more after the end; cut short
        base.replace(r#""messageId":"m""#, r#""messageId":"n""#),
        base.replace("WORKING", "COMPLETED"),
        base.replace(r#""taskId":"t""#, r#""taskId":"u""#),
        // the same length, another shape (a number where a string belongs)
        base.replace(r#""taskId":"t""#, r#""taskId":123"#),
        base.replace(r#""iacCodeSessionId":"s""#, r#""iacCodeSessionId":123"#),
        format!("{base} x"),
        base[..base.len() - 1].to_string(),
        "{}".to_string(),
    ] {
        assert_eq!(
            template_agrees(base.as_bytes(), other.as_bytes()),
            Ok(false),
            "{other}"
        );
    }
    // A template whose other fields needed unescaping, or whose text was joined from
    // parts, is not kept.
    let escaped = base.replace(r#""taskId":"t""#, r#""taskId":"\u0074""#);
    let joined = base.replace(r#"{"text":"hello"}"#, r#"{"text":"he"},{"text":"llo"}"#);
    for prev in [escaped, joined] {
        assert_eq!(template_agrees(prev.as_bytes(), prev.as_bytes()), Ok(false));
        assert_eq!(template_splice(prev.as_bytes(), b"x"), None);
    }
    // The fuzz target's splice puts its bytes between the text's quotes.
    assert_eq!(
        template_splice(base.as_bytes(), br#"x"y"#),
        Some(with(r#"x"y"#).into_bytes())
    );
}

#[test]
fn every_captured_frame_reads_the_same_typed_or_as_a_value() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/a2a");
    let (mut fast, mut all) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sse") {
            continue;
        }
        let text = std::fs::read(&path).unwrap();
        for line in text.split(|&b| b == b'\n') {
            let Some(data) = line.trim_ascii().strip_prefix(b"data: ") else {
                continue;
            };
            all += 1;
            match delta_agrees(data) {
                Ok(true) => fast += 1,
                Ok(false) => {}
                Err(e) => panic!("{}: {e}", path.display()),
            }
        }
    }
    // The captured text deltas all take the typed read; the other frames do not.
    assert!(
        fast >= 20 && fast < all,
        "{fast} of {all} frames read typed"
    );
}

#[test]
fn the_typed_read_leaves_anything_unusual_to_the_value_read() {
    let base = r#"{"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"a\u00e9"},{"text":"b"}]}},"metadata":{"iac_code":{"iacCodeSessionId":"s"}}}},"id":"1","jsonrpc":"2.0"}"#;
    assert_eq!(delta_agrees(base.as_bytes()), Ok(true));
    let Ok(Payload::Event(e)) = Payload::from_delta_frame(base.as_bytes().to_vec()) else {
        panic!()
    };
    assert_eq!(e.status_message().unwrap().text, "a\u{e9}b");
    for odd in [
        // another metadata key, a duplicate key, a non-string id, an error beside the
        // result, a non-object part, an artifact: all read as a Value.
        base.replace(
            r#""iacCodeSessionId":"s""#,
            r#""iacCodeSessionId":"s","usage":{}"#,
        ),
        base.replace(r#""taskId":"t""#, r#""taskId":"t","taskId":"u""#),
        base.replace(r#""taskId":"t""#, r#""taskId":7"#),
        base.replace(r#""id":"1""#, r#""id":1"#),
        base.replace(r#""id":"1""#, r#""id":"1","error":{"code":1}"#),
        base.replace(r#"{"text":"b"}"#, r#""b""#),
        base.replace(r#""statusUpdate""#, r#""artifactUpdate""#),
    ] {
        assert_eq!(delta_agrees(odd.as_bytes()), Ok(false), "{odd}");
    }
    // Nulls and empty strings mean what they mean to the Value read.
    for same in [
        base.replace(r#""taskId":"t""#, r#""taskId":null"#),
        base.replace(r#""messageId":"m""#, r#""messageId":"""#),
        base.replace(r#""role":"ROLE_AGENT""#, r#""role":null"#),
        base.replace(
            r#""metadata":{"iac_code":{"iacCodeSessionId":"s"}}"#,
            r#""metadata":null"#,
        ),
    ] {
        assert_eq!(delta_agrees(same.as_bytes()), Ok(true), "{same}");
    }
}

#[test]
fn integers_accept_integral_floats_only() {
    let v: Value = serde_json::from_str(r#"[7, 7.0, 7.5, true, "7", 1e3, -0.0]"#).unwrap();
    let got: Vec<Option<i64>> = v.as_array().unwrap().iter().map(as_int).collect();
    assert_eq!(
        got,
        [Some(7), Some(7), None, None, None, Some(1000), Some(0)]
    );
}
