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

/// The worker stack a text flood must fit in, and a resume of an interrupt (bytes given to
/// `std::thread::Builder::stack_size` through `App::with_worker_stack`): a little above the
/// smallest in which each completes today, so that a frame made deeper on a run's path (the
/// pump, the frame reader, the projection, the resume's stages) overflows it, instead of only
/// moving the shipped build's resident stack (`make bench`, 12 KiB), which no test sees.
///
/// Measured on the test build (`cargo test`, debug), in 256-byte steps, 5 runs at each edge,
/// all alike (`IAC_AGUI_TEST_WORKER_STACK=flood:<bytes>` or `resume:<bytes>` on `cargo test
/// --test it -- tuning::<this test> --exact`): the flood fits in 44.75 KiB (44.5 overflows), the
/// resume in 60.75 KiB (60.5 overflows); the bounds are 48 and 64 KiB, 3.25 KiB above. A 4 KiB
/// array on the pump's frame overflows both. docs/performance.md has the same figures. The
/// test build inlines nothing, so the driver's `#[inline(never)]` show only in the bench; and
/// a release build of this test passes at any size (std raises a request to glibc's smallest
/// thread stack, 16 KiB with a page and the TLS, which an optimized run fits in).
const RUN_STACK: [(&str, usize); 2] = [("flood", 48 << 10), ("resume", 64 << 10)];

/// Set in the child process: which runs, on workers with how much stack (`flood:49152`).
const WORKER_STACK_VAR: &str = "IAC_AGUI_TEST_WORKER_STACK";

/// A text flood and a resume of an interrupt complete on workers with the stack of
/// `RUN_STACK`. A stack overflow aborts the whole process, so each is run in a child process
/// (this test binary, this test alone) whose exit is checked here: an overflow fails this
/// test with the child's own words ("has overflowed its stack"), not the test binary.
#[test]
fn a_text_flood_and_a_resume_run_within_the_worker_stack_they_must_fit_in() {
    const NAME: &str = "a_text_flood_and_a_resume_run_within_the_worker_stack_they_must_fit_in";
    if let Some(child) = iac_agui::config::Environ::capture().get(WORKER_STACK_VAR) {
        let (what, bytes) = child
            .split_once(':')
            .expect("flood:<bytes> or resume:<bytes>");
        let s = Stack::on_worker_stack(bytes.parse().expect("a stack size in bytes"));
        match what {
            "flood" => flood(&s),
            "resume" => resume(&s),
            _ => panic!("{WORKER_STACK_VAR}: flood or resume, not {what}"),
        }
        eprintln!("the {what} ran on workers of {bytes} bytes of stack");
        return;
    }
    for (what, bytes) in RUN_STACK {
        let path = crate::common::test_path(module_path!(), NAME);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([path.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(WORKER_STACK_VAR, format!("{what}:{bytes}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            !text.contains("has overflowed its stack"),
            "the {what} overflowed a worker stack of {bytes} bytes: a frame on its path grew \
             (measure again before raising the bound; docs/performance.md)\n{text}"
        );
        assert!(
            out.status.success() && text.contains("1 passed"),
            "the {what} on a worker stack of {bytes} bytes failed ({}):\n{text}",
            out.status
        );
    }
}

/// A flood of 2 000 text deltas.
fn flood(s: &Stack) {
    let ev = s.run(&s.body("flood", "r1", "flood 2000"));
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{:?}", last(&ev));
}

/// A tool call that pauses on a permission, and its resume (allow once) to the end.
fn resume(s: &Stack) {
    let ev = s.run(&s.body("tool", "r1", "permission"));
    let pid = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let ev = s.run(&s.resume_body(
        "tool",
        "r2",
        serde_json::json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]),
    ));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
}
