//! Stop, then send again (issue 17): the turn after a cancel or a disconnect succeeds even
//! though the kernel is still stopping the old task, and Stop answers at once.
//!
//! The demo kernel's `cancel_linger` models the real kernel under load: a cancelled task takes
//! that long to stop, `CancelTask` answers only then, and a task started on the same context
//! meanwhile streams its text and then fails.

use crate::common;

use iac_agui::clock::{Clock as _, SystemClock};
use std::time::Duration;

use common::*;
use iac_agui::adapter::Shared;
use serde_json::Value;

fn stack(linger: Duration, tune: fn(Shared) -> Shared) -> Stack {
    Stack::lingering(linger, tune)
}

/// Start a slow answer and read until its session event; the reader and the event.
fn start_slow(s: &Stack, thread: &str, run: &str) -> (Reader, Value) {
    let mut r = s.open_stream(&s.body(thread, run, "slow please"));
    let mut seen = Vec::new();
    loop {
        let (evs, _) = sse_events(&r.chunk().expect("the stream goes on"));
        seen.extend(evs);
        if let Some(e) = seen.iter().find(|e| e["name"] == "iac-code.session.v1") {
            let e = e.clone();
            // One text event more, as a user would see before pressing Stop.
            let (more, _) = sse_events(&r.chunk().expect("text"));
            assert!(!more.is_empty());
            return (r, e);
        }
    }
}

fn rest_of(mut r: Reader) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(c) = r.chunk() {
        events.extend(sse_events(&c).0);
    }
    events
}

#[test]
fn a_turn_sent_right_after_a_disconnect_succeeds() {
    let s = stack(Duration::from_secs(2), |s| s);
    for i in 0..2 {
        let (r, _) = start_slow(&s, "t1", &format!("slow-{i}"));
        drop(r);
        // At once: no THREAD_BUSY, and the new task is not started while the old one stops.
        let ev = s.run(&s.body("t1", &format!("next-{i}"), "hello"));
        assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{:?}", last(&ev));
        assert_eq!(last(&ev)["outcome"]["type"], "success");
    }
}

#[test]
fn a_turn_sent_right_after_a_cancel_succeeds() {
    // The kernel takes 2 s to stop; the cancel route waits only 0.5 s for it.
    let s = stack(Duration::from_secs(2), |s| {
        s.with_stop_bounds(Duration::from_secs(15), Duration::from_millis(500))
    });
    let (r, session) = start_slow(&s, "t1", "slow");
    let exec = session["value"]["executionId"].as_str().unwrap();
    let t0 = SystemClock.now();
    let c = s.cancel(exec, "t1", "ros-1");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(c.status, 202, "{}", c.text());
    assert_eq!(c.json()["status"], "cancelling");
    // The run's stream has its one terminal event already.
    let events = rest_of(r);
    assert_eq!(last(&events)["code"], "CANCELLED", "{events:?}");
    let ev = s.run(&s.body("t1", "next", "hello"));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{:?}", last(&ev));
    // Once the kernel confirmed, the same cancel says so.
    assert!(wait_until(Duration::from_secs(5), || s
        .cancel(exec, "t1", "ros-1")
        .json()["status"]
        == "already_terminal"));
}

#[test]
fn past_the_wait_bound_the_failure_has_its_own_code() {
    let s = stack(Duration::from_secs(3), |s| {
        s.with_stop_bounds(Duration::from_millis(200), Duration::from_secs(5))
    });
    let (r, _) = start_slow(&s, "t1", "slow");
    drop(r);
    let ev = s.run(&s.body("t1", "next", "hello"));
    let end = last(&ev);
    assert_eq!(end["type"], "RUN_ERROR");
    assert_eq!(end["code"], "PREVIOUS_RUN_STILL_STOPPING", "{end}");
    assert_ne!(end["code"], "A2A_EXECUTION_FAILED");
}

#[test]
fn a_cancel_the_kernel_holds_for_30_s_answers_within_the_bound() {
    let s = stack(Duration::from_secs(30), |s| s);
    let (r, session) = start_slow(&s, "t1", "slow");
    let exec = session["value"]["executionId"].as_str().unwrap();
    let t0 = SystemClock.now();
    let c = s.cancel(exec, "t1", "ros-1");
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(7),
        "the cancel route took {took:?}"
    );
    assert_eq!(c.status, 202, "{}", c.text());
    assert_eq!(c.json()["status"], "cancelling");
    let t1 = SystemClock.now();
    let events = rest_of(r);
    assert!(
        t1.elapsed() < Duration::from_secs(1),
        "the stream had ended"
    );
    check_stream(&events[..]).unwrap_or_else(|e| {
        // The events before the session event were read by start_slow.
        assert!(e.contains("first event"), "{e}");
    });
    assert_eq!(last(&events)["type"], "RUN_ERROR");
    assert_eq!(last(&events)["code"], "CANCELLED");
}

/// A Stop that cancels, then closes the stream at once (the CopilotKit `IacCodeAgent` and
/// docs/clients.md's `HttpAgent` recipe): with a disconnect grace, the next turn on the
/// thread must not wait out the grace (`409 THREAD_BUSY`; seen in 2 of 14 tries).
#[test]
fn a_turn_sent_after_a_cancel_and_a_disconnect_within_a_grace_succeeds() {
    let s = stack(Duration::ZERO, |s| {
        s.with_detach(Duration::from_secs(30), Default::default())
    });
    for i in 0..24 {
        let thread = format!("g{i}");
        let (r, session) = start_slow(&s, &thread, "slow");
        let exec = session["value"]["executionId"].as_str().unwrap();
        // Half the tries close the stream first, half cancel first.
        let r = if i % 2 == 0 {
            Some(r)
        } else {
            drop(r);
            None
        };
        let c = s.cancel(exec, &thread, "ros-1");
        assert!(
            c.status == 200 || c.status == 202 || c.error_code() == "EXECUTION_NOT_FOUND",
            "{} {}",
            c.status,
            c.text()
        );
        drop(r);
        let next = s.post(&s.body(&thread, "next", "hello"));
        assert_eq!(next.status, 200, "try {i}: {}", next.text());
        let (ev, _) = sse_events(&next.body);
        assert_eq!(
            last(&ev)["outcome"]["type"],
            "success",
            "try {i}: {:?}",
            last(&ev)
        );
    }
}
