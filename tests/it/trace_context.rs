//! W3C trace context end to end (issue 44), against the real binary and a demo kernel
//! process with a recording proxy between them: the caller's trace reaches every kernel call
//! (under the server's own span id, with its `tracestate`), its JSON log records and the 1.0
//! session event; a malformed `traceparent` is ignored and a new trace started; 0.1 keeps
//! the reference's session event.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::procs::{Log, Procs, start_through};
use common::*;
use serde_json::Value;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// A loopback TCP relay to `upstream` that keeps every byte sent towards it.
fn recording_proxy(upstream: u16) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut c2, mut u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut u2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
            let keep = keep.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(n) = client.read(&mut buf) {
                    if n == 0 || up.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = up.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, seen)
}

/// The `traceparent` and `tracestate` values of every request the kernel got.
fn kernel_headers(seen: &Mutex<Vec<u8>>) -> Vec<(String, Option<String>)> {
    let text = String::from_utf8_lossy(&seen.lock().unwrap()).to_string();
    let mut out = Vec::new();
    for head in text.split("\r\n\r\n") {
        let mut tp = None;
        let mut ts = None;
        for line in head.lines() {
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("traceparent:") {
                tp = Some(v.trim().to_string());
            } else if lower.starts_with("tracestate:") {
                ts = Some(line["tracestate:".len()..].trim().to_string());
            }
        }
        if let Some(tp) = tp {
            out.push((tp, ts));
        }
    }
    out
}

struct Traced {
    procs: Procs,
    log: Log,
    seen: Arc<Mutex<Vec<u8>>>,
}

fn start(name: &str, protocol: &str) -> Traced {
    let log = Log::default();
    let mut seen = None;
    let procs = start_through(
        name,
        &["--agui-protocol", protocol, "--log-format", "json"],
        &[],
        Some(&log),
        |kernel| {
            let (port, s) = recording_proxy(kernel);
            seen = Some(s);
            port
        },
    );
    Traced {
        procs,
        log,
        seen: seen.unwrap(),
    }
}

fn run(t: &Traced, thread: &str, headers: &[(&str, &str)]) -> Vec<Value> {
    let r = post_json(
        t.procs.addr,
        "/",
        headers,
        &t.procs.body(thread, &format!("{thread}-r"), "hello"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    events
}

/// The JSON access record of `thread`'s run, once written.
fn access_record(log: &Log, thread: &str) -> Value {
    let mut found = Value::Null;
    let ok = wait_until(Duration::from_secs(10), || {
        found = log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["target"] == "iac_agui::access" && r["thread_id"] == thread)
            .unwrap_or(Value::Null);
        !found.is_null()
    });
    assert!(ok, "no access record for {thread}");
    found
}

#[test]
fn a_callers_traceparent_reaches_the_kernel_calls_the_logs_and_the_session_event() {
    let t = start("trace-in", "1.0");
    let events = run(
        &t,
        "traced",
        &[
            ("traceparent", &format!("00-{TRACE}-{PARENT}-01")),
            ("tracestate", "rojo=00f067aa0ba902b7"),
        ],
    );
    assert_eq!(session_event(&events)["traceId"], TRACE);

    let calls = kernel_headers(&t.seen);
    assert!(!calls.is_empty(), "no kernel call carried a traceparent");
    for (tp, ts) in &calls {
        let p = tp.split('-').collect::<Vec<_>>();
        assert_eq!((p.len(), p[0], p[1], p[3]), (4, "00", TRACE, "01"), "{tp}");
        // The kernel's parent is the server's own span, never the caller's.
        assert_ne!(p[2], PARENT);
        assert_eq!(ts.as_deref(), Some("rojo=00f067aa0ba902b7"));
    }
    let spans: std::collections::BTreeSet<_> = calls.iter().map(|(tp, _)| &tp[36..52]).collect();
    assert_eq!(
        spans.len(),
        calls.len(),
        "each kernel call is a span of its own"
    );

    let rec = access_record(&t.log, "traced");
    assert_eq!(rec["trace_id"], TRACE, "{rec}");
}

#[test]
fn a_malformed_traceparent_is_ignored_and_a_new_trace_started() {
    let t = start("trace-bad", "1.0");
    // Uppercase hex is not a valid traceparent (nor is its tracestate then passed on).
    let bad = format!("00-{}-{PARENT}-01", TRACE.to_uppercase());
    let events = run(
        &t,
        "malformed",
        &[("traceparent", &bad), ("tracestate", "a=1")],
    );
    let new = session_event(&events)["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(new.len(), 32);
    assert!(
        new.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_ne!(new, TRACE.to_lowercase());
    let calls = kernel_headers(&t.seen);
    assert!(!calls.is_empty());
    for (tp, ts) in &calls {
        assert_eq!(&tp[3..35], new, "{tp}");
        assert_eq!(ts, &None);
    }
    assert_eq!(access_record(&t.log, "malformed")["trace_id"], new.as_str());

    // Sent twice, it is not one traceparent (§3.2.2.1: a duplicate makes it invalid).
    let good = format!("00-{TRACE}-{PARENT}-01");
    let twice = run(
        &t,
        "twice",
        &[("traceparent", &good), ("traceparent", &good)],
    );
    assert_ne!(session_event(&twice)["traceId"], TRACE);

    // Without any traceparent too, each request is a trace of its own.
    let a = run(&t, "plain-1", &[]);
    let b = run(&t, "plain-2", &[]);
    assert_ne!(session_event(&a)["traceId"], session_event(&b)["traceId"]);
}

#[test]
fn the_reference_dialect_keeps_its_session_event_and_still_passes_the_trace_on() {
    let t = start("trace-01", "0.1");
    let events = run(
        &t,
        "ref",
        &[("traceparent", &format!("00-{TRACE}-{PARENT}-01"))],
    );
    let keys: Vec<&String> = session_event(&events).as_object().unwrap().keys().collect();
    assert!(!keys.iter().any(|k| *k == "traceId"), "{keys:?}");
    assert!(
        kernel_headers(&t.seen)
            .iter()
            .all(|(tp, _)| &tp[3..35] == TRACE)
    );
    assert_eq!(access_record(&t.log, "ref")["trace_id"], TRACE);
}
