//! A thread's conversation as an append-only log of JSON lines: what each turn did, in the
//! order it happened, so that a turn costs one append (not a rewrite of the whole
//! conversation) and what was appended before a crash is still there after it.
//!
//! ```text
//! {"schemaVersion":2,"threadId":"t","createdAt":1700000000000}      the header, first
//! {"at":…,"run":"r1","input":[…messages…]}                          a turn admitted
//! {"at":…,"run":"r1","ops":[…]}                                     its end (`Ops`)
//! {"at":…,"run":"r2","cut":true}                                    a turn a stop cut off
//! {"at":…,"snapshot":{"dropped":0,"droppedIds":[],"messages":[…]}}  a compaction's base
//! ```
//!
//! A turn whose input has no end is *open*: running now, or cut off by a stop (the store
//! says which, at its first read after a restart, and appends the cut). A last line without
//! its newline is a write the crash interrupted: it is not read, and the next append
//! replaces it. Any other line that does not read refuses the log whole.

use serde_json::{Value, json};

use super::transcript::{self, Bounds, ConversationError, Ops, Transcript};

/// The log's format version (the whole-file form was 1).
pub const LOG_SCHEMA: u64 = 2;

/// Ids of the markers of turns cut off by a stop: this, then the run id.
pub const CUT_ID_PREFIX: &str = "iac-agui-turn-cut-";

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The first line of a new log.
pub fn header(thread_id: &str, created_at: u64) -> Vec<u8> {
    line(&json!({"schemaVersion": LOG_SCHEMA, "threadId": thread_id, "createdAt": created_at}))
}

/// A turn admitted: the request's new messages (already without image bytes).
pub fn input(at: u64, run_id: &str, messages: &[Value]) -> Vec<u8> {
    line(&json!({"at": at, "run": run_id, "input": messages}))
}

/// A turn's end: what its events did to the conversation.
pub fn end(at: u64, run_id: &str, ops: &Ops) -> Vec<u8> {
    line(&json!({"at": at, "run": run_id, "ops": ops.to_json()}))
}

/// The title a person gave the thread (`None`: back to the first message's).
pub fn title(at: u64, title: Option<&str>) -> Vec<u8> {
    line(&json!({"at": at, "title": title}))
}

/// A turn a stop cut off (found open after a restart).
pub fn cut(at: u64, run_id: &str) -> Vec<u8> {
    line(&json!({"at": at, "run": run_id, "cut": true}))
}

/// A whole log holding `t` as it is: the header and one snapshot (a compaction, a
/// migration from the whole-file form).
pub fn snapshot(t: &Transcript) -> Vec<u8> {
    let mut out = header(&t.thread_id, t.created_at);
    let mut snap = json!({
        "dropped": t.dropped,
        "droppedIds": t.dropped_ids,
        "messages": t.messages,
    });
    if let Some(title) = &t.renamed {
        snap["title"] = json!(title);
    }
    out.extend(line(&json!({"at": t.updated_at, "snapshot": snap})));
    out
}

/// What a log replays to.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    /// Every record applied, not yet bounded: the next record applies to this, and the
    /// bounds come last, so that a turn's end computed in memory is what a later replay of
    /// the log gives.
    pub transcript: Transcript,
    /// Turns admitted and not ended, oldest first.
    pub open: Vec<String>,
    /// Bytes of whole lines (an append goes here; a torn last line is past it). 0: the log
    /// has not even a whole header, and is as good as absent.
    pub complete: u64,
}

impl Replayed {
    /// The conversation as a page or a listing shows it, and the bytes of JSON it holds
    /// (what a compaction would write, about).
    pub fn bounded(&self, bounds: Bounds) -> (Transcript, u64) {
        let mut t = self.transcript.clone();
        t.bound(bounds);
        let held = t.messages.iter().map(transcript::json_len).sum::<usize>() as u64;
        (t, held)
    }
}

/// The message that stands for a turn a stop cut off.
pub fn cut_marker(run_id: &str) -> Value {
    json!({"id": format!("{CUT_ID_PREFIX}{run_id}"), "role": "system",
        "content": "[this turn was cut off: the server stopped before it ended]"})
}

