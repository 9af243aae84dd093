//! Runs that outlive their connection (issue 13): the replay log, the subscribe route in
//! replay and snapshot modes, the disconnect grace, and its errors.

use crate::common;

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::Write;
use std::time::Duration;

use common::*;
use iac_agui::adapter::Shared;
use iac_agui::server::ServerConfig;
use serde_json::{Value, json};

fn stack(tune: fn(Shared) -> Shared) -> Stack {
    Stack::lingering(Duration::ZERO, tune)
}

fn grace(secs: u64) -> impl Fn(Shared) -> Shared {
    move |s: Shared| s.with_detach(Duration::from_secs(secs), Default::default())
}

fn grace_2(s: Shared) -> Shared {
    grace(2)(s)
}

fn grace_10(s: Shared) -> Shared {
    grace(10)(s)
}

const PACED: &str = "pace 40 20";

fn subscribe_path(exec: &str) -> String {
    format!("/extensions/iac-code/v1/executions/{exec}/subscribe")
}

/// POST a subscribe request; the raw response.
fn subscribe(s: &Stack, exec: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    post_json(
        s.addr(),
        &subscribe_path(exec),
        &h,
        &serde_json::to_vec(body).unwrap(),
    )
}

fn ids_body(thread: &str, run: &str) -> Value {
    json!({"threadId": thread, "runId": run, "rosInvocationId": "ros-1"})
}

/// Read whole chunks until at least `n` events arrived, then drop the connection. The raw
/// bytes read (whole events only) and the session event.
fn read_then_drop(mut r: Reader, n: usize) -> (Vec<u8>, Value) {
    let mut raw = Vec::new();
    while sse_events(&raw).0.len() < n {
        raw.extend(r.chunk().expect("the stream goes on"));
    }
    let _ = r.sock.shutdown(std::net::Shutdown::Both);
    let session = sse_events(&raw)
        .0
        .into_iter()
        .find(|e| e["name"] == "iac-code.session.v1")
        .expect("session event before the drop");
    (raw, session)
}

/// An event without what differs between two runs of one script: timestamps and the ids
/// the adapter or the kernel generate.
fn shape(e: &Value) -> Value {
    let mut e = e.clone();
    if let Some(o) = e.as_object_mut() {
        o.remove("timestamp");
        for k in ["threadId", "runId", "messageId", "value"] {
            if o.contains_key(k) {
                o.insert(k.into(), json!("…"));
            }
        }
        // The paced script stamps each delta with the kernel's clock: `N@micros`.
        if let Some(Value::String(d)) = o.get_mut("delta")
            && let Some(i) = d.find('@')
        {
            d.truncate(i);
        }
    }
    e
}

fn shapes(events: &[Value]) -> Vec<Value> {
    events.iter().map(shape).collect()
}

fn last_id(raw: &[u8]) -> u64 {
    sse_ids(raw).into_iter().flatten().last().unwrap()
}

/// (events before the drop) + (events after re-attaching) == the undisturbed stream.
fn replay_is_exact(header: bool) {
    let s = stack(grace_10);
    let reference = s.run(&s.body("ref", "r0", PACED));
    let thread = if header { "hdr" } else { "body" };
    let r = s.open_stream(&s.body(thread, "r1", PACED));
    let (before, session) = read_then_drop(r, 12);
    let exec = session["value"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = last_id(&before);
    let (body, headers) = if header {
        let id = seen.to_string();
        let resp = subscribe(
            &s,
            &exec,
            &ids_body(thread, "r1"),
            &[("Last-Event-ID", &id)],
        );
        (ids_body(thread, "r1"), resp)
    } else {
        let mut b = ids_body(thread, "r1");
        b["afterSequence"] = json!(seen);
        let resp = subscribe(&s, &exec, &b, &[]);
        (b, resp)
    };
    let _ = body;
    let after = headers;
    assert_eq!(after.status, 200, "{}", after.text());
    assert_eq!(
        sse_ids(&after.body)[0],
        Some(seen + 1),
        "replay starts after it"
    );
    let mut all = before.clone();
    all.extend_from_slice(&after.body);
    check_ids(&all).unwrap();
    let (events, _) = sse_events(&all);
    check_stream(&events).unwrap();
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count(),
        1
    );
    assert_eq!(shapes(&events), shapes(&reference));
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}

