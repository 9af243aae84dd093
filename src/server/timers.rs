//! Deadlines for the event loop, driven by an injectable clock.
//!
//! The set is a min-heap of `(deadline, token, kind)`. Entries are never removed in place:
//! a connection remembers which deadline it armed per kind, and an entry that no longer
//! matches is skipped when it pops (lazy deletion). Re-arming a kind to a *later* time
//! pushes nothing; the earlier entry fires, and its owner re-arms for the remainder. So a
//! busy SSE stream costs one heap entry per heartbeat interval, not one per event.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[cfg(test)]
pub(crate) use crate::clock::ManualClock;
pub use crate::clock::{Clock, SystemClock};

/// What a connection deadline is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// Header, body or keep-alive idle deadline (depends on the connection state).
    Read = 0,
    /// SSE heartbeat after silence.
    Heartbeat = 1,
    /// Pending output that makes no progress.
    WriteStall = 2,
}

pub(crate) const TIMER_KINDS: usize = 3;

/// Per-connection record of the deadline currently in the heap for each kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Armed {
    at: [Option<Instant>; TIMER_KINDS],
}

impl Armed {}

#[derive(Debug, Default)]
pub(crate) struct TimerSet {
    heap: BinaryHeap<Reverse<(Instant, usize, TimerKind)>>,
}

impl TimerSet {
    pub(crate) fn new() -> TimerSet {
        TimerSet::default()
    }

    /// Make sure an entry fires no later than `at` for `(token, kind)`.
    pub(crate) fn arm(&mut self, armed: &mut Armed, token: usize, kind: TimerKind, at: Instant) {
        match armed.at[kind as usize] {
            Some(existing) if existing <= at => {}
            _ => {
                armed.at[kind as usize] = Some(at);
                self.heap.push(Reverse((at, token, kind)));
            }
        }
    }

    /// Forget the armed deadline; the heap entry becomes stale and is skipped.
    pub(crate) fn disarm(armed: &mut Armed, kind: TimerKind) {
        armed.at[kind as usize] = None;
    }

    /// Time until the earliest entry, `None` when empty.
    pub(crate) fn timeout(&self, now: Instant) -> Option<Duration> {
        self.heap
            .peek()
            .map(|Reverse((at, _, _))| at.saturating_duration_since(now))
    }

    /// Pop one entry due at `now`. The caller must call [`TimerSet::accept`] with the owner's
    /// `Armed` to learn whether it is still current.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, usize, TimerKind)> {
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    /// True when the popped entry is the owner's current deadline; clears it so the owner can
    /// re-arm.
    pub(crate) fn accept(armed: &mut Armed, at: Instant, kind: TimerKind) -> bool {
        if armed.at[kind as usize] == Some(at) {
            armed.at[kind as usize] = None;
            true
        } else {
            false
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// Hooks set to run on the loop at a deadline (a run's disconnect grace): ordered by
/// deadline, then by when they were set.
pub(crate) struct Alarms<H> {
    due: std::collections::BTreeMap<(Instant, u64), H>,
    seq: u64,
}

impl<H> Default for Alarms<H> {
    fn default() -> Alarms<H> {
        Alarms {
            due: std::collections::BTreeMap::new(),
            seq: 0,
        }
    }
}

impl<H> Alarms<H> {
    pub(crate) fn set(&mut self, at: Instant, hook: H) {
        self.seq += 1;
        self.due.insert((at, self.seq), hook);
    }

    /// Time until the earliest alarm, `None` when none is set.
    pub(crate) fn timeout(&self, now: Instant) -> Option<Duration> {
        self.due
            .first_key_value()
            .map(|((at, _), _)| at.saturating_duration_since(now))
    }

    /// Take every alarm, due or not (the loop is ending: nobody will come back for them).
    pub(crate) fn take_all(&mut self) -> Vec<H> {
        std::mem::take(&mut self.due).into_values().collect()
    }

    /// Take one alarm due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<H> {
        match self.due.first_key_value() {
            Some(((at, _), _)) if *at <= now => self.due.pop_first().map(|(_, h)| h),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarms_fire_at_their_deadline_in_the_order_they_were_set() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let mut alarms = Alarms::default();
        alarms.set(t0 + Duration::from_secs(2), "b");
        alarms.set(t0 + Duration::from_secs(1), "a");
        alarms.set(t0 + Duration::from_secs(2), "c");
        assert_eq!(alarms.timeout(t0), Some(Duration::from_secs(1)));
        assert_eq!(alarms.pop_due(t0), None);
        assert_eq!(alarms.pop_due(t0 + Duration::from_secs(1)), Some("a"));
        let later = t0 + Duration::from_secs(5);
        assert_eq!(alarms.pop_due(later), Some("b"));
        assert_eq!(alarms.pop_due(later), Some("c"));
        assert_eq!(alarms.pop_due(later), None);
        assert_eq!(alarms.timeout(later), None);
    }

    #[test]
    fn earliest_first_and_stale_skipped() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let mut set = TimerSet::new();
        let mut a = Armed::default();
        let mut b = Armed::default();
        set.arm(&mut a, 1, TimerKind::Read, t0 + Duration::from_secs(5));
        set.arm(&mut b, 2, TimerKind::Heartbeat, t0 + Duration::from_secs(3));
        assert_eq!(set.timeout(t0), Some(Duration::from_secs(3)));
        // Re-arming later pushes nothing.
        set.arm(&mut b, 2, TimerKind::Heartbeat, t0 + Duration::from_secs(9));
        assert_eq!(set.len(), 2);
        clock.advance(Duration::from_secs(3));
        let (at, tok, kind) = set.pop_due(clock.now()).unwrap();
        assert_eq!((tok, kind), (2, TimerKind::Heartbeat));
        assert!(TimerSet::accept(&mut b, at, kind));
        assert!(set.pop_due(clock.now()).is_none());
        // Disarmed entries are stale when they pop.
        TimerSet::disarm(&mut a, TimerKind::Read);
        clock.advance(Duration::from_secs(2));
        let (at, _, kind) = set.pop_due(clock.now()).unwrap();
        assert!(!TimerSet::accept(&mut a, at, kind));
        assert!(set.is_empty());
    }

    #[test]
    fn earlier_rearm_supersedes() {
        let t0 = ManualClock::new().now();
        let mut set = TimerSet::new();
        let mut a = Armed::default();
        set.arm(&mut a, 7, TimerKind::Read, t0 + Duration::from_secs(10));
        set.arm(&mut a, 7, TimerKind::Read, t0 + Duration::from_secs(1));
        let (at, _, kind) = set.pop_due(t0 + Duration::from_secs(1)).unwrap();
        assert!(TimerSet::accept(&mut a, at, kind));
        let (at, _, kind) = set.pop_due(t0 + Duration::from_secs(10)).unwrap();
        assert!(!TimerSet::accept(&mut a, at, kind));
    }
}
