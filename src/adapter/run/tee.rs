//! The adapter's [`StreamTap`]: every event of a run goes into its replay log before the
//! client sees it, and with `--disconnect-grace` a client that leaves detaches the run instead
//! of stopping it: events then go to the log only, and the stop hooks (abort upstream,
//! "departing") are held until the grace's deadline — an alarm on the loop's timers — finds
//! the run not adopted. Where the client is lives in the run's cell ([`RunControl`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::adapter::replay::RunLog;
use crate::adapter::shared::RunControl;
use crate::agui::events::Event;
use crate::app::{Departure, StreamTap};
use crate::clock::Clock;
use crate::history::Ops;
use crate::server::job::{Frame, Outbox, StopReason};
use crate::sync::lock;

pub(crate) struct RunTee {
    log: Arc<RunLog>,
    /// The run's part of the thread's conversation, recorded as its events go out; the
    /// driver takes it at the run's end (`Run::record_history`).
    history: Mutex<Option<Ops>>,
    control: Arc<RunControl>,
    grace: Duration,
    held: Arc<Mutex<Held>>,
    run_id: String,
    clock: Arc<dyn Clock>,
    started: Instant,
}

/// The stop hooks a grace holds back, until they run once.
#[derive(Default)]
struct Held {
    hooks: Vec<Box<dyn FnOnce() + Send>>,
    /// The one hook on the job that decides between holding and running them is in place.
    on_job: bool,
    /// They ran: a hook added later runs at once.
    ran: bool,
}

/// Run the held stop hooks now (once).
fn run_held(held: &Mutex<Held>) {
    let hooks = {
        let mut h = lock(held);
        h.ran = true;
        std::mem::take(&mut h.hooks)
    };
    for hook in hooks {
        hook();
    }
}

impl RunTee {
    pub(crate) fn new(
        log: Arc<RunLog>,
        grace: Duration,
        run_id: &str,
        clock: Arc<dyn Clock>,
        control: Arc<RunControl>,
        history: Ops,
    ) -> RunTee {
        RunTee {
            log,
            history: Mutex::new(Some(history)),
            control,
            grace,
            held: Arc::new(Mutex::new(Held::default())),
            run_id: run_id.to_string(),
            started: clock.now(),
            clock,
        }
    }
}

impl RunTee {
    /// What the run recorded of its conversation, once (later events are not recorded).
    pub(crate) fn take_history(&self) -> Option<Ops> {
        lock(&self.history).take()
    }
}

impl StreamTap for RunTee {
    fn event(&self, id: u64, frame: &Frame, event: Option<&Event>) {
        self.log.append(frame.clone());
        if let Some(e) = event
            && let Some(ops) = lock(&self.history).as_mut()
        {
            ops.record(e);
        }
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

    fn departure(&self) -> Departure {
        if self.grace.is_zero() || lock(&self.held).ran {
            Departure::Stops
        } else if self.control.detached() {
            Departure::Detached
        } else {
            Departure::Waited
        }
    }

    fn on_stop(&self, outbox: &Outbox, hook: Box<dyn FnOnce() + Send>) {
        if self.grace.is_zero() {
            return outbox.on_stop(hook);
        }
        let first = {
            let mut h = lock(&self.held);
            if h.ran {
                drop(h);
                return hook();
            }
            h.hooks.push(hook);
            !std::mem::replace(&mut h.on_job, true)
        };
        if !first {
            return;
        }
        // Weak: the job holds this hook, and a strong flag would keep the job (and the log
        // captured here) alive forever.
        let flag = outbox.weak_stop_flag();
        let alarm = outbox.alarm();
        let (held, log, control) = (self.held.clone(), self.log.clone(), self.control.clone());
        let (grace, run_id) = (self.grace, self.run_id.clone());
        outbox.on_stop(Box::new(move || {
            if flag.reason() != Some(StopReason::ClientGone) {
                return run_held(&held);
            }
            // The client left after the run's end: there is nothing to keep going.
            if log.ended() || !control.detach() {
                return;
            }
            // A subscriber already watching adopts the run as its client leaves.
            if log.adopted() {
                control.adopt();
            }
            log::info!("run {run_id}: detached, its client left; grace {grace:?}");
            alarm.after(
                grace,
                Box::new(move || {
                    if log.ended() {
                        return;
                    }
                    if control.grace_over() {
                        log::info!(
                            "run {run_id}: nobody re-attached within the grace; stopping it"
                        );
                        run_held(&held);
                    } else {
                        log::info!("run {run_id}: re-attached within the grace; it goes on");
                    }
                }),
            );
        }));
    }
}
