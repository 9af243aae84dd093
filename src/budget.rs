//! The output budget, in one home (issue 43): what all connections hold for their clients
//! (unsent output, replies workers queued), and the large upstream events being read for
//! them, against one limit (`--output-budget`). `server` and `a2a` both depend on this module
//! and neither on the other: the loop keeps the ledger ([`OutputBudget`], a [`Share`] per
//! connection) and publishes it into the shared [`Budget`]; an upstream reader holds room for
//! a large event through a [`ReadHold`], which gives its bytes back when dropped. The rules
//! (hysteresis, when a client is behind, when a stream is refused, how much a partial event
//! costs) are pure functions with their table tests here.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::sync::lock;

#[cfg(feature = "identity")]
mod fair;
mod ledger;
pub(crate) use fair::Seat;
pub(crate) use ledger::Ledger;

/// Without per-caller identity the output budget and the connections are one pool: a
/// connection has no seat, and nothing is counted per caller.
#[cfg(not(feature = "identity"))]
mod fair {
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub(crate) struct Seat;

    #[derive(Debug, Default)]
    pub(crate) struct Callers;

    impl Callers {
        pub(crate) fn count(&mut self, _: Seat, _: usize, _: usize) {}
        pub(crate) fn vacate(&mut self, _: Seat, _: usize) {}
        pub(crate) fn squeezed(&self, _: Seat) -> bool {
            false
        }
        pub(crate) fn update(&mut self, _: usize) -> bool {
            false
        }
        pub(crate) fn refuses_stream(&self, _: Seat, _: impl FnOnce() -> usize, _: usize) -> bool {
            false
        }
        pub(crate) fn seat(
            &mut self,
            _: &mut Seat,
            _: Option<std::sync::Arc<str>>,
            _: usize,
            _: usize,
            _: usize,
        ) -> bool {
            true
        }
    }
}

// ---------------------------------------------------------------- the rules

/// A connection with output pending and no write progress for this long has a client that
/// stopped reading (a prompt reader drains a socket buffer in microseconds).
pub(crate) const BEHIND_AFTER: Duration = Duration::from_millis(500);

/// A partial upstream event this large asks for room before more is read: smaller ones
/// never wait.
pub(crate) const GATE_FROM: usize = 256 * 1024;
/// Room is held in steps of this much (one request per step of a large event).
pub(crate) const GATE_STEP: usize = 1024 * 1024;
/// What an event costs while it is read and projected, per byte: its bytes, the JSON read
/// of them and the framed event for the client.
pub(crate) const GATE_COST: usize = 3;

/// The room a partial event of `partial` bytes needs.
pub(crate) fn gate_need(partial: usize) -> usize {
    if partial < GATE_FROM {
        0
    } else {
        partial
            .saturating_mul(GATE_COST)
            .next_multiple_of(GATE_STEP)
    }
}

/// Unsent output above which a connection's job gets no more replies taken and its worker
/// reads no further upstream: the watermark, and far less (`limits::OUTPUT_BEHIND`) while
/// the budget is spent or the connection's caller is past its fair share (`squeezed`), so
/// every such run with a client behind pauses and clients that keep up do not.
pub(crate) fn out_limit(watermark: usize, squeezed: bool) -> usize {
    if squeezed {
        watermark.min(crate::limits::OUTPUT_BEHIND)
    } else {
        watermark
    }
}

/// The client of a connection with `pending` bytes unsent and no write progress for `idle`
/// stopped reading.
pub(crate) fn is_behind(pending: usize, idle: Duration) -> bool {
    pending > 0 && idle >= BEHIND_AFTER
}

/// A new stream is refused for the budget (issue 45, fault 1) only while it is spent — or
/// large reads wait for room in it (what is held then stays just under it) — and clients
/// that stopped reading hold a quarter of it. Large events of clients that keep up only wait
/// for room as they are read: they never refuse anyone.
pub(crate) fn refuses_stream(
    spent: bool,
    reads_starved: bool,
    behind: usize,
    limit: usize,
) -> bool {
    (spent || reads_starved) && behind >= limit / 4
}

