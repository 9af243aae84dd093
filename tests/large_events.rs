//! Large but legitimate events never kill a run, and a slow reader slows only its own run
//! (backpressure instead of a size cap, issue 13).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::procs::start as start_pair;
use common::*;
use serde_json::Value;

/// Peak and current resident memory of a process, in KiB (`VmHWM`, `VmRSS`).
fn memory(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn check_big(events: &[Value], text_mib: usize, tool_mib: usize) {
    check_stream(events).unwrap();
    assert_eq!(
        last(events)["outcome"]["type"],
        "success",
        "{:?}",
        last(events)
    );
    let text: usize = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap().len())
        .sum();
    assert!(text > (text_mib << 20) - 64, "text {text}");
    let tool = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("the tool result");
    let content = tool["content"].as_str().unwrap();
    assert!(
        content.len() > (tool_mib << 20) - 64,
        "tool {}",
        content.len()
    );
    assert!(content.starts_with("resource \"alicloud_instance\""));
}

#[test]
fn a_4_mib_tool_result_and_an_8_mib_text_delta_arrive_intact() {
    // Regression: the loop closed a connection whose unsent output passed 1 MiB, after
    // TEXT_MESSAGE_START, with no terminal event, and then cancelled the task.
    let p = start_pair("big-events", &[]);
    let r = post_json(p.addr, "/", &[], &p.body("big", "r1", "big 8 4"));
    assert_eq!(r.status, 200);
    check_ids(&r.body).unwrap();
    check_big(&sse_events(&r.body).0, 8, 4);
}

#[test]
fn a_reader_that_pauses_for_10_s_gets_the_whole_stream_with_bounded_memory() {
    let p = start_pair("big-pause", &[]);
    let pid = p.adapter.id();
    // The same run read at full speed first: its peak is what processing the events costs.
    let r = post_json(p.addr, "/", &[], &p.body("big", "warm", "big 8 4"));
    assert_eq!(r.status, 200);
    let (base, _) = memory(pid);
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&request(
        "POST",
        "/",
        &[
            ("Content-Type", "application/json"),
            ("Connection", "close"),
        ],
        &p.body("big", "r2", "big 8 4"),
    ))
    .unwrap();
    let mut got = vec![0u8; 4096];
    let n = s.read(&mut got).unwrap();
    got.truncate(n);
    // The client stops reading; the server must neither drop it nor buffer without bound.
    std::thread::sleep(Duration::from_secs(10));
    let (peak, _) = memory(pid);
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).ok();
    got.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&got);
    let body_start = text.find("\r\n\r\n").unwrap() + 4;
    // `Connection: close`: the stream is delimited by the close, not chunked.
    let sse = got[body_start..].to_vec();
    check_ids(&sse).unwrap();
    check_big(&sse_events(&sse).0, 8, 4);
    // What a paused reader adds on top of that peak is bounded by the events held for it
    // (the output watermark, the job queue, the event waiting in the queue and the one being
    // read upstream), not by the stream: measured about 11 MiB here (25 MiB before the line
    // buffer and the text digests stopped keeping large texts), against 13 MB of stream
    // (docs/protocol.md has the figures and why the tighter target is not met yet).
    let grew = peak.saturating_sub(base);
    eprintln!("peak of a full-speed run {base} KiB; with a paused reader +{grew} KiB");
    assert!(
        grew < 4 * 8 * 1024,
        "the adapter grew by {grew} KiB while the client paused"
    );
}
