//! The adapter's [`StreamTap`]: every event of a run goes into its replay log (and, when the
//! thread's conversation is kept, its part of it) before the client sees it; the run's end in the log is a fact of its
//! life cell (`LogEnded`: a client leaving after it changes nothing). Whether a departed
//! client is waited for is the cell's too (`crate::life`), not the tap's.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::adapter::state::replay::RunLog;
use crate::agui::events::Event;
use crate::app::StreamTap;
use crate::clock::Clock;
use crate::conversation::Ops;
use crate::life::Cell;
use crate::server::job::Frame;
use crate::sync::lock;

pub(crate) struct RunTee {
    log: Arc<RunLog>,
    /// The run's part of the thread's stored conversation, recorded as its events go out
    /// (`None`: none is kept); the driver takes it at the run's end (`Run::record_turn`).
    ops: Mutex<Option<Ops>>,
    cell: Arc<Cell>,
    clock: Arc<dyn Clock>,
    started: Instant,
}

impl RunTee {
    pub(crate) fn new(
        log: Arc<RunLog>,
        clock: Arc<dyn Clock>,
        cell: Arc<Cell>,
        ops: Option<Ops>,
    ) -> RunTee {
        RunTee {
            log,
            ops: Mutex::new(ops),
            cell,
            started: clock.now(),
            clock,
        }
    }

    /// What the run recorded of its conversation, once (later events are not recorded).
    pub(crate) fn take_ops(&self) -> Option<Ops> {
        lock(&self.ops).take()
    }
}

impl StreamTap for RunTee {
    fn event(&self, id: u64, frame: &Frame, event: Option<&Event>) {
        self.log.append(frame.clone());
        if let Some(e) = event
            && let Some(ops) = lock(&self.ops).as_mut()
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
        self.cell.send(crate::life::Event::LogEnded);
        if delivered {
            crate::metrics::M
                .run_duration
                .observe(self.clock.now().saturating_duration_since(self.started));
        }
    }

    fn ended(&self) -> bool {
        self.log.ended()
    }
}
