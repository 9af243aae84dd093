//! The link between the loop and one worker job.
//!
//! Each job has its own bounded reply queue, so a slow client only ever blocks its own worker
//! (which then stops reading upstream): backpressure without head-of-line blocking. A worker
//! that queues into an empty queue puts the job on the shared ready list and wakes the loop
//! once; the loop drains ready jobs. The loop tells a worker to stop (client gone, shutdown)
//! through a flag plus hooks, which the worker uses to close its upstream socket at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::http::Response;

/// Identifies a connection across slot reuse: slot index plus a generation counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConnId {
    pub(crate) slot: usize,
    pub(crate) generation: u64,
}

/// One framed SSE event, shared by the reply and the run's replay log. A `Vec` inside the
/// `Arc` (not `Arc<[u8]>`): the framed bytes move in without a copy.
pub(crate) type Frame = Arc<Vec<u8>>;

/// What a worker sends to the loop.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A complete response; the job is finished.
    Response(Response),
    /// Start the SSE response (head is written by the loop).
    StartStream(Vec<(&'static str, String)>),
    /// One SSE event, already framed (`id: N\ndata: …\n\n`); shared with the run's replay
    /// log, so a large event is held once.
    Event(Frame),
    /// The stream ended after its terminal event.
    EndStream,
}

impl Reply {
    /// Bytes the reply holds (what it costs while queued).
    fn size(&self) -> usize {
        match self {
            Reply::Response(r) => r.body.len(),
            Reply::Event(e) => e.len(),
            Reply::StartStream(_) | Reply::EndStream => 0,
        }
    }
}

/// Shared between the loop ("ready list") and all jobs.
pub(crate) struct Inbox {
    ready: Mutex<Vec<Arc<JobShared>>>,
    waker: Box<dyn Fn() + Send + Sync>,
    /// Bytes queued by all jobs and not taken by the loop yet (their share of the output
    /// budget).
    queued: AtomicUsize,
    /// Large upstream events being read, against the output budget ([`RunReads`]).
    reads: Mutex<Reads>,
    room: Condvar,
    /// Readers waiting in `room` (the loop wakes them only when there are some).
    read_waiters: AtomicUsize,
    /// `reads.held`, for the loop to read without the lock.
    reading: AtomicUsize,
    /// Unsent output of all connections as the loop last counted it.
    unsent: AtomicUsize,
    /// The output budget (`usize::MAX`: none).
    limit: AtomicUsize,
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

impl Inbox {
    pub(crate) fn new(waker: Box<dyn Fn() + Send + Sync>) -> Arc<Inbox> {
        Arc::new(Inbox {
            ready: Mutex::new(Vec::new()),
            waker,
            queued: AtomicUsize::new(0),
            reads: Mutex::new(Reads::default()),
            room: Condvar::new(),
            read_waiters: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            unsent: AtomicUsize::new(0),
            limit: AtomicUsize::new(usize::MAX),
        })
    }

    /// The output budget large upstream reads are held against.
    pub(crate) fn set_output_budget(&self, limit: usize) {
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

    /// Wake the readers waiting for room (under the lock they wait with: none misses it).
    fn wake_readers(&self) {
        let _r = lock(&self.reads);
        self.room.notify_all();
    }

    /// Bytes held by large upstream events being read (part of what the budget counts).
    pub(crate) fn reading(&self) -> usize {
        self.reading.load(Ordering::SeqCst)
    }

    /// Bytes queued by all jobs that the loop has not taken.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Jobs that queued something since the last call.
    pub(crate) fn take_ready(&self) -> Vec<Arc<JobShared>> {
        std::mem::take(&mut *lock(&self.ready))
    }

    fn notify(&self, job: Arc<JobShared>) {
        lock(&self.ready).push(job);
        crate::metrics::M.loop_wakes.inc();
        (self.waker)();
    }
}

use crate::limits;
use crate::sync::lock;

struct Queue {
    items: VecDeque<Reply>,
    /// Bytes of the queued replies: a worker blocks above `JOB_QUEUE_BYTES` as well as above
    /// the count, so a slow reader holds at most that much per run (plus one large reply).
    bytes: usize,
    /// The worker dropped its end.
    closed: bool,
    /// The job is on the inbox ready list and will be drained.
    notified: bool,
    /// Senders blocked on a full queue; the loop signals only when there are some (an
    /// unconditional notify is a futex system call on every drain).
    waiting: usize,
}

/// Why the loop stopped a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// The client went away (or was dropped as too slow): nobody reads replies any more.
    ClientGone,
    /// The server is shutting down: abort upstream work, but the terminal event is still read.
    Shutdown,
}

/// One job's state, shared by the loop (which keeps the `Arc<JobShared>`) and the worker ([`Outbox`]).
pub(crate) struct JobShared {
    pub(crate) conn: ConnId,
    queue: Mutex<Queue>,
    space: Condvar,
    stop: AtomicU8,
    /// The connection's unsent output is above the watermark (published by the loop): the
    /// worker reads no more upstream until it is not, so a paused reader holds at most the
    /// watermark plus the one event that crossed it.
    congested: AtomicBool,
    stop_hooks: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    capacity: usize,
    inbox: Arc<Inbox>,
}

impl JobShared {
    /// Put the job on the inbox ready list and wake the loop (the caller saw it was not
    /// there yet); the queue lock is released first.
    fn mark_ready(self: &Arc<Self>, mut q: MutexGuard<'_, Queue>) {
        q.notified = true;
        drop(q);
        self.inbox.notify(self.clone());
    }

    /// Ask the worker to stop and run its stop hooks (once). `ClientGone` wins over
    /// `Shutdown` when both happen.
    pub(crate) fn stop(&self, reason: StopReason) {
        let code = match reason {
            StopReason::Shutdown => 1,
            StopReason::ClientGone => 2,
        };
        let prev = self.stop.fetch_max(code, Ordering::SeqCst);
        if prev == 0 {
            let hooks = std::mem::take(&mut *lock(&self.stop_hooks));
            for hook in hooks {
                hook();
            }
        }
        // Hold the queue lock so a sender between its check and its wait cannot miss this.
        let _q = lock(&self.queue);
        self.space.notify_all();
    }

    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        match self.stop.load(Ordering::SeqCst) {
            0 => None,
            1 => Some(StopReason::Shutdown),
            _ => Some(StopReason::ClientGone),
        }
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stop_reason().is_some()
    }

    /// The loop's view of the connection's output: above the watermark or not.
    pub(crate) fn set_congested(&self, on: bool) {
        let was = self.congested.swap(on, Ordering::SeqCst);
        if was && !on {
            let q = lock(&self.queue);
            if q.waiting > 0 {
                self.space.notify_all();
            }
        }
    }

    /// Take up to `max` queued replies, stopping once `budget` bytes are taken (at least
    /// one reply, however large). `closed` reports a worker that has gone away.
    pub(crate) fn drain(&self, max: usize, budget: usize, out: &mut Vec<Reply>) -> bool {
        let mut q = lock(&self.queue);
        q.notified = false;
        let mut taken = 0;
        let mut n = 0;
        while n < max && (n == 0 || taken < budget) {
            let Some(r) = q.items.pop_front() else { break };
            taken += r.size();
            out.push(r);
            n += 1;
        }
        q.bytes -= taken;
        self.inbox.queued.fetch_sub(taken, Ordering::Relaxed);
        // A quiet job (an event at a time) keeps no queue memory between its events: a
        // waiting stream holds none. A busy one keeps its ring.
        let pace = if n <= 1 {
            crate::buffers::Pace::Quiet
        } else {
            crate::buffers::Pace::Burst
        };
        crate::buffers::settle(&mut q.items, pace, usize::MAX);
        if taken > budget {
            // The output will be above the watermark once these are written into it: say
            // so before a waiting worker looks (the flush that brings it down clears it).
            self.congested.store(true, Ordering::SeqCst);
        }
        if n > 0 && q.waiting > 0 {
            self.space.notify_all();
        }
        q.closed && q.items.is_empty()
    }

    /// The loop took the job off the ready list but will not drain it now (its connection's
    /// output is above the watermark): the next `renotify` or send must put it back.
    pub(crate) fn park(&self) {
        lock(&self.queue).notified = false;
    }

    /// Put the job back on the ready list (used when the loop stopped draining early).
    pub(crate) fn renotify(self: &Arc<Self>) {
        let q = lock(&self.queue);
        if !q.notified && (!q.items.is_empty() || q.closed) {
            self.mark_ready(q);
        }
    }
}

impl Drop for JobShared {
    fn drop(&mut self) {
        // Replies nobody will take (the connection closed first) leave the budget with the job.
        let q = self.queue.get_mut().unwrap_or_else(|e| e.into_inner());
        self.inbox.queued.fetch_sub(q.bytes, Ordering::Relaxed);
    }
}

/// The worker's end: send replies, observe the stop flag, register stop hooks.
pub struct Outbox {
    shared: Arc<JobShared>,
    /// For the access log: the status of the answer and the bytes handed to the loop.
    sent: std::cell::Cell<(u16, u64)>,
    /// Events are queued without waking the loop until [`Outbox::flush`] (the worker has
    /// more upstream bytes in hand): one wake per burst instead of one per event.
    held: std::cell::Cell<bool>,
}

/// One upstream stream's large event, held against the output budget: output for clients
/// and events being read share one budget, so runs that all start at once wait here for
/// their large events instead of each reading one whole (issue 36, fault 2: 30 paused
/// readers of `big 10 10` sent at once held 350 MB of output).
struct RunReads {
    inbox: Arc<Inbox>,
    /// The session was aborted (client gone and no grace holds the run, cancel, shutdown):
    /// stop waiting. Its aborter wakes the waiting gates.
    aborted: Arc<AtomicBool>,
    ticket: Option<u64>,
    held: usize,
}

/// How often a reader waiting for room looks again without being woken (a safety net: the
/// loop wakes readers when output goes out, gates when they give memory back, aborters when
/// their session ends).
const READ_WAIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl crate::a2a::sse::ReadGate for RunReads {
    fn hold(&mut self, bytes: usize) -> bool {
        let inbox = &*self.inbox;
        let mut r = lock(&inbox.reads);
        if bytes <= self.held {
            r.held -= self.held - bytes;
            inbox.reading.store(r.held, Ordering::SeqCst);
            self.held = bytes;
            if bytes == 0
                && let Some(t) = self.ticket.take()
            {
                r.readers.remove(&t);
            }
            if inbox.read_waiters.load(Ordering::SeqCst) > 0 {
                inbox.room.notify_all();
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
        inbox.read_waiters.fetch_add(1, Ordering::SeqCst);
        let mut waited = false;
        let granted = loop {
            let limit = inbox.limit.load(Ordering::SeqCst);
            let out = inbox.unsent.load(Ordering::SeqCst) + inbox.queued();
            let fits = out.saturating_add(r.held).saturating_add(more) <= limit;
            let oldest = r.readers.first() == Some(&ticket);
            if fits || (oldest && out <= limit - limit / 8) {
                r.held += more;
                inbox.reading.store(r.held, Ordering::SeqCst);
                self.held = bytes;
                break true;
            }
            if self.aborted.load(Ordering::SeqCst) {
                break false;
            }
            if !waited {
                waited = true;
                crate::metrics::M.reads_waiting.add(1);
                log::debug!(
                    "a large upstream event waits for {more} bytes of room in the output \
                     budget ({out} bytes held for clients, {} for events being read)",
                    r.held
                );
            }
            r = inbox
                .room
                .wait_timeout(r, READ_WAIT_POLL)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        };
        inbox.read_waiters.fetch_sub(1, Ordering::SeqCst);
        if waited {
            crate::metrics::M.reads_waiting.add(-1);
        }
        granted
    }
}

impl Drop for RunReads {
    fn drop(&mut self) {
        crate::a2a::sse::ReadGate::hold(self, 0);
    }
}

/// Returned by [`Outbox::send`] when the loop stopped the job (client gone or shutdown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

impl Outbox {
    /// Queue a reply, blocking while the queue is full. Fails once the client is gone.
    pub(crate) fn send(&self, reply: Reply) -> Result<(), Stopped> {
        let s = &self.shared;
        let mut q = lock(&s.queue);
        loop {
            if s.stop_reason() == Some(StopReason::ClientGone) {
                return Err(Stopped);
            }
            let room = q.items.len() < s.capacity
                && (q.items.is_empty() || q.bytes + reply.size() <= limits::JOB_QUEUE_BYTES);
            if room {
                break;
            }
            // Held events must reach the loop before this worker waits for the room they take.
            if !q.notified {
                s.mark_ready(q);
                q = lock(&s.queue);
                continue;
            }
            q.waiting += 1;
            q = s.space.wait(q).unwrap_or_else(|e| e.into_inner());
            q.waiting -= 1;
        }
        let (mut status, bytes) = self.sent.get();
        match &reply {
            Reply::Response(r) => status = r.status,
            Reply::StartStream(_) => status = 200,
            _ => {}
        }
        self.sent.set((status, bytes + reply.size() as u64));
        let hold = self.held.get() && matches!(reply, Reply::Event(_));
        q.bytes += reply.size();
        s.inbox.queued.fetch_add(reply.size(), Ordering::Relaxed);
        q.items.push_back(reply);
        if !q.notified && !hold {
            s.mark_ready(q);
        }
        Ok(())
    }

    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        self.shared.stop_reason()
    }

    /// Gates for the run's upstream streams: their large events wait for room in the output
    /// budget ([`RunReads`]) until their session is aborted.
    pub(crate) fn read_gates(&self) -> crate::a2a::sse::ReadGates {
        let inbox = self.shared.inbox.clone();
        let waker = inbox.clone();
        crate::a2a::sse::ReadGates {
            make: Arc::new(move |aborted| {
                Box::new(RunReads {
                    inbox: inbox.clone(),
                    aborted,
                    ticket: None,
                    held: 0,
                })
            }),
            wake: Arc::new(move || waker.wake_readers()),
        }
    }

    /// Wait while the client's connection is above its output watermark (or until the job
    /// is stopped). Called before reading upstream: a slow reader stops its run's upstream
    /// reads instead of having the next event, however large, produced for it.
    /// Held events are flushed first. The queue holding a whole queue's worth (one large
    /// event) counts as behind too: the loop has not taken it yet.
    pub(crate) fn wait_writable(&self) {
        let s = &self.shared;
        let mut q = lock(&s.queue);
        loop {
            // Held events must reach the loop, or nothing would ever drain.
            if !q.notified && !q.items.is_empty() {
                s.mark_ready(q);
                q = lock(&s.queue);
            }
            let behind = s.congested.load(Ordering::SeqCst) || q.bytes >= limits::JOB_QUEUE_BYTES;
            if !behind || s.is_stopped() {
                return;
            }
            q.waiting += 1;
            q = s.space.wait(q).unwrap_or_else(|e| e.into_inner());
            q.waiting -= 1;
        }
    }

    /// Hold events (`true`) until the next [`Outbox::flush`]; `false` flushes. Other replies
    /// always wake the loop.
    pub(crate) fn hold(&self, on: bool) {
        self.held.set(on);
        if !on {
            self.flush();
        }
    }

    /// Wake the loop for what is queued (the worker is about to wait for upstream).
    pub(crate) fn flush(&self) {
        let s = &self.shared;
        let q = lock(&s.queue);
        if !q.notified && !q.items.is_empty() {
            s.mark_ready(q);
        }
    }

    /// The answer's status (0 before any) and the bytes queued so far (access log).
    pub(crate) fn sent(&self) -> (u16, u64) {
        self.sent.get()
    }

    /// Run `hook` when the job is stopped (immediately if it already is).
    pub(crate) fn on_stop(&self, hook: Box<dyn FnOnce() + Send>) {
        let mut hooks = lock(&self.shared.stop_hooks);
        if self.shared.is_stopped() {
            drop(hooks);
            hook();
        } else {
            hooks.push(hook);
        }
    }

    /// A weak handle to the stop flag, for stop hooks (see `WeakStopFlag`).
    pub(crate) fn weak_stop_flag(&self) -> WeakStopFlag {
        WeakStopFlag {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// A handle to the stop flag that outlives the outbox (for helper threads).
    pub(crate) fn stop_flag(&self) -> StopFlag {
        StopFlag {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let s = &self.shared;
        let mut q = lock(&s.queue);
        q.closed = true;
        if !q.notified {
            s.mark_ready(q);
        }
    }
}

/// Read-only view of a job's stop flag.
#[derive(Clone)]
pub struct StopFlag {
    shared: Arc<JobShared>,
}

/// A stop flag that does not keep the job alive: for a stop hook, which the job itself
/// holds (a strong flag there was a cycle, and every run's hooks — and the replay log they
/// captured — leaked).
#[derive(Clone)]
pub(crate) struct WeakStopFlag {
    shared: std::sync::Weak<JobShared>,
}

impl WeakStopFlag {
    /// Why the job stopped; `None` once the job is gone.
    pub(crate) fn reason(&self) -> Option<StopReason> {
        self.shared.upgrade()?.stop_reason()
    }
}

impl StopFlag {
    pub fn is_stopped(&self) -> bool {
        self.shared.is_stopped()
    }
}

/// Create a job for `conn`: the loop keeps the shared part, the worker gets the outbox.
pub(crate) fn new_job(
    conn: ConnId,
    capacity: usize,
    inbox: &Arc<Inbox>,
) -> (Arc<JobShared>, Outbox) {
    let shared = Arc::new(JobShared {
        conn,
        queue: Mutex::new(Queue {
            items: VecDeque::new(),
            bytes: 0,
            closed: false,
            notified: false,
            waiting: 0,
        }),
        space: Condvar::new(),
        stop: AtomicU8::new(0),
        congested: AtomicBool::new(false),
        stop_hooks: Mutex::new(Vec::new()),
        capacity: capacity.max(1),
        inbox: inbox.clone(),
    });
    let outbox = Outbox {
        shared: shared.clone(),
        sent: std::cell::Cell::new((0, 0)),
        held: std::cell::Cell::new(false),
    };
    (shared, outbox)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn inbox() -> (Arc<Inbox>, Arc<AtomicUsize>) {
        let wakes = Arc::new(AtomicUsize::new(0));
        let w = wakes.clone();
        (
            Inbox::new(Box::new(move || {
                w.fetch_add(1, Ordering::SeqCst);
            })),
            wakes,
        )
    }

    const ID: ConnId = ConnId {
        slot: 3,
        generation: 1,
    };

    type Gate = Box<dyn crate::a2a::sse::ReadGate>;
    type Held = std::sync::mpsc::Receiver<(bool, Gate)>;

    /// `gate.hold(bytes)` on a thread: its answer if it came within `wait`, else the channel
    /// it will come on.
    fn hold_within(mut gate: Gate, bytes: usize, wait: Duration) -> Result<(bool, Gate), Held> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = gate.hold(bytes);
            let _ = tx.send((r, gate));
        });
        rx.recv_timeout(wait).map_err(|_| rx)
    }

    /// Well under `READ_WAIT_POLL`: an answer this fast came from a wake-up, not the poll.
    const WOKEN: Duration = Duration::from_millis(500);
    const WAITS: Duration = Duration::from_millis(300);

    #[test]
    fn large_reads_wait_for_room_in_the_output_budget_the_oldest_first() {
        const MIB: usize = 1 << 20;
        let (inbox, _) = inbox();
        inbox.set_output_budget(16 * MIB);
        let (_ja, a) = new_job(ID, 8, &inbox);
        let (_jb, b) = new_job(ID, 8, &inbox);
        let (gates_a, gates_b) = (a.read_gates(), b.read_gates());
        let never = || Arc::new(AtomicBool::new(false));
        let (ga, gb) = ((gates_a.make)(never()), (gates_b.make)(never()));
        let (granted, ga) = hold_within(ga, 6 * MIB, WOKEN).unwrap();
        assert!(granted);
        // Output held for paused clients fills the rest: B's read would pass the budget.
        inbox.counted_unsent(8 * MIB);
        let rb = hold_within(gb, 4 * MIB, WAITS)
            .err()
            .expect("B waits: 8 + 6 + 4 > 16");
        assert_eq!(inbox.reading(), 6 * MIB);
        // A, the oldest reader, goes on past the budget while it is not spent (14 of 16):
        // readers that each hold part of an event never all wait for each other.
        let (granted, ga) = hold_within(ga, 12 * MIB, WAITS).expect("the oldest goes on");
        assert!(granted);
        // A's event is handled: its memory goes back and B, woken, reads.
        let (_, ga) = hold_within(ga, 0, WOKEN).unwrap();
        let (granted, gb) = rb.recv_timeout(WOKEN).expect("B is woken");
        assert!(granted);
        assert_eq!(inbox.reading(), 4 * MIB);
        // B is the oldest now, but the budget is spent (15 of 16 held by output): it waits
        // until the loop counts output going out.
        inbox.counted_unsent(15 * MIB);
        let rb = hold_within(gb, 8 * MIB, WAITS)
            .err()
            .expect("spent: even the oldest waits");
        inbox.counted_unsent(2 * MIB);
        let (granted, gb) = rb.recv_timeout(WOKEN).expect("woken by the loop's count");
        assert!(granted);
        drop((ga, gb));
        assert_eq!(inbox.reading(), 0, "dropped gates give back what they held");
    }

    #[test]
    fn an_aborted_session_stops_its_reads_waiting_for_room() {
        const MIB: usize = 1 << 20;
        let (inbox, _) = inbox();
        inbox.set_output_budget(4 * MIB);
        inbox.counted_unsent(4 * MIB);
        let (_j, out) = new_job(ID, 8, &inbox);
        let gates = out.read_gates();
        let aborted = Arc::new(AtomicBool::new(false));
        let g = (gates.make)(aborted.clone());
        let r = hold_within(g, 2 * MIB, WAITS)
            .err()
            .expect("spent: it waits");
        // What the session's aborter does (cancel, client gone, shutdown).
        aborted.store(true, Ordering::SeqCst);
        (gates.wake)();
        let (granted, g) = r.recv_timeout(WOKEN).expect("woken by the aborter");
        assert!(!granted, "an aborted session reads no more");
        drop(g);
        assert_eq!(inbox.reading(), 0);
    }

    #[test]
    fn one_wake_per_burst() {
        let (inbox, wakes) = inbox();
        let (job, out) = new_job(ID, 8, &inbox);
        out.send(Reply::StartStream(Vec::new())).unwrap();
        out.send(Reply::Event(b"a".to_vec().into())).unwrap();
        assert_eq!(wakes.load(Ordering::SeqCst), 1);
        let ready = inbox.take_ready();
        assert_eq!(ready.len(), 1);
        let mut got = Vec::new();
        assert!(!job.drain(100, usize::MAX, &mut got));
        assert_eq!(got.len(), 2);
        out.send(Reply::EndStream).unwrap();
        assert_eq!(wakes.load(Ordering::SeqCst), 2);
        drop(out);
        let mut got = Vec::new();
        assert!(job.drain(100, usize::MAX, &mut got));
    }

    #[test]
    fn queued_bytes_count_until_taken_or_dropped_with_the_job() {
        let (inbox, _) = inbox();
        let (job, out) = new_job(ID, 8, &inbox);
        out.send(Reply::StartStream(Vec::new())).unwrap();
        out.send(Reply::Event(vec![0; 1000].into())).unwrap();
        out.send(Reply::Event(vec![0; 500].into())).unwrap();
        assert_eq!(inbox.queued(), 1500);
        let mut got = Vec::new();
        job.drain(2, usize::MAX, &mut got);
        assert_eq!(
            inbox.queued(),
            500,
            "taken by the loop: the output counts it now"
        );
        let (other, other_out) = new_job(ID, 8, &inbox);
        other_out.send(Reply::Event(vec![0; 70].into())).unwrap();
        assert_eq!(inbox.queued(), 570);
        drop(out);
        drop(job);
        // The ready list holds the job until the loop looks at it.
        drop(inbox.take_ready());
        assert_eq!(
            inbox.queued(),
            70,
            "a closed connection's queue is given back"
        );
        drop((other, other_out));
        drop(inbox.take_ready());
        assert_eq!(inbox.queued(), 0);
    }

    #[test]
    fn held_events_wake_the_loop_only_on_flush() {
        let (inbox, wakes) = inbox();
        let (job, out) = new_job(ID, 8, &inbox);
        out.send(Reply::StartStream(Vec::new())).unwrap();
        inbox.take_ready();
        let mut got = Vec::new();
        job.drain(100, usize::MAX, &mut got);
        out.hold(true);
        for b in [b"a", b"b", b"c"] {
            out.send(Reply::Event(b.to_vec().into())).unwrap();
        }
        assert_eq!(wakes.load(Ordering::SeqCst), 1, "held events do not wake");
        out.flush();
        assert_eq!(wakes.load(Ordering::SeqCst), 2);
        out.flush();
        assert_eq!(
            wakes.load(Ordering::SeqCst),
            2,
            "nothing new: no second wake"
        );
        assert_eq!(inbox.take_ready().len(), 1);
        got.clear();
        job.drain(100, usize::MAX, &mut got);
        assert_eq!(got.len(), 3);
        // The end of a stream is never held.
        out.send(Reply::EndStream).unwrap();
        assert_eq!(wakes.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_held_worker_on_a_full_queue_wakes_the_loop_before_waiting() {
        let (inbox, wakes) = inbox();
        let (job, out) = new_job(ID, 2, &inbox);
        let t = std::thread::spawn(move || {
            out.hold(true);
            for i in 0..5u8 {
                out.send(Reply::Event(vec![i].into())).unwrap();
            }
            out.hold(false);
        });
        let mut got = Vec::new();
        let clock = crate::clock::SystemClock;
        let deadline = crate::clock::Clock::now(&clock) + Duration::from_secs(10);
        while got.len() < 5 && crate::clock::Clock::now(&clock) < deadline {
            for j in inbox.take_ready() {
                j.drain(10, usize::MAX, &mut got);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        t.join().unwrap();
        assert_eq!(
            got.len(),
            5,
            "the worker never waited on a queue the loop was not told of"
        );
        assert!(wakes.load(Ordering::SeqCst) >= 2);
        drop(job);
    }

    #[test]
    fn a_worker_reads_no_further_while_its_client_is_behind() {
        let (inbox, _) = inbox();
        let (job, out) = new_job(ID, 8, &inbox);
        out.send(Reply::StartStream(Vec::new())).unwrap();
        let mut got = Vec::new();
        job.drain(10, usize::MAX, &mut got);
        // A large event the loop takes past the watermark: congested until a flush clears it.
        out.send(Reply::Event(vec![0; 2 * limits::JOB_QUEUE_BYTES].into()))
            .unwrap();
        job.drain(10, 1024, &mut got);
        let passed = Arc::new(AtomicUsize::new(0));
        let p = passed.clone();
        let t = std::thread::spawn(move || {
            out.wait_writable();
            p.store(1, Ordering::SeqCst);
            out.wait_writable(); // not behind: returns at once
            p.store(2, Ordering::SeqCst);
            out
        });
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(passed.load(Ordering::SeqCst), 0, "waited while behind");
        job.set_congested(false);
        let out = t.join().unwrap();
        assert_eq!(passed.load(Ordering::SeqCst), 2);
        // A stopped job never waits.
        job.set_congested(true);
        job.stop(StopReason::ClientGone);
        out.wait_writable();
    }

    #[test]
    fn full_queue_blocks_until_drained_or_stopped() {
        let (inbox, _) = inbox();
        let (job, out) = new_job(ID, 1, &inbox);
        out.send(Reply::StartStream(Vec::new())).unwrap();
        let t = std::thread::spawn(move || {
            let r1 = out.send(Reply::Event(vec![1].into()));
            let r2 = out.send(Reply::Event(vec![2].into()));
            (r1, r2)
        });
        std::thread::sleep(Duration::from_millis(50));
        let mut got = Vec::new();
        job.drain(10, usize::MAX, &mut got);
        std::thread::sleep(Duration::from_millis(50));
        job.stop(StopReason::ClientGone);
        let (r1, r2) = t.join().unwrap();
        assert!(r1.is_ok());
        assert_eq!(r2, Err(Stopped));
    }

    #[test]
    fn shutdown_still_lets_the_terminal_event_through() {
        let (inbox, _) = inbox();
        let (job, out) = new_job(ID, 4, &inbox);
        job.stop(StopReason::Shutdown);
        assert!(out.send(Reply::EndStream).is_ok());
        job.stop(StopReason::ClientGone);
        assert_eq!(out.send(Reply::EndStream), Err(Stopped));
    }

    #[test]
    fn stop_hooks_run_once_even_if_registered_late() {
        let (inbox, _) = inbox();
        let (job, out) = new_job(ID, 4, &inbox);
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        out.on_stop(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        job.stop(StopReason::Shutdown);
        job.stop(StopReason::ClientGone);
        let c = count.clone();
        out.on_stop(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert_eq!(out.stop_reason(), Some(StopReason::ClientGone));
    }
}
