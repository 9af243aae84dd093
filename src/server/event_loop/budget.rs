//! The loop's share of the output budget: what it counts as held, when it pauses runs
//! with a client behind, and when it refuses new streams; and each caller's fair share of
//! the budget and of the connection limit (`fair`).

use super::super::fair::CallerId;
use super::{Handler, Server};
use crate::budget;

impl<H: Handler> Server<H> {
    /// Unsent output above which a connection's job gets no more replies taken and its
    /// worker reads no further upstream: the watermark, and far less while the output budget
    /// is spent or the connection's caller is past its fair share of it (so every such run
    /// with a client behind pauses, and clients that keep up do not).
    pub(super) fn out_limit(&self, caller: Option<CallerId>) -> usize {
        let squeezed = self.budget.is_over() || caller.is_some_and(|id| self.callers.is_over(id));
        budget::out_limit(self.cfg.max_output_bytes / 2, squeezed)
    }

    /// What all connections and workers hold for clients now.
    fn held_now(&self) -> usize {
        self.budget
            .held(self.inbox.budget().queued())
            .saturating_add(self.inbox.budget().reading())
    }

    /// Re-decide the output budget with what is held now and publish it; when it became
    /// spent or available, or a caller went past its share or back under it, mark or release
    /// every run by its new limit (a released job goes back on the ready list, as the flush
    /// under the watermark does). True while spent.
    pub(super) fn check_budget(&mut self) -> bool {
        // Large upstream events being read count too: runs that all start at once wait for
        // room to read theirs (`job::RunReads`) and new streams are refused meanwhile.
        self.inbox.budget().counted_unsent(self.budget.unsent());
        let held = self.held_now();
        let now = i64::try_from(held).unwrap_or(i64::MAX);
        crate::metrics::M.output_buffered.add(now - self.published);
        self.published = now;
        let spent_changed = self.budget.update(held);
        let shares_changed = self.callers.update(self.budget.limit());
        if !spent_changed && !shares_changed {
            return self.budget.is_over();
        }
        if spent_changed && self.budget.is_over() {
            log::warn!(
                "output budget spent: {held} bytes held for clients (budget {}); runs with a \
                 client behind stop reading upstream, and new streams get 503 while such \
                 clients hold a quarter of the budget",
                self.budget.limit()
            );
        } else if spent_changed {
            log::info!("output budget available again: {held} bytes held for clients");
        }
        for conn in self.conns.iter().flatten() {
            let Some(job) = conn.job() else { continue };
            let behind = conn.pending_out() > self.out_limit(conn.caller);
            job.set_congested(behind);
            if !behind {
                job.renotify();
            }
        }
        self.budget.is_over()
    }

    /// What clients that stopped reading hold: the unsent output of connections that made no
    /// progress for `BEHIND_AFTER`, with what their workers queued for them.
    fn held_behind(&self) -> usize {
        let now = self.clock.now();
        self.conns
            .iter()
            .flatten()
            .filter(|c| {
                budget::is_behind(
                    c.pending_out(),
                    now.saturating_duration_since(c.last_progress),
                )
            })
            .map(|c| c.pending_out() + c.job().map_or(0, |j| j.queued_bytes()))
            .fold(0, usize::saturating_add)
    }

    /// Why a new stream of `caller` is refused, if it is (the `/metrics` reason): the output
    /// budget is spent, or large upstream events wait for room in it, and clients that stopped
    /// reading hold a quarter of it (issue 45, fault 1: large events of clients that keep up
    /// only wait for room in the budget as they are read, they never refuse anyone); or the
    /// caller is past its fair share while all hold more than half the budget.
    pub(super) fn refuses_stream(&mut self, caller: Option<CallerId>) -> Option<&'static str> {
        let spent = self.check_budget();
        let starved = self.inbox.budget().reads_starved();
        if (spent || starved)
            && budget::refuses_stream(spent, starved, self.held_behind(), self.budget.limit())
        {
            return Some("output_budget");
        }
        let id = caller?;
        let (held, limit) = (self.held_now(), self.budget.limit());
        (!self.callers.admits_stream(id, held, limit, false)).then_some("caller_share")
    }

    /// Count the connection for `caller` (its request's, `None`: callers are not told
    /// apart); false when the caller is past its share of the connection limit while the
    /// connections open are near it.
    pub(super) fn identify(&mut self, slot: usize, caller: Option<std::sync::Arc<str>>) -> bool {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return true;
        };
        let held = budget::OutputBudget::get(&conn.share);
        let same = match (conn.caller, &caller) {
            (Some(id), Some(name)) => self.callers.is(id, name),
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let Some(old) = conn.caller.take() {
                self.callers.leave(old, held);
            }
            if let Some(name) = &caller {
                let id = self.callers.join(name);
                self.callers.set(id, 0, held);
                conn.caller = Some(id);
            }
        }
        match conn.caller {
            Some(id) => self
                .callers
                .admits_connection(id, self.live, self.cfg.max_connections),
            None => true,
        }
    }
}
