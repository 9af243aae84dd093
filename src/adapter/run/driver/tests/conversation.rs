//! A run's part of its thread's stored conversation (feature `threads`): kept at its end, and
//! a run whose part cannot be written fails closed.

use super::*;

impl MemStore {
    /// The thread's stored conversation, as a page shows it.
    fn transcript(&self, key: &ThreadKey) -> Option<crate::conversation::Transcript> {
        let c = crate::store::conversations::Conversations::new(
            self.files.clone(),
            crate::conversation::Bounds::default(),
        );
        c.transcript(key, &|_| crate::store::index::Status::Idle)
            .unwrap()
    }
}

/// A harness whose kernel streams `frames` for one turn, and whose conversation writes fail
/// after the turn's admission when `full` (a disk that fills up during the run).
fn one_turn(full: bool, frames: Vec<Value>) -> Harness {
    let h = Harness::new();
    if full {
        *lock(&h.store.files.writes_left) = Some(1);
    }
    h.script(vec![("SendStreamingMessage", Answer::Stream(frames))]);
    h
}

fn hello_turn(full: bool) -> Harness {
    let done = status("TASK_STATE_COMPLETED", json!({}));
    one_turn(
        full,
        vec![task("TASK_STATE_SUBMITTED"), text("Hello"), done],
    )
}

#[test]
fn a_runs_conversation_is_kept_with_its_user_message() {
    let h = hello_turn(false);
    let ev = h.run(h.body("r1", "hi", None));
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    let t = h.store.transcript(&ThreadKey::shared(THREAD)).unwrap();
    let roles: Vec<&str> = t
        .messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(t.messages[0]["id"], "m-r1");
    assert_eq!(t.messages[1]["id"], ev[2]["messageId"]);
    assert_eq!(t.messages[1]["content"], "Hello");
}

#[test]
fn a_conversation_that_cannot_be_written_fails_the_run_closed() {
    let h = hello_turn(true);
    let ev = h.run(h.body("r1", "hi", None));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    assert_eq!(last(&ev)["code"], "STATE_PERSISTENCE_FAILED");
    // An interrupt is not announced either; it stays pending for a resume.
    let input = json!({"iacCodeSessionId": "sess-1", "input": permission("p1")});
    let paused = status("TASK_STATE_INPUT_REQUIRED", input);
    let h = one_turn(true, vec![task("TASK_STATE_SUBMITTED"), paused]);
    let ev = h.run(h.body("r1", "hi", None));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    assert_eq!(h.doc().execution.pending.len(), 1);
}
