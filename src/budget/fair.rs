//! Fair shares of the output budget and of the connection limit between callers (issue 45
//! item 2, issue 44 item 3; feature `identity`): pure bookkeeping, the loop acts on it.
//!
//! The policy. A caller's fair share of a pool (bytes held for its clients, or connections)
//! is the pool divided by the callers with a connection open, and never more than half of it:
//! a caller alone still leaves room for the next one. A caller past its share of the output
//! budget is *over* (again under once it fell to 7/8 of the share, like [`OutputBudget`]'s
//! hysteresis): its runs with a client behind are paused and its new streams refused while
//! the total held is past half the budget; a caller under its share is refused a stream only
//! when the whole budget is spent. Connections: past 7/8 of the limit only a caller under its
//! share of connections is served; so one caller cannot take the last connections from the
//! others.
//!
//! [`OutputBudget`]: super::OutputBudget

use std::collections::HashMap;
use std::sync::Arc;

/// A caller's place in [`Callers`] (valid while one of its connections is open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallerId(usize);

/// A connection's place among the callers: whose requests it carries (the last one
/// identified; none until a request names its caller, and always none while callers are not
/// told apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seat(Option<CallerId>);

#[derive(Debug)]
struct Entry {
    name: Arc<str>,
    conns: usize,
    held: usize,
    over: bool,
}

/// What each caller with a connection open holds: connections and unsent output.
#[derive(Debug, Default)]
pub(crate) struct Callers {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    by_name: HashMap<Arc<str>, usize>,
    active: usize,
    /// Some caller went over or under its share since the last [`Callers::take_changed`].
    changed: bool,
}

