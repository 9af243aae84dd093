//! The tuning layer (docs/performance.md, "What each special case buys"): each special case
//! kept for its measured figure is shown to be taken, by the server's own counters, so that a
//! change which bypasses one fails here instead of only moving a benchmark figure. The call
//! threads are guarded by `tests/handoffs.rs` (their count per run kind).
//! Its own binary: the frame counters are process-wide.
// Every run here is against the demo kernel.
#![cfg(feature = "demo")]

mod common;

use common::*;

/// `iac_agui_upstream_frames_total` by its `read` label: template, delta, shallow, deep.
fn frames(s: &Stack) -> [u64; 4] {
    let r = raw(
        s.addr(),
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".as_slice(),
    );
    let text = r.text();
    ["template", "delta", "shallow", "deep"].map(|read| {
        let name = format!("iac_agui_upstream_frames_total{{read=\"{read}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    })
}

/// A text stream's frames are read by the delta reader, and within a burst mostly by the
/// `Template` check (−45 % CPU per event, measured). Counted, not timed: the same on a
/// loaded machine. The template share depends on how many frames one upstream read brings
/// (the flood's frames arrive faster than they are read, several per read); its bound is
/// far below what a flood shows (see the printed figures) and far above zero.
#[test]
fn a_text_stream_is_read_by_the_template_and_delta_path() {
    let s = Stack::new();
    s.run(&s.body("warm", "r0", "hello"));
    let before = frames(&s);
    let n = 2000u64;
    let ev = s.run(&s.body("flood", "r1", &format!("flood {n}")));
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{:?}", last(&ev));
    let texts = ev
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .count() as u64;
    assert!(texts >= n, "{texts} text events for a flood of {n}");
    let after = frames(&s);
    let [template, delta, shallow, deep] = [0, 1, 2, 3].map(|i| after[i] - before[i]);
    let all = template + delta + shallow + deep;
    eprintln!(
        "frames of a flood of {n}: template {template}, delta {delta}, shallow {shallow}, deep {deep}"
    );
    assert!(
        (template + delta) * 100 >= all * 95,
        "the delta path was bypassed: {template} template + {delta} delta reads of {all} frames \
         (expected ≥ 95 %; every other frame costs a JSON parse)"
    );
    assert!(
        template * 100 >= (template + delta) * 25,
        "the Template check was bypassed: {template} of {} delta-shaped frames (expected ≥ 25 %)",
        template + delta
    );
}

/// The shipped binary runs with its malloc tunables (−44 % memory per stream, measured):
/// the process serving requests is the re-executed one, with `GLIBC_TUNABLES` set.
#[test]
fn the_server_runs_re_executed_with_its_malloc_tunables() {
    let p = procs::start("tuning-malloc", &[]);
    let environ = std::fs::read(format!("/proc/{}/environ", p.adapter.id())).unwrap();
    // glibc cuts the variable at each `:` in place as it reads the tunables: its settings
    // show as NUL-separated pieces after `GLIBC_TUNABLES=`.
    let pieces: Vec<String> = environ
        .split(|b| *b == 0 || *b == b':')
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let mut want = iac_agui::malloc::TUNABLES.split(':');
    let first = format!("GLIBC_TUNABLES={}", want.next().unwrap());
    let missing: Vec<&str> = std::iter::once(first.as_str())
        .chain(want)
        .filter(|t| !pieces.iter().any(|p| p == t))
        .collect();
    assert!(
        missing.is_empty(),
        "the server did not re-execute with its malloc tunables: {missing:?} not in its environment"
    );
    let original = format!("{}=", iac_agui::malloc::ORIGINAL);
    assert!(
        pieces.iter().any(|v| v.starts_with(&original)),
        "the re-executed server does not carry the original GLIBC_TUNABLES for the kernel"
    );
}