#[test]
fn replay_with_last_event_id_continues_the_stream_exactly() {
    replay_is_exact(true);
}

#[test]
fn replay_with_after_sequence_in_the_body_continues_the_stream_exactly() {
    replay_is_exact(false);
}

#[test]
fn replaying_an_ended_run_gives_the_rest_and_its_one_terminal_event() {
    let s = stack(grace_2);
    let events = s.run(&s.body("ended", "r1", "hello"));
    let exec = session_event(&events)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut b = ids_body("ended", "r1");
    b["afterSequence"] = json!(-1);
    let all = subscribe(&s, &exec, &b, &[]);
    assert_eq!(all.status, 200);
    let (replayed, _) = sse_events(&all.body);
    assert_eq!(replayed, events, "byte for byte the same events");
    b["afterSequence"] = json!(events.len() as u64 - 2);
    let tail = subscribe(&s, &exec, &b, &[]);
    let (tail, _) = sse_events(&tail.body);
    assert_eq!(types(&tail), ["RUN_FINISHED"]);
}

#[test]
#[cfg(feature = "threads")]
fn a_deleted_threads_runs_are_not_replayed_even_when_its_id_is_used_again() {
    // Regression (issue 45, item 8): after `DELETE /threads/T` and a new turn on `T`, a
    // subscribe to the deleted run replayed it in full for the replay retention.
    let s = stack(grace_2);
    let events = s.run(&s.body("gone", "r1", "hello"));
    let exec = session_event(&events)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let delete = raw(s.addr(), &request("DELETE", "/threads/gone", &[], b""));
    assert_eq!(delete.status, 204, "{}", delete.text());
    let mut b = ids_body("gone", "r1");
    b["afterSequence"] = json!(-1);
    let after_delete = subscribe(&s, &exec, &b, &[]);
    assert_eq!(after_delete.status, 404, "{}", after_delete.text());
    assert_eq!(after_delete.error_code(), "EXECUTION_NOT_FOUND");
    s.run(&s.body("gone", "r2", "a new conversation"));
    let after_reuse = subscribe(&s, &exec, &b, &[]);
    assert_eq!(after_reuse.status, 404, "{}", after_reuse.text());
    assert_eq!(after_reuse.error_code(), "EXECUTION_NOT_FOUND");
}