impl Callers {
    /// A connection of `name` is open (counted until [`Callers::leave`]).
    pub(crate) fn join(&mut self, name: &Arc<str>) -> CallerId {
        if let Some(&i) = self.by_name.get(name)
            && let Some(Some(e)) = self.slots.get_mut(i)
        {
            e.conns += 1;
            return CallerId(i);
        }
        let entry = Entry {
            name: name.clone(),
            conns: 1,
            held: 0,
            over: false,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(entry);
                i
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        self.by_name.insert(name.clone(), i);
        self.active += 1;
        CallerId(i)
    }

    /// One of the caller's connections is gone, with whatever it held.
    pub(crate) fn leave(&mut self, id: CallerId, held: usize) {
        let Some(Some(e)) = self.slots.get_mut(id.0) else {
            return;
        };
        e.held = e.held.saturating_sub(held);
        e.conns = e.conns.saturating_sub(1);
        if e.conns == 0 {
            if e.over {
                self.changed = true;
            }
            self.by_name.remove(&e.name);
            self.slots[id.0] = None;
            self.free.push(id.0);
            self.active -= 1;
        }
    }

    /// A connection of the caller holds `now` bytes instead of `before`.
    pub(crate) fn set(&mut self, id: CallerId, before: usize, now: usize) {
        if let Some(Some(e)) = self.slots.get_mut(id.0) {
            e.held = e.held.saturating_sub(before).saturating_add(now);
        }
    }

    /// The caller is `name`.
    pub(crate) fn is(&self, id: CallerId, name: &str) -> bool {
        matches!(self.slots.get(id.0), Some(Some(e)) if &*e.name == name)
    }

    /// Callers with a connection open.
    #[cfg(test)]
    pub(crate) fn active(&self) -> usize {
        self.active
    }

    /// Each caller's share of `pool`: divided by the active callers, at most half of it.
    pub(crate) fn share(&self, pool: usize) -> usize {
        pool / self.active.max(2)
    }

    /// Bytes held for the caller's clients.
    #[cfg(test)]
    pub(crate) fn held(&self, id: CallerId) -> usize {
        match self.slots.get(id.0) {
            Some(Some(e)) => e.held,
            _ => 0,
        }
    }

    /// The caller is past its share of the output budget (as of the last update).
    pub(crate) fn is_over(&self, id: CallerId) -> bool {
        matches!(self.slots.get(id.0), Some(Some(e)) if e.over)
    }

    /// Re-decide every caller against its share of `budget`; true when one went over or under
    /// (since the last call).
    pub(crate) fn update(&mut self, budget: usize) -> bool {
        let share = self.share(budget);
        for e in self.slots.iter_mut().flatten() {
            let over = if e.over {
                e.held > share - share / 8
            } else {
                e.held > share
            };
            if over != e.over {
                e.over = over;
                self.changed = true;
            }
        }
        std::mem::take(&mut self.changed)
    }

    /// Whether a new stream of the caller may start: never while the whole budget is spent;
    /// for a caller over its share, not while what all hold is past half the budget.
    pub(crate) fn admits_stream(
        &self,
        id: CallerId,
        held: usize,
        budget: usize,
        spent: bool,
    ) -> bool {
        !(spent || self.is_over(id) && held > budget / 2)
    }

    /// Whether the caller's connection (counted in `live` and in its own) may be served with
    /// `live` connections open of at most `limit`: always below 7/8 of the limit, past it
    /// only within the caller's share of the limit.
    pub(crate) fn admits_connection(&self, id: CallerId, live: usize, limit: usize) -> bool {
        let mine = match self.slots.get(id.0) {
            Some(Some(e)) => e.conns,
            _ => 0,
        };
        live <= limit.saturating_sub((limit / 8).max(1)) || mine <= self.share(limit).max(1)
    }

    // What the ledger asks, by a connection's seat.

    /// The connection holds `now` bytes instead of `before`.
    pub(crate) fn count(&mut self, seat: Seat, before: usize, now: usize) {
        if let Some(id) = seat.0 {
            self.set(id, before, now);
        }
    }

    /// The connection is gone with what it held.
    pub(crate) fn vacate(&mut self, seat: Seat, held: usize) {
        if let Some(id) = seat.0 {
            self.leave(id, held);
        }
    }

    /// The connection's caller is past its share of the output budget.
    pub(crate) fn squeezed(&self, seat: Seat) -> bool {
        seat.0.is_some_and(|id| self.is_over(id))
    }

    /// A new stream of the connection's caller waits (`admits_stream` with the budget not
    /// spent: that is the ledger's own refusal).
    pub(crate) fn refuses_stream(
        &self,
        seat: Seat,
        held: impl FnOnce() -> usize,
        budget: usize,
    ) -> bool {
        seat.0
            .is_some_and(|id| !self.admits_stream(id, held(), budget, false))
    }

    /// Seat a connection holding `held` bytes for `caller` (`None`: callers are not told
    /// apart), moving it from the caller it was counted for; false when the caller is past its
    /// share of the connection limit while `live` connections are near it.
    pub(crate) fn seat(
        &mut self,
        seat: &mut Seat,
        caller: Option<Arc<str>>,
        held: usize,
        live: usize,
        max_connections: usize,
    ) -> bool {
        let same = match (seat.0, &caller) {
            (Some(id), Some(name)) => self.is(id, name),
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let Some(old) = seat.0.take() {
                self.leave(old, held);
            }
            if let Some(name) = &caller {
                let id = self.join(name);
                self.set(id, 0, held);
                seat.0 = Some(id);
            }
        }
        match seat.0 {
            Some(id) => self.admits_connection(id, live, max_connections),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_callers_share_is_the_pool_over_the_active_callers_and_at_most_half() {
        let mut c = Callers::default();
        assert_eq!(c.share(800), 400, "nobody yet: half");
        let bob = c.join(&name("bob"));
        assert_eq!(
            c.share(800),
            400,
            "alone: still half, room for the next one"
        );
        let bob2 = c.join(&name("bob"));
        assert_eq!(bob, bob2, "one caller, two connections");
        assert_eq!(c.active(), 1);
        let alice = c.join(&name("alice"));
        let carol = c.join(&name("carol"));
        assert_ne!(alice, carol);
        assert_eq!(c.active(), 3);
        assert_eq!(c.share(900), 300);
        c.leave(carol, 0);
        c.leave(bob, 0);
        assert_eq!(c.active(), 2, "bob still has a connection");
        c.leave(bob2, 0);
        assert_eq!(c.active(), 1);
        // A slot freed is reused by a new caller, with nothing of the old one.
        let dave = c.join(&name("dave"));
        assert_eq!(c.held(dave), 0);
        assert!(!c.is_over(dave));
        assert_eq!(c.active(), 2);
    }

    #[test]
    fn held_bytes_add_up_per_caller_and_are_given_back_on_leave() {
        let mut c = Callers::default();
        let (bob, alice) = (c.join(&name("bob")), c.join(&name("alice")));
        let bob2 = c.join(&name("bob"));
        c.set(bob, 0, 300);
        c.set(bob2, 0, 200);
        c.set(alice, 0, 10);
        assert_eq!(c.held(bob), 500);
        assert_eq!(c.held(alice), 10);
        c.set(bob, 300, 100); // written
        assert_eq!(c.held(bob), 300);
        c.leave(bob2, 200);
        assert_eq!(c.held(bob), 100);
    }

    #[test]
    fn a_caller_past_its_share_is_over_until_it_fell_to_seven_eighths_of_it() {
        let mut c = Callers::default();
        let (bob, alice) = (c.join(&name("bob")), c.join(&name("alice")));
        // Budget 1600, two callers: share 800.
        c.set(bob, 0, 800);
        assert!(!c.update(1600), "at the share is within it");
        c.set(bob, 800, 801);
        assert!(c.update(1600));
        assert!(c.is_over(bob) && !c.is_over(alice));
        assert!(!c.update(1600), "no change, no news");
        c.set(bob, 801, 701);
        assert!(!c.update(1600), "under the share is not enough");
        assert!(c.is_over(bob));
        c.set(bob, 701, 700);
        assert!(c.update(1600));
        assert!(!c.is_over(bob));
        // A third caller makes every share smaller.
        let carol = c.join(&name("carol"));
        assert!(c.update(1600), "700 > 1600 / 3");
        assert!(c.is_over(bob));
        // The over caller leaving is news too (its runs need no release, the others' share grew).
        c.leave(carol, 0);
        c.leave(bob, 700);
        assert!(c.update(1600));
    }

    #[test]
    fn a_caller_over_its_share_is_refused_streams_first_and_the_others_only_when_all_is_spent() {
        let mut c = Callers::default();
        let (bob, alice) = (c.join(&name("bob")), c.join(&name("alice")));
        c.set(bob, 0, 900);
        c.update(1600);
        assert!(c.is_over(bob));
        // Total 900 past half of 1600: bob waits, alice gets in.
        assert!(!c.admits_stream(bob, 900, 1600, false));
        assert!(c.admits_stream(alice, 900, 1600, false));
        // The whole budget spent: nobody.
        assert!(!c.admits_stream(alice, 1700, 1600, true));
        // Over his share but little held in all (many callers): bob still gets in.
        let others: Vec<_> = (0..6).map(|i| c.join(&name(&format!("c{i}")))).collect();
        c.set(bob, 900, 300);
        c.update(1600);
        assert!(c.is_over(bob), "300 > 1600 / 8");
        assert!(c.admits_stream(bob, 700, 1600, false));
        assert_eq!(others.len(), 6);
    }

    #[test]
    fn a_connection_seated_for_another_caller_takes_what_it_holds_along() {
        let mut c = Callers::default();
        let mut seat = Seat::default();
        assert!(c.seat(&mut seat, None, 100, 1, 16), "nobody told apart");
        assert_eq!((seat, c.active()), (Seat::default(), 0));
        assert!(c.seat(&mut seat, Some(name("bob")), 100, 1, 16));
        let bob = seat.0.unwrap();
        assert_eq!(c.held(bob), 100);
        // The same caller again: counted once.
        assert!(c.seat(&mut seat, Some(name("bob")), 100, 1, 16));
        assert_eq!((c.held(bob), c.active()), (100, 1));
        c.count(seat, 100, 250);
        assert_eq!(c.held(bob), 250);
        // A keep-alive connection's next request is alice's: bob's part goes with it.
        assert!(c.seat(&mut seat, Some(name("alice")), 250, 1, 16));
        let alice = seat.0.unwrap();
        assert_eq!((c.held(alice), c.active()), (250, 1));
        c.vacate(seat, 250);
        assert_eq!(c.active(), 0);
    }

    #[test]
    fn past_seven_eighths_of_the_connection_limit_only_callers_under_their_share_get_in() {
        let mut c = Callers::default();
        let bob = c.join(&name("bob"));
        for _ in 1..15 {
            c.join(&name("bob"));
        }
        // 16 allowed; bob holds 15 (past 14 = 7/8): his share is 8, he is refused.
        assert!(c.admits_connection(bob, 14, 16), "below the mark: anyone");
        assert!(!c.admits_connection(bob, 15, 16));
        let alice = c.join(&name("alice"));
        assert!(
            c.admits_connection(alice, 16, 16),
            "alice, one connection, gets in"
        );
        assert!(!c.admits_connection(bob, 16, 16));
        // A tiny limit still lets each caller have one.
        let mut d = Callers::default();
        let x = d.join(&name("x"));
        assert!(d.admits_connection(x, 1, 1));
    }
}
