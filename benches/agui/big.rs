//! Large events for clients that keep up (issue 45, fault 1): 16 runs of the demo's
//! `big 10 10` (10 MiB of text, a 10 MiB tool result), 8 at a time, each read as fast as its
//! client can, against the default 128 MiB output budget. Before the fix 8 of the 16 were
//! refused `503 SERVER_BUSY`. `cargo bench --bench agui -- big`.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Add, Proc, adapter, post, read_sse, run_body, state_dir, status_kib};

const RUNS: usize = 16;
const AT_ONCE: usize = 8;

pub fn figures(k: &Proc, add: &mut Add<'_>) {
    let dir = state_dir("big");
    let a = adapter(k, &[], &dir);
    let next = AtomicUsize::new(0);
    let bad = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..AT_ONCE {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= RUNS {
                        break;
                    }
                    let body = run_body(&dir, &format!("big-{i}"), "big 10 10");
                    let mut sock = post(a.addr, "/", &body, "");
                    let mut finished = false;
                    let status = read_sse(&mut sock, |data, _| {
                        // `id: N\ndata: {"type":…`: the type is in the first bytes.
                        let head = &data[..data.len().min(64)];
                        finished = String::from_utf8_lossy(head).contains("\"RUN_FINISHED\"");
                    });
                    if status != 200 || !finished {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let bad = bad.load(Ordering::Relaxed);
    add(
        "large events: runs refused or cut (of 16)",
        bad.to_string(),
        "0",
        Some(bad == 0),
        bad as f64,
    );
    // The budget (128 MiB) plus what each run holds past it for one event in flight.
    let peak = status_kib(a.child.id(), "VmHWM:") as f64 / 1024.0;
    add(
        "large events: peak RSS (MiB)",
        format!("{peak:.0}"),
        "< 192 MiB",
        Some(peak < 192.0),
        peak,
    );
}
