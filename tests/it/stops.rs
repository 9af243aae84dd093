//! A Stop answered `cancelled` is carried out, wherever it lands in a run's first moments
//! (issue 56). A client that read the execution id of a thread's running turn — from the
//! `409 THREAD_BUSY` a second tab gets, whose message tells it to stop the run with that id —
//! stops it 0–60 ms later, while admission finishes and the kernel names the task. Before the
//! run's life was one cell, about 1 in 25 such Stops on a loaded machine was answered
//! `cancelled` and lost: the client got the whole answer and the kernel's task ran to its end.

use crate::common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use iac_agui::clock::{Clock as _, SystemClock};
use iac_agui::config::AguiProtocol;
use iac_agui::kernel::demo::DemoConfig;
use iac_agui::server::ServerConfig;

const ATTEMPTS: usize = 2_000;
/// Attempts in flight at once (two cores, sixteen runs admitted and stopped)...
const WORKERS: usize = 16;
/// ...and threads that only burn CPU, so that every thread of the server is preempted now
/// and then where it would not be on an idle machine: a window between two steps that is
/// microseconds wide idle is milliseconds wide here.
const HOGS: usize = 3;
/// The test stops by itself: all attempts within this, or it fails saying how far it got.
const BOUND: Duration = Duration::from_secs(300);

/// One attempt: two tabs send a turn on a new thread; the one refused `THREAD_BUSY` stops
/// the other's run `delay` after it learnt its id. `Err` says how the Stop was lost.
fn attempt(s: &Stack, i: usize, delay: Duration) -> Result<(), String> {
    let thread = format!("storm-{i}");
    let mut a = s.send_run(&s.body(&thread, "a", "slow please"));
    let mut b = s.send_run(&s.body(&thread, "b", "slow please"));
    let ra = a.answer_or_stream().ok_or("no answer to a")?;
    let rb = b.answer_or_stream().ok_or("no answer to b")?;
    let (mut live, busy) = match (ra.status, rb.status) {
        (200, 409) => (a, rb),
        (409, 200) => (b, ra),
        other => return Err(format!("{thread}: answers {other:?}")),
    };
    let exec = busy.json()["error"]["executionId"]
        .as_str()
        .ok_or_else(|| format!("409 without executionId: {}", busy.text()))?
        .to_string();
    std::thread::sleep(delay);
    let c = s.cancel(&exec, &thread, "ros-1");
    let said = c.json()["status"].as_str().unwrap_or_default().to_string();
    let mut raw = Vec::new();
    while let Some(chunk) = live.chunk() {
        raw.extend(chunk);
    }
    let (events, _) = sse_events(&raw);
    let end = last(&events);
    match (c.status, said.as_str()) {
        (200, "cancelled") | (202, "cancelling") => {
            // Carried out: the run ends cancelled, long before its answer would have (40
            // ticks), and without it.
            let text: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
            let whole = text.contains("tick 40.");
            if end["code"] != "CANCELLED" || whole {
                return Err(format!(
                    "{thread}: Stop at {delay:?} answered {said}, the run ended {end}"
                ));
            }
        }
        // The run ended first (a very slow machine): a truthful answer, nothing promised.
        (200, "already_terminal") if end["type"] == "RUN_FINISHED" => {}
        other => {
            return Err(format!(
                "{thread}: the Stop was answered {other:?}: {}",
                c.text()
            ));
        }
    }
    Ok(())
}

#[test]
fn every_stop_answered_cancelled_is_carried_out_wherever_it_lands() {
    // 20 ms ticks: a `slow` answer takes 0.8 s, long past any Stop here.
    let s = Stack::tuned(
        AguiProtocol::V0_1,
        ServerConfig::default(),
        Duration::from_secs(30),
        DemoConfig {
            token: Some("k-token".into()),
            frame_delay: Duration::ZERO,
            tick: Duration::from_millis(20),
            cancel_linger: Duration::ZERO,
        },
        |s| s,
    );
    let t0 = SystemClock.now();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let lost = Mutex::new(Vec::new());
    let over = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..HOGS {
            scope.spawn(|| {
                let mut x = 0u64;
                while !over.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                }
            });
        }
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= ATTEMPTS || t0.elapsed() > BOUND {
                            return;
                        }
                        // 0–60 ms, spread evenly over the attempts.
                        let delay = Duration::from_millis((i as u64 * 37) % 61);
                        if let Err(e) = attempt(&s, i, delay) {
                            lost.lock().unwrap().push(e);
                        }
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        over.store(true, Ordering::Relaxed);
    });
    let lost = lost.into_inner().unwrap();
    let done = done.into_inner();
    assert!(
        lost.is_empty(),
        "{} of {done} Stops lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert_eq!(done, ATTEMPTS, "out of time after {:?}", t0.elapsed());
    // The kernel's side: every task it started was cancelled (the kernel answers CancelTask
    // at once here; a Stop before the task was named has it cancelled when it is).
    let tasks = s.kernel.task_ids();
    let not_cancelled = || {
        tasks
            .iter()
            .filter(|t| s.kernel.task_state(t).as_deref() != Some("TASK_STATE_CANCELED"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(10), || not_cancelled().is_empty()),
        "tasks the kernel ran on after their Stop: {:?}",
        not_cancelled()
    );
}
