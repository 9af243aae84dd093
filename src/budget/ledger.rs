//! The loop's ledger of the output budget: every connection's unsent output (a [`Share`]),
//! each caller's part of it ([`Callers`], by the connection's [`Seat`]; one pool without the
//! `identity` feature), and what is published to the workers' [`Budget`]. The loop tells it
//! what changed and asks it what to do; it never looks at a socket.

use std::sync::Arc;

use super::fair::{Callers, Seat};
use super::{Budget, OutputBudget, Share};

pub(crate) struct Ledger {
    out: OutputBudget,
    callers: Callers,
    shared: Arc<Budget>,
    /// What this ledger last added to the `output_buffered` gauge (tests run several servers).
    published: i64,
}

/// What [`Ledger::check`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Check {
    /// The budget is spent.
    pub(crate) spent: bool,
    /// The budget became spent or available, or a caller went past its share or back under
    /// it: every run is to be marked or released by its new limit.
    pub(crate) changed: bool,
}

impl Ledger {
    pub(crate) fn new(limit: usize, shared: Arc<Budget>) -> Ledger {
        shared.set_limit(limit);
        crate::metrics::M.output_budget.set(limit as i64);
        Ledger {
            out: OutputBudget::new(limit),
            callers: Default::default(),
            shared,
            published: 0,
        }
    }

    /// A connection's output is `now` bytes (counted for its caller too).
    pub(crate) fn count(&mut self, share: &mut Share, seat: Seat, now: usize) {
        self.callers.count(seat, OutputBudget::get(share), now);
        self.out.set(share, now);
    }

    /// A connection is gone: its share and its place in its caller's are given back.
    pub(crate) fn leave(&mut self, share: Share, seat: Seat) {
        self.callers.vacate(seat, OutputBudget::get(&share));
        self.out.release(share);
    }

    /// Unsent output above which a connection's job gets no more replies taken and its
    /// worker reads no further upstream: the watermark, and far less while the output budget
    /// is spent or the connection's caller is past its fair share of it (so every such run
    /// with a client behind pauses, and clients that keep up do not).
    pub(crate) fn out_limit(&self, watermark: usize, seat: Seat) -> usize {
        let squeezed = self.out.is_over() || self.callers.squeezed(seat);
        super::out_limit(watermark, squeezed)
    }

    /// What all connections and workers hold for clients now.
    fn held_now(&self) -> usize {
        self.out
            .held(self.shared.queued())
            .saturating_add(self.shared.reading())
    }

    /// Re-decide the output budget with what is held now and publish it.
    pub(crate) fn check(&mut self) -> Check {
        // Large upstream events being read count too: runs that all start at once wait for
        // room to read theirs (`ReadHold`) and new streams are refused meanwhile.
        self.shared.counted_unsent(self.out.unsent());
        let held = self.held_now();
        let now = i64::try_from(held).unwrap_or(i64::MAX);
        crate::metrics::M.output_buffered.add(now - self.published);
        self.published = now;
        let spent_changed = self.out.update(held);
        let shares_changed = self.callers.update(self.out.limit());
        if spent_changed && self.out.is_over() {
            log::warn!(
                "output budget spent: {held} bytes held for clients (budget {}); runs with a \
                 client behind stop reading upstream, and new streams get 503 while such \
                 clients hold a quarter of the budget",
                self.out.limit()
            );
        } else if spent_changed {
            log::info!("output budget available again: {held} bytes held for clients");
        }
        Check {
            spent: self.out.is_over(),
            changed: spent_changed || shares_changed,
        }
    }

    /// Why a new stream of `caller` is refused, if it is (the `/metrics` reason): the output
    /// budget is spent, or large upstream events wait for room in it, and clients that stopped
    /// reading hold a quarter of it (`held_behind`; issue 45, fault 1: large events of clients
    /// that keep up only wait for room in the budget as they are read, they never refuse
    /// anyone); or the caller is past its fair share while all hold more than half the budget.
    pub(crate) fn refuses_stream(
        &self,
        spent: bool,
        seat: Seat,
        held_behind: impl FnOnce() -> usize,
    ) -> Option<&'static str> {
        let starved = self.shared.reads_starved();
        if (spent || starved)
            && super::refuses_stream(spent, starved, held_behind(), self.out.limit())
        {
            return Some("output_budget");
        }
        self.callers
            .refuses_stream(seat, || self.held_now(), self.out.limit())
            .then_some("caller_share")
    }

    /// Count a connection holding `held` bytes for `caller` (`None`: callers are not told
    /// apart), moving it from the caller it was counted for (its `seat`); false when the
    /// caller is past its share of the connection limit while `live` connections are near it.
    pub(crate) fn identify(
        &mut self,
        seat: &mut Seat,
        caller: Option<Arc<str>>,
        held: usize,
        live: usize,
        max_connections: usize,
    ) -> bool {
        self.callers.seat(seat, caller, held, live, max_connections)
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        crate::metrics::M.output_buffered.add(-self.published);
    }
}