fn damaged(what: &'static str) -> ConversationError {
    ConversationError::Foreign(what)
}

/// Replay a log of thread `thread_id`.
pub fn replay(bytes: &[u8], thread_id: &str) -> Result<Replayed, ConversationError> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut lines = bytes[..complete].split(|&b| b == b'\n');
    let mut t = Transcript::new(thread_id, 0);
    let mut open: Vec<String> = Vec::new();
    let head = lines.next().filter(|l| !l.is_empty());
    let Some(head) = head else {
        return Ok(Replayed {
            transcript: t,
            open,
            complete: 0,
        });
    };
    let v: Value =
        serde_json::from_slice(head).map_err(|e| ConversationError::Json(e.to_string()))?;
    match v.get("schemaVersion").and_then(Value::as_u64) {
        Some(LOG_SCHEMA) => {}
        Some(n) if n > LOG_SCHEMA => return Err(ConversationError::Future(n)),
        _ => return Err(damaged("no known schemaVersion")),
    }
    if v.get("threadId").and_then(Value::as_str) != Some(thread_id) {
        return Err(damaged("another thread's"));
    }
    t.created_at = v
        .get("createdAt")
        .and_then(Value::as_u64)
        .ok_or(damaged("no createdAt"))?;
    t.updated_at = t.created_at;
    for l in lines.filter(|l| !l.is_empty()) {
        let r: Value =
            serde_json::from_slice(l).map_err(|e| ConversationError::Json(e.to_string()))?;
        apply(&mut t, &mut open, &r).ok_or(damaged("a record is not one this server writes"))?;
    }
    Ok(Replayed {
        transcript: t,
        open,
        complete: complete as u64,
    })
}

