//! How runs end when a save fails, a cancel races the kernel, or an answer is refused.

use super::*;

/// Saves of a document that knows its task id fail (admission itself succeeds).
struct FailOnTask(Arc<MemStore>);

impl ThreadStore for FailOnTask {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        self.0.load(key)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        if doc.execution.task_id.is_some() {
            return Err(StoreError::Io(std::io::Error::other("disk full (test)")));
        }
        self.0.save(doc)
    }
}

/// Saves that retire the current execution fail (the run's end cannot be written).
struct FailOnRetire(Arc<MemStore>);

impl ThreadStore for FailOnRetire {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        self.0.load(key)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        if doc.terminal.contains(&doc.execution.execution_id) {
            return Err(StoreError::Io(std::io::Error::other("disk full (test)")));
        }
        self.0.save(doc)
    }
}

/// Regression (second red-team, fault 6): the terminal save's failure was only logged and
/// the client was told the run succeeded.
#[test]
fn a_run_whose_end_cannot_be_saved_is_not_reported_a_success() {
    let mem = Arc::new(MemStore::default());
    let h = Harness::with(mem.clone(), Arc::new(FailOnRetire(mem)), None);
    let done = status("TASK_STATE_COMPLETED", json!({}));
    h.script(vec![(
        "SendStreamingMessage",
        Answer::Stream(vec![task("TASK_STATE_SUBMITTED"), text("Hello"), done]),
    )]);
    let ev = h.run(h.body("r1", "hi", None));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    assert_eq!(last(&ev)["code"], "STATE_PERSISTENCE_FAILED");
}

#[test]
fn a_task_mapping_that_cannot_be_saved_fails_closed() {
    let mem = Arc::new(MemStore::default());
    let h = Harness::with(mem.clone(), Arc::new(FailOnTask(mem)), None);
    h.script(vec![
        (
            "SendStreamingMessage",
            Answer::Stream(vec![
                task("TASK_STATE_SUBMITTED"),
                text("secret plan"),
                status("TASK_STATE_COMPLETED", json!({})),
            ]),
        ),
        (
            "CancelTask",
            Answer::Json(rpc_result(
                json!({"task": snapshot("TASK_STATE_CANCELED", json!({}))}),
            )),
        ),
    ]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(types(&ev), ["RUN_STARTED", "CUSTOM", "RUN_ERROR"]);
    assert_eq!(last(&ev)["code"], "STATE_PERSISTENCE_FAILED");
    // Nothing the kernel said was revealed (the session event shows only what was saved),
    // and its task was cancelled.
    assert_eq!(ev[1]["value"]["taskId"], Value::Null);
    assert_eq!(h.call("CancelTask"), json!("task-1"));
    assert_eq!(h.doc().execution.task_id, None);
}

#[test]
fn an_unreachable_kernel_is_one_run_error() {
    let h = Harness::new();
    h.script(vec![("SendStreamingMessage", Answer::Down)]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(types(&ev), ["RUN_STARTED", "CUSTOM", "RUN_ERROR"]);
    assert_eq!(last(&ev)["code"], "A2A_UNAVAILABLE");
}

/// When the first `SendStreamingMessage` arrives, do `f` to every live run's cell (what
/// the cancel route does, at that exact moment).
fn on_first_send_to_each_run(h: &Harness, f: fn(&crate::life::Cell)) {
    let shared = Arc::downgrade(&h.backend.shared);
    *lock(&h.kernel.on_first_send) = Some(Box::new(move || {
        if let Some(sh) = shared.upgrade() {
            for c in lock(&sh.runs).values() {
                f(c);
            }
        }
    }));
}

#[test]
fn a_cancel_requested_before_the_task_id_cancels_the_task_when_it_appears() {
    let h = Harness::new();
    // The cancel route asks while `SendStreamingMessage` has not named a task yet.
    on_first_send_to_each_run(&h, |c| {
        use crate::life::{Effect, Event};
        assert!(c.send(Event::Cancel).has(Effect::CancelClaimed));
        c.send(Event::CancelSaved);
    });
    h.script(vec![
        (
            "SendStreamingMessage",
            Answer::Stream(vec![
                task("TASK_STATE_SUBMITTED"),
                status("TASK_STATE_CANCELED", json!({"iacCodeSessionId": "sess-1"})),
            ]),
        ),
        (
            "CancelTask",
            Answer::Json(rpc_result(
                json!({"task": snapshot("TASK_STATE_CANCELED", json!({}))}),
            )),
        ),
    ]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(last(&ev)["code"], "CANCELLED", "{ev:?}");
    assert_eq!(h.calls(), ["SendStreamingMessage", "CancelTask"]);
    let doc = h.doc();
    assert!(doc.terminal.contains(&doc.execution.execution_id));
}

#[test]
fn a_cancel_that_wins_the_race_with_the_last_kernel_event_ends_the_run_cancelled() {
    // Regression (red team): the cancel route answered `cancelled` while the stream ended
    // `RUN_FINISHED` success. The route claims the end here just before the kernel's
    // completion arrives; the run must then end cancelled, as the route said.
    let h = Harness::new();
    on_first_send_to_each_run(&h, |c| {
        use crate::life::{Effect, Event};
        assert!(c.send(Event::Cancel).has(Effect::CancelClaimed));
    });
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        status(
            "TASK_STATE_COMPLETED",
            json!({"iacCodeSessionId": "sess-1"}),
        ),
    ]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    assert_eq!(last(&ev)["code"], "CANCELLED", "{ev:?}");
}

/// The first save that retires an execution fails (a disk full for a moment).
struct FailFirstRetire(Arc<MemStore>, std::sync::atomic::AtomicBool);

impl ThreadStore for FailFirstRetire {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        self.0.load(key)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        if doc.terminal.contains(&doc.execution.execution_id)
            && !self.1.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(StoreError::Io(std::io::Error::other("disk full (test)")));
        }
        self.0.save(doc)
    }
}

