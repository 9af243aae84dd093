use super::*;

/// A text stream's frames take the typed ways (the first in full, then against it), any
/// other shape is given back for the `Value` read, and a frame whose text needed unescaping
/// is read in full but not kept as the next one's template.
#[test]
fn each_frame_is_read_the_cheapest_way_that_takes_it() {
    let delta = |t: &str| {
        format!(
            r#"{{"result":{{"statusUpdate":{{"taskId":"t","contextId":"c","status":{{"state":"TASK_STATE_WORKING","message":{{"messageId":"m","role":"ROLE_AGENT","parts":[{{"text":"{t}"}}]}}}}}}}},"id":"1","jsonrpc":"2.0"}}"#
        )
    };
    let task = r#"{"result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_SUBMITTED"}}},"id":"1","jsonrpc":"2.0"}"#;
    let mut r = FrameReader::default();
    let mut way = |f: &str| r.typed(f.as_bytes().to_vec()).map(|(w, _)| w).ok();
    assert_eq!(way(&delta("a")), Some(Way::Delta));
    assert_eq!(way(&delta("bb")), Some(Way::Template));
    assert_eq!(way(task), None);
    assert_eq!(way(&delta(r"\u0063")), Some(Way::Template));
    assert_eq!(way(&delta("d")), Some(Way::Template));
    let mut r = FrameReader::default();
    let mut way = |f: &str| r.typed(f.as_bytes().to_vec()).map(|(w, _)| w).ok();
    let escaped = |t: &str| delta(t).replace(r#""t""#, r#""\u0074""#);
    assert_eq!(way(&escaped("c")), Some(Way::Delta));
    assert_eq!(
        way(&escaped("d")),
        Some(Way::Delta),
        "a frame with escapes is no template"
    );
    // Whatever no typed way takes is the `Value` read's, which reads it the same.
    let Ok(Payload::Event(e)) = value_read(task.as_bytes()) else {
        panic!("a task")
    };
    assert_eq!(e.task_id(), Some("t"));
    assert!(value_read(b"{").is_err());
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
    let Ok((Way::Delta, Payload::Event(e))) =
        FrameReader::default().typed(base.as_bytes().to_vec())
    else {
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