fn apply(t: &mut Transcript, open: &mut Vec<String>, r: &Value) -> Option<()> {
    let at = r.get("at")?.as_u64()?;
    // A rename is no activity: the thread keeps its place in listings and its retention.
    if let Some(title) = r.get("title") {
        t.renamed = match title {
            Value::Null => None,
            v => Some(v.as_str()?.to_string()),
        };
        return Some(());
    }
    t.updated_at = t.updated_at.max(at);
    if let Some(s) = r.get("snapshot") {
        let ids = s.get("droppedIds")?.as_array()?;
        t.dropped = s.get("dropped")?.as_u64()?;
        t.dropped_ids = ids
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<_>>()?;
        let messages = s.get("messages")?.as_array()?;
        if !messages.iter().all(transcript::is_message) {
            return None;
        }
        t.messages = messages.clone();
        t.renamed = match s.get("title") {
            None => None,
            Some(v) => Some(v.as_str()?.to_string()),
        };
        open.clear();
        return Some(());
    }
    let run = r.get("run")?.as_str()?;
    let close = |open: &mut Vec<String>| open.retain(|o| o != run);
    if let Some(input) = r.get("input") {
        t.add_input(input.as_array()?);
        if !open.iter().any(|o| o == run) {
            open.push(run.to_string());
        }
    } else if let Some(ops) = r.get("ops") {
        t.apply(&Ops::from_json(ops)?, run);
        close(open);
    } else if r.get("cut") == Some(&Value::Bool(true)) {
        if open.iter().any(|o| o == run) {
            t.messages.push(cut_marker(run));
        }
        close(open);
    } else {
        return None;
    }
    Some(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::agui::events::Event;

    pub(crate) fn user(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "content": text})
    }

    /// A run's ops: one assistant message with `text`.
    pub(crate) fn answer(id: &str, text: &str) -> Ops {
        let mut o = Ops::default();
        o.record(&Event::TextStart {
            message_id: id.into(),
        });
        o.record(&Event::TextContent {
            message_id: id.into(),
            delta: text.into(),
        });
        o
    }

    #[test]
    fn a_log_replays_its_turns_in_order_and_knows_the_open_one() {
        let mut log = header("t", 10);
        log.extend(input(11, "r1", &[user("u1", "hello")]));
        log.extend(end(12, "r1", &answer("a1", "hi!")));
        log.extend(input(13, "r2", &[user("u2", "more")]));
        let r = replay(&log, "t").unwrap();
        assert_eq!(r.open, ["r2"]);
        assert_eq!(r.complete, log.len() as u64);
        let t = &r.transcript;
        assert_eq!((t.created_at, t.updated_at), (10, 13));
        let ids: Vec<&str> = t
            .messages
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["u1", "a1", "u2"]);
        assert_eq!(t.messages[1]["content"], "hi!");
    }

    #[test]
    fn a_torn_last_line_is_not_read_and_a_damaged_one_refuses_the_log() {
        let mut log = header("t", 1);
        log.extend(input(2, "r1", &[user("u1", "hello")]));
        let whole = log.len();
        log.extend_from_slice(b"{\"at\":3,\"run\":\"r1\",\"op");
        let r = replay(&log, "t").unwrap();
        assert_eq!(r.complete, whole as u64);
        assert_eq!(r.open, ["r1"]);
        // A torn header: as good as no log.
        assert_eq!(replay(b"{\"schemaVer", "t").unwrap().complete, 0);
        let mut bad = log[..whole].to_vec();
        bad.extend_from_slice(b"{\"at\":3,\"run\":\"r1\",\"ops\":[[\"nope\"]]}\n");
        assert!(replay(&bad, "t").is_err());
        assert!(matches!(
            replay(&log, "other"),
            Err(ConversationError::Foreign(_))
        ));
        let future = String::from_utf8(log.clone())
            .unwrap()
            .replace("\"schemaVersion\":2", "\"schemaVersion\":3");
        assert_eq!(
            replay(future.as_bytes(), "t"),
            Err(ConversationError::Future(3))
        );
    }

    #[test]
    fn a_cut_turn_keeps_its_message_and_gets_a_marker() {
        let mut log = header("t", 1);
        log.extend(input(2, "r1", &[user("u1", "hello")]));
        log.extend(cut(3, "r1"));
        let r = replay(&log, "t").unwrap();
        assert!(r.open.is_empty());
        let m = &r.transcript.messages;
        assert_eq!(m[0], user("u1", "hello"));
        assert_eq!(m[1]["id"], format!("{CUT_ID_PREFIX}r1"));
        assert_eq!(m[1]["role"], "system");
        // A cut of a turn that ended is no marker.
        let mut ended = header("t", 1);
        ended.extend(input(2, "r1", &[user("u1", "hello")]));
        ended.extend(end(3, "r1", &Ops::default()));
        ended.extend(cut(4, "r1"));
        assert_eq!(replay(&ended, "t").unwrap().transcript.messages.len(), 1);
    }

    #[test]
    fn a_rename_is_kept_through_a_snapshot_and_moves_nothing() {
        let mut log = header("t", 1);
        log.extend(input(5, "r1", &[user("u1", "hello there")]));
        log.extend(title(9, Some("My thread")));
        let t = replay(&log, "t").unwrap().transcript;
        assert_eq!((t.title(), t.updated_at), ("My thread".to_string(), 5));
        let again = replay(&snapshot(&t), "t").unwrap().transcript;
        assert_eq!(again.title(), "My thread");
        log.extend(title(10, None));
        assert_eq!(replay(&log, "t").unwrap().transcript.title(), "hello there");
    }

    #[test]
    fn a_snapshot_replaces_what_came_before_and_keeps_the_dropped_ids() {
        let mut t = Transcript::new("t", 5);
        for i in 0..6 {
            t.add_input(&[user(&format!("u{i}"), "x")]);
        }
        let small = Bounds {
            max_messages: 3,
            max_bytes: 1 << 20,
        };
        t.bound(small);
        t.updated_at = 9;
        let mut log = snapshot(&t);
        log.extend(input(10, "r9", &[user("u0", "x"), user("u9", "new")]));
        let (t2, _) = replay(&log, "t").unwrap().bounded(small);
        assert_eq!(t2.dropped, 4, "u0..u2, then u3 for u9");
        let ids: Vec<&str> = t2
            .messages
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        // u0 was dropped: restated, it does not come back.
        assert_eq!(ids, [crate::conversation::TRIMMED_ID, "u4", "u5", "u9"]);
        assert!(t2.dropped_ids.iter().any(|d| d == "u0"));
    }
}