// ---------------------------------------------------------------- the loop's ledger

/// Spent past `limit`; available again once the total fell to 7/8 of it, so runs near the
/// limit are not paused and released at every event. Kept by the loop.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    limit: usize,
    over: bool,
    /// Unsent output of all connections (the sum of their shares).
    unsent: usize,
}

/// One connection's unsent output as counted in the budget.
#[derive(Debug, Default)]
pub(crate) struct Share(usize);

impl OutputBudget {
    pub(crate) fn new(limit: usize) -> OutputBudget {
        OutputBudget {
            limit,
            over: false,
            unsent: 0,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The budget is spent (as of the last [`OutputBudget::update`]).
    pub(crate) fn is_over(&self) -> bool {
        self.over
    }

    /// Count a connection's unsent output as `now` bytes.
    pub(crate) fn set(&mut self, share: &mut Share, now: usize) {
        self.unsent = self.unsent - share.0 + now;
        share.0 = now;
    }

    /// Bytes counted for the connection.
    pub(crate) fn get(share: &Share) -> usize {
        share.0
    }

    /// The connection is gone: its share is given back.
    pub(crate) fn release(&mut self, share: Share) {
        self.unsent -= share.0;
    }

    /// Unsent output of all connections.
    pub(crate) fn unsent(&self) -> usize {
        self.unsent
    }

    /// Unsent output plus `queued` (the workers' queues): the bytes held for clients.
    pub(crate) fn held(&self, queued: usize) -> usize {
        self.unsent.saturating_add(queued)
    }

    /// Re-decide with what is held now; true when the budget became spent or available.
    pub(crate) fn update(&mut self, held: usize) -> bool {
        let over = if self.over {
            held > self.limit - self.limit / 8
        } else {
            held > self.limit
        };
        let changed = over != self.over;
        self.over = over;
        changed
    }
}

// ---------------------------------------------------------------- shared with the workers

/// The budget as workers see it: what the loop last counted, the bytes workers queued, and
/// the large upstream events being read (each through a [`ReadHold`]).
pub struct Budget {
    /// The limit (`usize::MAX`: none).
    limit: AtomicUsize,
    /// Unsent output of all connections as the loop last counted it.
    unsent: AtomicUsize,
    /// Bytes queued by all jobs and not taken by the loop yet.
    queued: AtomicUsize,
    reads: Mutex<Reads>,
    room: Condvar,
    /// Readers waiting in `room` (they are woken only when there are some).
    read_waiters: AtomicUsize,
    /// `reads.held`, for the loop to read without the lock.
    reading: AtomicUsize,
    /// Readers that found no room and wait for it (new streams are refused meanwhile).
    starved: AtomicUsize,
}

/// What the large upstream reads of all runs hold.
#[derive(Debug, Default)]
struct Reads {
    held: usize,
    /// The readers holding or waiting, oldest first: the oldest may always go on while the
    /// budget is not spent, so readers that each hold part of what they need never all wait.
    readers: std::collections::BTreeSet<u64>,
    next: u64,
}

/// How often a reader waiting for room looks again without being woken (a safety net: the
/// loop wakes readers when output goes out, holds when they give memory back, aborters when
/// their session ends).
const READ_WAIT_POLL: Duration = Duration::from_secs(1);

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            limit: AtomicUsize::new(limit),
            unsent: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            reads: Mutex::new(Reads::default()),
            room: Condvar::new(),
            read_waiters: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            starved: AtomicUsize::new(0),
        })
    }

    /// The limit the loop decides by (`--output-budget`).
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The loop counted the connections' unsent output: readers waiting for room try again
    /// when it fell.
    pub(crate) fn counted_unsent(&self, unsent: usize) {
        let before = self.unsent.swap(unsent, Ordering::SeqCst);
        if unsent < before && self.read_waiters.load(Ordering::SeqCst) > 0 {
            self.wake_readers();
        }
    }

    /// Wake the readers waiting for room (under the lock they wait with: none misses it), so
    /// they look at the budget and their sessions' abort flags again.
    pub fn wake_readers(&self) {
        let _r = lock(&self.reads);
        self.room.notify_all();
    }

    /// Bytes held by large upstream events being read.
    pub(crate) fn reading(&self) -> usize {
        self.reading.load(Ordering::SeqCst)
    }

    /// Some large upstream event waits for room: the budget is as good as spent even while
    /// what is held stays just under it.
    pub(crate) fn reads_starved(&self) -> bool {
        self.starved.load(Ordering::SeqCst) > 0
    }

    /// Bytes queued by all jobs that the loop has not taken.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    pub(crate) fn add_queued(&self, bytes: usize) {
        self.queued.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn sub_queued(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Room for one upstream stream's large events; it gives up waiting once `aborted` (its
    /// session's flag) is set and [`Budget::wake_readers`] is called.
    pub fn read_hold(self: &Arc<Self>, aborted: Arc<AtomicBool>) -> ReadHold {
        ReadHold {
            budget: self.clone(),
            aborted,
            ticket: None,
            held: 0,
        }
    }
}