#[test]
fn snapshot_after_an_adapter_restart_returns_the_pending_interrupt_and_resume_works() {
    let mut s = stack(|s| s);
    let first = s.run(&s.body("snap", "r1", "permission please"));
    let pending = interrupts(&first);
    assert_eq!(pending.len(), 1);
    let session = session_event(&first).clone();
    let exec = session["executionId"].as_str().unwrap().to_string();
    s.start_server(ServerConfig::default());
    for after in [None, Some(3)] {
        let mut b = ids_body("snap", "r1");
        if let Some(a) = after {
            b["afterSequence"] = json!(a);
        }
        let r = subscribe(&s, &exec, &b, &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        check_ids(&r.body).unwrap();
        let (events, _) = sse_events(&r.body);
        check_stream(&events).unwrap();
        assert_eq!(
            types(&events),
            ["RUN_STARTED", "CUSTOM", "CUSTOM", "RUN_FINISHED"]
        );
        assert_eq!(events[1]["value"], session, "the same session facts");
        assert_eq!(events[2]["name"], "iac-code.subscription.v1");
        assert_eq!(events[2]["value"]["mode"], "snapshot");
        assert_eq!(
            interrupts(&events),
            pending,
            "the thread file's interrupt ids"
        );
    }
    let id = pending[0]["id"].as_str().unwrap();
    let resumed = s.run(&s.resume_body(
        "snap",
        "r2",
        json!([{"interruptId": id, "status": "resolved", "payload": {"decision": "allow_once"}}]),
    ));
    assert_eq!(last(&resumed)["type"], "RUN_FINISHED");
}

#[test]
fn snapshot_of_a_running_execution_follows_the_kernel_to_one_terminal_event() {
    let s = stack(grace_10);
    let r = s.open_stream(&s.body("live", "r1", PACED));
    let (_before, session) = read_then_drop(r, 6);
    let exec = session["value"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let snap = subscribe(&s, &exec, &ids_body("live", "r1"), &[]);
    assert_eq!(snap.status, 200, "{}", snap.text());
    check_ids(&snap.body).unwrap();
    let (events, _) = sse_events(&snap.body);
    check_stream(&events).unwrap();
    assert_eq!(events[2]["value"]["reason"], "no-sequence");
    let ends = events
        .iter()
        .filter(|e| e["type"] == "RUN_FINISHED" || e["type"] == "RUN_ERROR")
        .count();
    assert_eq!(ends, 1, "never RUN_ERROR + RUN_FINISHED");
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}

#[test]
fn a_dropped_producer_is_cancelled_after_the_grace_not_before() {
    let s = stack(grace_2);
    let r = s.open_stream(&s.body("grace", "r1", "pace 200 10"));
    let (_raw, session) = read_then_drop(r, 6);
    let dropped = SystemClock.now();
    let task = session["value"]["taskId"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        s.kernel.task_state(&task).as_deref(),
        Some("TASK_STATE_WORKING"),
        "still running inside the grace"
    );
    assert!(wait_until(Duration::from_secs(5), || s
        .kernel
        .task_state(&task)
        .as_deref()
        == Some("TASK_STATE_CANCELED")));
    assert!(dropped.elapsed() >= Duration::from_secs(2));
}

/// Threads of this test process (the server runs in it).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn detached_runs_wait_out_their_grace_on_the_loops_timers_not_a_thread_each() {
    if !alone_in_a_process(
        module_path!(),
        "detached_runs_wait_out_their_grace_on_the_loops_timers_not_a_thread_each",
    ) {
        return;
    }
    const RUNS: usize = 16;
    let s = stack(grace_10);
    let streams: Vec<Reader> = (0..RUNS)
        .map(|i| s.open_stream(&s.body(&format!("many-{i}"), "r1", "pace 300 20")))
        .collect();
    let mut tasks = Vec::new();
    let mut held = Vec::new();
    for mut r in streams {
        let (_, session) = r.until_session();
        tasks.push(session["taskId"].as_str().unwrap().to_string());
        held.push(r);
    }
    let before = threads();
    drop(held);
    // Every run is detached (its grace armed) once the loop closed its connection; the runs
    // keep going meanwhile, so sample for a while: a thread per grace would show at once.
    let mut most = 0;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        most = most.max(threads());
    }
    assert!(
        most < before + RUNS / 2,
        "{before} threads before the clients left, up to {most} within the grace"
    );
    for t in &tasks {
        assert_eq!(
            s.kernel.task_state(t).as_deref(),
            Some("TASK_STATE_WORKING"),
            "still running inside the grace"
        );
    }
}

