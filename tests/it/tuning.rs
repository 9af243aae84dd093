//! The tuning layer (docs/performance.md, "What each special case buys"): each special case
//! kept for its measured figure is shown to be taken, by the server's own counters, so that a
//! change which bypasses one fails here instead of only moving a benchmark figure. The call
//! threads are guarded by `tests/it/handoffs.rs` (their count per run kind).
//! The counters are process-wide: a test that reads them runs alone in a process of its own
//! (`common::alone_in_a_process`).

use crate::common;

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
    if !alone_in_a_process(
        module_path!(),
        "a_text_stream_is_read_by_the_template_and_delta_path",
    ) {
        return;
    }
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

/// `iac_agui_kernel_connections_total`.
fn kernel_connections(s: &Stack) -> u64 {
    let r = raw(
        s.addr(),
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".as_slice(),
    );
    r.text()
        .lines()
        .find_map(|l| l.strip_prefix("iac_agui_kernel_connections_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("iac_agui_kernel_connections_total in /metrics")
}

/// A run's requests go out through the lean transport (`a2a/transport.rs`: ureq's own
/// buffers held ~11.8 KiB more of each open stream's heap, measured in issue 26). An agent
/// built without it connects without counting.
#[test]
fn a_run_connects_to_the_kernel_through_the_lean_transport() {
    if !alone_in_a_process(
        module_path!(),
        "a_run_connects_to_the_kernel_through_the_lean_transport",
    ) {
        return;
    }
    let s = Stack::new();
    let before = kernel_connections(&s);
    let ev = s.run(&s.body("lean", "r1", "hello"));
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{:?}", last(&ev));
    let made = kernel_connections(&s) - before;
    assert!(
        made >= 1,
        "a run made {made} kernel connections through the lean transport: it was bypassed"
    );
}

/// The frames of their own: with them a worker's resident stack is 12 KiB, without them 16
/// (docs/performance.md). The driver's (its stages and endings, `Run::boxed`) and one in the
/// worker's entry (`app::Job::other`: the routes that are not a run, out of the frame a run
/// streams under). What they buy shows only in the shipped build's memory run (`make bench`,
/// which fails above 12 KiB); this keeps their number where that measure was taken, and the
/// other 8 removed (no measurable gain): one added or dropped is a change to measure again.
#[test]
fn the_driver_and_the_workers_entry_keep_their_frames_of_their_own_and_nothing_else_has_one() {
    fn count(dir: &std::path::Path, under_driver: bool, tally: &mut [usize; 3]) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let driver = under_driver || p.ends_with("adapter/run/driver");
            if p.is_dir() {
                count(&p, driver, tally);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                let n = text
                    .lines()
                    .filter(|l| l.trim() == "#[inline(never)]")
                    .count();
                let home = if driver {
                    0
                } else if p.ends_with("src/app/mod.rs") {
                    1
                } else {
                    2
                };
                tally[home] += n;
            }
        }
    }
    let mut tally = [0, 0, 0];
    count(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        false,
        &mut tally,
    );
    assert_eq!(
        tally,
        [16, 1, 0],
        "#[inline(never)] in the driver / the worker's entry / elsewhere: the driver's 15 stage \
         frames, Run::boxed and Job::other are measured (docs/performance.md); measure again \
         before changing them"
    );
}
