//! A Stop is carried out whatever it meets (issue 56): the two windows where one was
//! answered `cancelled` and lost, each made to happen on purpose — a thread held at a named
//! point (`crate::sync::Points`) while the other goes through — instead of hoped for.

use super::*;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// What the cancel route answers for the thread's current execution, called as a client
/// that read the execution id (from a `409 THREAD_BUSY` body, a thread listing) would.
fn stop(sh: &Shared, doc: &ThreadDoc) -> (u16, Value) {
    let body =
        json!({"threadId": THREAD, "rosInvocationId": doc.execution.ros_invocation_id}).to_string();
    let exec = doc.execution.execution_id.clone();
    let req = crate::app::CancelRequest::parse(exec, body.as_bytes(), Lang::En).unwrap();
    let r = crate::adapter::routes::cancel::cancel(sh, req);
    (r.status, serde_json::from_slice(&r.body).unwrap())
}

/// Window 1: admission made the execution findable (state saved, live index) and the Stop
/// came before the run's control existed: it found nothing to claim, answered `cancelled`,
/// and the run went on to the end. The run's cell is registered under the thread's lock with
/// the save that names the execution, so a Stop right after finds it.
#[test]
fn a_stop_right_after_admission_committed_stops_the_run() {
    let h = Harness::new();
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        text("the whole answer"),
        status(
            "TASK_STATE_COMPLETED",
            json!({"iacCodeSessionId": "sess-1"}),
        ),
    ]);
    let sh = h.backend.shared.clone();
    let committed = sh.points.arm("admission.committed");
    std::thread::scope(|s| {
        let run = s.spawn(|| h.run(h.body("r1", "go", None)));
        assert!(committed.reached(WAIT), "admission never committed");
        let (status, answer) = stop(&sh, &h.doc());
        assert_eq!((status, &answer["status"]), (200, &json!("cancelled")));
        committed.release();
        let ev = run.join().unwrap();
        assert_eq!(last(&ev)["code"], "CANCELLED", "{ev:?}");
    });
    // Cancelled before its first kernel call: no task was started for a stopped run.
    assert!(!h.calls().contains(&"SendStreamingMessage".to_string()));
    let doc = h.doc();
    assert!(doc.terminal.contains(&doc.execution.execution_id));
}

/// Window 2: the route decided under the thread's lock that no task was named yet, and
/// published "cancel it when it is named" after releasing the lock; in between, the run saved
/// the task id (into the execution the route had just retired, which it also put back in
/// the live index) and checked the flag, not yet set. Neither looked again: `cancelled` was
/// answered and the task ran to its end. Now the claim's outcome is published under the lock
/// and the naming is one more event of the run's cell: whichever comes second cancels.
#[test]
fn a_stop_whose_publication_straddles_the_tasks_naming_still_cancels_the_task() {
    let h = Harness::new();
    h.script(vec![
        (
            "SendStreamingMessage",
            Answer::Stream(vec![
                task("TASK_STATE_SUBMITTED"),
                text("the whole answer"),
                status(
                    "TASK_STATE_COMPLETED",
                    json!({"iacCodeSessionId": "sess-1"}),
                ),
            ]),
        ),
        (
            "CancelTask",
            Answer::Json(rpc_result(
                json!({"task": snapshot("TASK_STATE_CANCELED", json!({}))}),
            )),
        ),
    ]);
    let shared = h.backend.shared.clone();
    let sh = &*shared;
    let noted = sh.points.arm("run.task_noted");
    let saved = sh.points.arm("run.task_saved");
    let published = sh.points.arm("cancel.published");
    std::thread::scope(|s| {
        let run = s.spawn(|| h.run(h.body("r1", "go", None)));
        // The kernel named the task; the run has not saved it yet.
        assert!(noted.reached(WAIT), "the task was never named");
        let doc = h.doc();
        assert_eq!(doc.execution.task_id, None);
        let route = s.spawn(move || stop(sh, &doc));
        // The route saved its claim (no task id in the state) and is past its lock.
        assert!(published.reached(WAIT), "the route never published");
        // Now the run saves the task id and learns of the Stop.
        noted.release();
        assert!(saved.reached(WAIT), "the run never saved its task");
        saved.release();
        published.release();
        let (status, answer) = route.join().unwrap();
        assert_eq!((status, &answer["status"]), (200, &json!("cancelled")));
        let ev = run.join().unwrap();
        assert_eq!(last(&ev)["code"], "CANCELLED", "{ev:?}");
    });
    let cancels: Vec<Value> = lock(&h.kernel.calls)
        .iter()
        .filter(|(m, _)| m == "CancelTask")
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(cancels, [json!("task-1")], "the task is cancelled, once");
    // The retired execution keeps no task id, and is not findable again.
    let doc = h.doc();
    assert!(doc.terminal.contains(&doc.execution.execution_id));
    assert_eq!(doc.execution.task_id, None);
    assert_eq!(sh.registry.live_thread(&doc.execution.execution_id), None);
}