#[test]
fn a_re_attached_run_is_not_cancelled_when_the_grace_ends() {
    let s = stack(grace_2);
    let r = s.open_stream(&s.body("kept", "r1", "pace 50 10"));
    let (raw, session) = read_then_drop(r, 6);
    let task = session["value"]["taskId"].as_str().unwrap().to_string();
    let exec = session["value"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(Duration::from_millis(300));
    let mut b = ids_body("kept", "r1");
    b["afterSequence"] = json!(last_id(&raw));
    let rest = subscribe(&s, &exec, &b, &[]);
    let (events, _) = sse_events(&rest.body);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    assert_eq!(
        s.kernel.task_state(&task).as_deref(),
        Some("TASK_STATE_INPUT_REQUIRED"),
        "the turn ended normally"
    );
}

#[test]
fn an_observer_that_leaves_never_cancels_the_run() {
    let s = stack(|s| s);
    let r = s.open_stream(&s.body("watch", "r1", "pace 30 20"));
    let mut producer = r;
    let mut raw = Vec::new();
    let session = loop {
        raw.extend(producer.chunk().unwrap());
        if let Some(e) = sse_events(&raw)
            .0
            .into_iter()
            .find(|e| e["name"] == "iac-code.session.v1")
        {
            break e;
        }
    };
    let exec = session["value"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut b = ids_body("watch", "r1");
    b["afterSequence"] = json!(0);
    let mut observer = Reader::new(s.server.as_ref().unwrap().connect());
    observer
        .sock
        .write_all(&request(
            "POST",
            &subscribe_path(&exec),
            &[("Content-Type", "application/json")],
            &serde_json::to_vec(&b).unwrap(),
        ))
        .unwrap();
    assert_eq!(observer.head().unwrap().0, 200);
    observer.chunk().unwrap();
    drop(observer);
    while let Some(c) = producer.chunk() {
        raw.extend(c);
    }
    let (events, _) = sse_events(&raw);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}

#[test]
fn subscribe_errors_come_before_any_stream() {
    let s = stack(|s| s);
    let events = s.run(&s.body("err", "r1", "permission please"));
    let exec = session_event(&events)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let check = |exec: &str, body: Value, status: u16, code: &str| {
        let r = subscribe(&s, exec, &body, &[]);
        assert_eq!(r.status, status, "{body} {}", r.text());
        assert_eq!(r.error_code(), code, "{body}");
    };
    let mut extra = ids_body("err", "r1");
    extra["more"] = json!(1);
    check(&exec, extra, 400, "INVALID_INPUT");
    check(
        &exec,
        json!({"threadId": "", "runId": "r1", "rosInvocationId": "ros-1"}),
        400,
        "INVALID_INPUT",
    );
    let mut neg = ids_body("err", "r1");
    neg["afterSequence"] = json!(-2);
    check(&exec, neg, 400, "INVALID_INPUT");
    // Regression: the largest sequence overflowed `afterSequence + 1` (a panic from input).
    let mut max = ids_body("err", "r1");
    max["afterSequence"] = json!(i64::MAX);
    let r = subscribe(&s, &exec, &max, &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    assert_eq!(events[2]["value"]["mode"], "snapshot");
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    check(
        "exec-none",
        ids_body("err", "r1"),
        404,
        "EXECUTION_NOT_FOUND",
    );
    check(&exec, ids_body("nobody", "r1"), 404, "EXECUTION_NOT_FOUND");
    check(
        &exec,
        json!({"threadId": "err", "runId": "r1", "rosInvocationId": "other"}),
        409,
        "EXECUTION_IDENTITY_MISMATCH",
    );
    let _ = s.run(&s.body("err2", "x1", "permission please"));
    check(
        &exec,
        ids_body("err2", "x1"),
        409,
        "EXECUTION_IDENTITY_MISMATCH",
    );
    // The routing key rule applies here too.
    let r = subscribe(
        &s,
        &exec,
        &ids_body("err", "r1"),
        &[("X-Iac-Code-Thread-Id", "other")],
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code(), "THREAD_ID_MISMATCH");
    let bad_json = post_json(
        s.addr(),
        &subscribe_path(&exec),
        &[("Content-Type", "application/json")],
        b"{",
    );
    assert_eq!(bad_json.error_code(), "INVALID_JSON");
    // Its own size message, not the cancel route's.
    let mut big = ids_body("err", "r1");
    big["pad"] = json!("x".repeat(70 * 1024));
    let r = subscribe(&s, &exec, &big, &[]);
    assert_eq!(r.status, 413);
    assert_eq!(r.error_code(), "REQUEST_TOO_LARGE");
    assert!(r.text().contains("subscribe"), "{}", r.text());
}

#[test]
fn subscribing_to_a_finished_run_always_ends_with_a_terminal_event() {
    // Regression (red team): a finished run whose log is still held answered 404 without
    // afterSequence and past its end, and 200 with an empty body and no terminal event when
    // afterSequence named the terminal event.
    let s = stack(grace_2);
    let events = s.run(&s.body("fin", "r1", "hello"));
    let exec = session_event(&events)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let last = events.len() as i64 - 1;
    for after in [None, Some(last), Some(last + 1), Some(last + 1000)] {
        let mut b = ids_body("fin", "r1");
        if let Some(a) = after {
            b["afterSequence"] = json!(a);
        }
        let r = subscribe(&s, &exec, &b, &[]);
        assert_eq!(r.status, 200, "afterSequence {after:?}: {}", r.text());
        let (got, _) = sse_events(&r.body);
        let t = types(&got);
        assert_eq!(
            t.last().map(String::as_str),
            Some("RUN_FINISHED"),
            "{after:?}: {t:?}"
        );
        assert_eq!(
            t.iter()
                .filter(|x| *x == "RUN_FINISHED" || *x == "RUN_ERROR")
                .count(),
            1,
            "{after:?}: {t:?}"
        );
        assert_eq!(common::last(&got), common::last(&events), "{after:?}");
    }
}