/// Regression (outside review of issue 36, fault 6): a cancel whose save failed answered an
/// error but kept its claim on the run's end, so the run, which went on, ended `CANCELLED`
/// although the client had been told the cancel failed.
#[test]
fn a_cancel_whose_save_fails_leaves_the_run_to_end_on_its_own() {
    let mem = Arc::new(MemStore::default());
    let store = Arc::new(FailFirstRetire(mem.clone(), Default::default()));
    let h = Harness::with(mem.clone(), store, None);
    let shared = Arc::downgrade(&h.backend.shared);
    let answers = Arc::new(Mutex::new(Vec::new()));
    let seen = answers.clone();
    *lock(&h.kernel.on_first_send) = Some(Box::new(move || {
        let Some(sh) = shared.upgrade() else { return };
        let runs: Vec<String> = lock(&sh.runs).keys().cloned().collect();
        let ros = lock(&mem.docs)
            .get(&ThreadKey::shared(THREAD))
            .map(|d| d.execution.ros_invocation_id.clone())
            .unwrap();
        for exec in runs {
            let body = json!({"threadId": THREAD, "rosInvocationId": ros}).to_string();
            let req = crate::app::CancelRequest::parse(exec, body.as_bytes(), Lang::En).unwrap();
            lock(&seen).push(crate::adapter::routes::cancel::cancel(&sh, req).status);
        }
    }));
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        text("Hello"),
        status("TASK_STATE_COMPLETED", json!({})),
    ]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(*lock(&answers), [503], "the cancel could not be saved");
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{ev:?}");
    assert_eq!(last(&ev)["outcome"]["type"], "success");
}

fn allow(id: &str) -> Value {
    json!([{"interruptId": id, "status": "resolved", "payload": {"decision": "allow_once"}}])
}

/// A resume of the paused `p1` whose answer gets `send` from the kernel.
fn resume_p1_with(h: &Harness, send: Answer) {
    let mut script =
        resume_preamble(json!({"iacCodeSessionId": "sess-1", "input": permission("p1")}));
    script.push(("SendStreamingMessage", send));
    h.script(script);
}

fn not_active() -> Answer {
    Answer::Json(
        json!({"error": {"code": -32001, "message": "Task task-1 is not active"}, "id": "x", "jsonrpc": "2.0"}),
    )
}

#[test]
fn an_answer_whose_acceptance_was_not_seen_stays_in_doubt() {
    // The stop came while the kernel's answer was awaited (SIGTERM, a crash): the answer may
    // have been delivered, and the thread file says so.
    let h = Harness::new();
    interrupted_first_run(&h, permission("p1"));
    resume_p1_with(&h, Answer::Down);
    let ev = h.run(h.body("r2", "", Some(allow("p1"))));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    let doc = h.doc();
    let key = (doc.execution.execution_id.clone(), "p1".to_string());
    assert!(doc.in_doubt.contains_key(&key), "{:?}", doc.in_doubt);
    assert!(!doc.applied.contains_key(&key));
    assert_eq!(doc.execution.pending.len(), 1, "still answerable");
}

#[test]
fn a_retry_of_an_answer_the_kernel_already_had_follows_the_task_instead_of_failing() {
    // Regression (red team): after a SIGTERM mid-resume and a restart, the retry sent the
    // answer again and failed A2A_EXECUTION_FAILED ("Task … is not active"), sometimes after
    // the tool had run. The retry must not fail and must not deliver the answer twice.
    let h = Harness::new();
    interrupted_first_run(&h, permission("p1"));
    resume_p1_with(&h, Answer::Down);
    h.run(h.body("r2", "", Some(allow("p1"))));
    resume_p1_with(&h, not_active());
    h.script(vec![(
        "GetTask",
        Answer::Json(rpc_result(json!({"task": snapshot(
            "TASK_STATE_INPUT_REQUIRED", json!({"iacCodeSessionId": "sess-1"}))}))),
    )]);
    let ev = h.run(h.body("r3", "", Some(allow("p1"))));
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{ev:?}");
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    let sends = h
        .calls()
        .iter()
        .filter(|c| c.as_str() == "SendStreamingMessage")
        .count();
    assert_eq!(
        sends, 3,
        "first run, the lost try, the retry: never a fourth"
    );
    let doc = h.doc();
    let key = (doc.execution.execution_id.clone(), "p1".to_string());
    assert!(doc.applied.contains_key(&key));
    assert!(doc.in_doubt.is_empty());
    assert!(doc.execution.pending.is_empty());
}

#[test]
fn a_first_answer_the_kernel_refuses_is_not_taken_for_delivered() {
    let h = Harness::new();
    interrupted_first_run(&h, permission("p1"));
    resume_p1_with(&h, not_active());
    let ev = h.run(h.body("r2", "", Some(allow("p1"))));
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{ev:?}");
    let doc = h.doc();
    assert!(doc.in_doubt.is_empty(), "a refusal is no doubt");
    assert!(doc.applied.is_empty());
}