/// One upstream stream's large event, held against the output budget: output for clients
/// and events being read share one budget, so runs that all start at once wait here for
/// their large events instead of each reading one whole (issue 36, fault 2: 30 paused
/// readers of `big 10 10` sent at once held 350 MB of output).
pub struct ReadHold {
    budget: Arc<Budget>,
    /// The session was aborted (client gone and no grace holds the run, cancel, shutdown):
    /// stop waiting. Its aborter wakes the waiting holds.
    aborted: Arc<AtomicBool>,
    ticket: Option<u64>,
    held: usize,
}

impl ReadHold {
    /// Hold `bytes` in all for the event being read, granted before its bytes are read: more
    /// waits until they fit, less gives the rest back at once. False: stop reading (the run
    /// is stopping).
    pub fn hold(&mut self, bytes: usize) -> bool {
        let b = &*self.budget;
        let mut r = lock(&b.reads);
        if bytes <= self.held {
            r.held -= self.held - bytes;
            b.reading.store(r.held, Ordering::SeqCst);
            self.held = bytes;
            if bytes == 0
                && let Some(t) = self.ticket.take()
            {
                r.readers.remove(&t);
            }
            if b.read_waiters.load(Ordering::SeqCst) > 0 {
                b.room.notify_all();
            }
            return true;
        }
        let ticket = *self.ticket.get_or_insert_with(|| {
            r.next += 1;
            let t = r.next;
            r.readers.insert(t);
            t
        });
        let more = bytes - self.held;
        // Counted before the first look at the output: the loop, which lowers it and then
        // looks at this count, either sees this reader or is seen by it (no lost wake-up).
        b.read_waiters.fetch_add(1, Ordering::SeqCst);
        let mut waited = false;
        let granted = loop {
            let limit = b.limit.load(Ordering::SeqCst);
            let out = b.unsent.load(Ordering::SeqCst) + b.queued();
            let fits = out.saturating_add(r.held).saturating_add(more) <= limit;
            let oldest = r.readers.first() == Some(&ticket);
            if fits || (oldest && out <= limit - limit / 8) {
                r.held += more;
                b.reading.store(r.held, Ordering::SeqCst);
                self.held = bytes;
                break true;
            }
            if self.aborted.load(Ordering::SeqCst) {
                break false;
            }
            if !waited {
                waited = true;
                b.starved.fetch_add(1, Ordering::SeqCst);
                crate::metrics::M.reads_waiting.add(1);
                log::debug!(
                    "a large upstream event waits for {more} bytes of room in the output \
                     budget ({out} bytes held for clients, {} for events being read)",
                    r.held
                );
            }
            r = b
                .room
                .wait_timeout(r, READ_WAIT_POLL)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        };
        b.read_waiters.fetch_sub(1, Ordering::SeqCst);
        if waited {
            b.starved.fetch_sub(1, Ordering::SeqCst);
            crate::metrics::M.reads_waiting.add(-1);
        }
        granted
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        self.hold(0);
    }
}

#[cfg(test)]
mod tests;
