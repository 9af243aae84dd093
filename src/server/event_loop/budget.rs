//! The loop's share of the output budget: what it counts as held, when it pauses runs
//! with a client behind, and when it refuses new streams.

use super::super::limits;
use super::{Handler, Server};

impl<H: Handler> Server<H> {
    /// Unsent output above which a connection's job gets no more replies taken and its
    /// worker reads no further upstream: the watermark, and far less while the output budget
    /// is spent (so every run with a client behind pauses, and clients that keep up do not).
    pub(super) fn out_limit(&self) -> usize {
        let watermark = self.cfg.max_output_bytes / 2;
        if self.budget.is_over() {
            watermark.min(limits::OUTPUT_BEHIND)
        } else {
            watermark
        }
    }

    /// Re-decide the output budget with what is held now and publish it; when it became
    /// spent or available, mark or release every run by the new limit (a released job goes
    /// back on the ready list, as the flush under the watermark does). True while spent.
    pub(super) fn check_budget(&mut self) -> bool {
        // Large upstream events being read count too: runs that all start at once wait for
        // room to read theirs (`job::RunReads`) and new streams are refused meanwhile.
        self.inbox.counted_unsent(self.budget.unsent());
        let held = self
            .budget
            .held(self.inbox.queued())
            .saturating_add(self.inbox.reading());
        let now = i64::try_from(held).unwrap_or(i64::MAX);
        crate::metrics::M.output_buffered.add(now - self.published);
        self.published = now;
        if !self.budget.update(held) {
            return self.budget.is_over();
        }
        if self.budget.is_over() {
            log::warn!(
                "output budget spent: {held} bytes held for clients (budget {}); new streams \
                 get 503 and runs with a client behind stop reading upstream",
                self.budget.limit()
            );
        } else {
            log::info!("output budget available again: {held} bytes held for clients");
        }
        let limit = self.out_limit();
        for conn in self.conns.iter().flatten() {
            let Some(job) = conn.job() else { continue };
            let behind = conn.pending_out() > limit;
            job.set_congested(behind);
            if !behind {
                job.renotify();
            }
        }
        self.budget.is_over()
    }

    /// The output budget is spent, or large upstream events wait for room in it (what is
    /// held then stays just under the budget, yet a new stream would only add to it).
    pub(super) fn refuses_streams(&mut self) -> bool {
        self.check_budget() || self.inbox.reads_starved()
    }
}
