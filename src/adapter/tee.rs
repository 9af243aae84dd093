//! The adapter's [`StreamTap`]: every event of a run goes into its replay log before the
//! client sees it, and with `--disconnect-grace` a client that leaves detaches the run instead
//! of stopping it: events then go to the log only, and the stop hooks (abort upstream,
//! "departing") wait until the window ends with nobody re-attached.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::adapter::replay::RunLog;
use crate::app::StreamTap;
use crate::clock::Clock;
use crate::limits;
use crate::server::job::{Frame, Outbox, StopReason};
use crate::sync::lock;

pub(crate) struct RunTee {
    log: Arc<RunLog>,
    detach: Arc<Detach>,
    run_id: String,
    clock: Arc<dyn Clock>,
    started: Instant,
}

struct Detach {
    grace: Duration,
    state: Mutex<DetachState>,
}

#[derive(Default)]
struct DetachState {
    hooks: Vec<Box<dyn FnOnce() + Send>>,
    wrapper_installed: bool,
    detached: bool,
    expired: bool,
}

impl Detach {
    /// Run the held stop hooks now.
    fn fire(&self) {
        let hooks = {
            let mut st = lock(&self.state);
            st.expired = true;
            std::mem::take(&mut st.hooks)
        };
        for h in hooks {
            h();
        }
    }
}

impl RunTee {
    pub(crate) fn new(
        log: Arc<RunLog>,
        grace: Duration,
        run_id: &str,
        clock: Arc<dyn Clock>,
    ) -> RunTee {
        RunTee {
            log,
            detach: Arc::new(Detach {
                grace,
                state: Mutex::new(DetachState::default()),
            }),
            run_id: run_id.to_string(),
            started: clock.now(),
            clock,
        }
    }
}

impl StreamTap for RunTee {
    fn event(&self, id: u64, frame: &Frame) {
        self.log.append(frame.clone());
        // The first event after RUN_STARTED: how long the kernel took to say something.
        if id == 1 {
            crate::metrics::M
                .first_event
                .observe(self.clock.now().saturating_duration_since(self.started));
        }
    }

    fn end(&self, delivered: bool) {
        self.log.end();
        if delivered {
            crate::metrics::M
                .run_duration
                .observe(self.clock.now().saturating_duration_since(self.started));
        }
    }

    fn ended(&self) -> bool {
        self.log.ended()
    }

    fn detached(&self) -> bool {
        lock(&self.detach.state).detached
    }

    fn has_grace(&self) -> bool {
        !self.detach.grace.is_zero()
    }

    fn holds_run(&self) -> bool {
        self.has_grace() && !lock(&self.detach.state).expired
    }

    fn on_stop(&self, outbox: &Outbox, hook: Box<dyn FnOnce() + Send>) {
        if !self.has_grace() {
            return outbox.on_stop(hook);
        }
        let install = {
            let mut st = lock(&self.detach.state);
            if st.expired {
                drop(st);
                return hook();
            }
            st.hooks.push(hook);
            !std::mem::replace(&mut st.wrapper_installed, true)
        };
        if !install {
            return;
        }
        let detach = self.detach.clone();
        // Weak: the job holds this hook, and a strong flag would keep the job (and the log
        // captured here) alive forever.
        let flag = outbox.weak_stop_flag();
        let log = self.log.clone();
        let run_id = self.run_id.clone();
        let clock = self.clock.clone();
        outbox.on_stop(Box::new(move || {
            if flag.reason() != Some(StopReason::ClientGone) {
                return detach.fire();
            }
            // The client left after the run's end: there is nothing to keep going.
            if log.ended() {
                return;
            }
            lock(&detach.state).detached = true;
            log::info!(
                "run {run_id}: detached, its client left; grace {:?}",
                detach.grace
            );
            let spawned = std::thread::Builder::new()
                .name("iac-agui-grace".into())
                .stack_size(limits::SMALL_WORKER_STACK_BYTES)
                .spawn({
                    let detach = detach.clone();
                    move || grace_window(&detach, &log, &*clock)
                });
            if spawned.is_err() {
                detach.fire();
            }
        }));
    }
}

/// The disconnect grace of a detached run: at its end, a run nobody re-attached to is stopped
/// exactly as a disconnect without grace.
fn grace_window(detach: &Detach, log: &RunLog, clock: &dyn Clock) {
    let end = clock.now() + detach.grace;
    loop {
        if log.ended() {
            return;
        }
        let now = clock.now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(limits::SUBSCRIBER_POLL));
    }
    if log.adopted() {
        log::info!("run detached: re-attached within the grace; it goes on");
        return;
    }
    log::info!("run detached: nobody re-attached within the grace; stopping it");
    detach.fire();
}
