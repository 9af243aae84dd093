//! The link between the loop and one worker job.
//!
//! Each job has its own bounded reply queue, so a slow client only ever blocks its own worker
//! (which then stops reading upstream): backpressure without head-of-line blocking. A worker
//! that queues into an empty queue puts the job on the shared ready list and wakes the loop
//! once; the loop drains ready jobs. The loop tells a worker to stop (client gone, shutdown)
//! through a flag plus hooks, which the worker uses to close its upstream socket at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::http::Response;
use crate::budget::Budget;
use crate::limits;
use crate::sync::lock;

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
    /// Work handed to the loop for later ([`Alarm`]); the loop moves it onto its own timers.
    alarms: Mutex<Vec<(std::time::Duration, AlarmHook)>>,
    waker: Box<dyn Fn() + Send + Sync>,
    /// The output budget: the bytes jobs queue count against it.
    budget: Arc<Budget>,
}

impl Inbox {
    pub(crate) fn new(waker: Box<dyn Fn() + Send + Sync>) -> Arc<Inbox> {
        Arc::new(Inbox {
            ready: Mutex::new(Vec::new()),
            alarms: Mutex::new(Vec::new()),
            waker,
            budget: Budget::new(usize::MAX),
        })
    }

    /// The output budget workers and the loop share.
    pub(crate) fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Jobs that queued something since the last call.
    pub(crate) fn take_ready(&self) -> Vec<Arc<JobShared>> {
        std::mem::take(&mut *lock(&self.ready))
    }

    /// Alarms set since the last call, each with its delay from when it was set (the loop
    /// turns the delay into a deadline on its own clock, which it reads right after).
    pub(crate) fn take_alarms(&self) -> Vec<(std::time::Duration, AlarmHook)> {
        std::mem::take(&mut *lock(&self.alarms))
    }

    fn notify(&self, job: Arc<JobShared>) {
        lock(&self.ready).push(job);
        crate::metrics::M.loop_wakes.inc();
        (self.waker)();
    }
}

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

/// What an [`Alarm`] runs: on the loop, so it must not block (it moves a run's state and
/// shuts sockets down, no more).
pub(crate) type AlarmHook = Box<dyn FnOnce() + Send>;

/// Runs a hook on the loop after a delay, on the loop's own timers: a run's disconnect grace
/// is a deadline there, not a thread that sleeps through it.
#[derive(Clone)]
pub(crate) struct Alarm {
    inbox: Arc<Inbox>,
}

impl Alarm {
    pub(crate) fn after(&self, delay: std::time::Duration, hook: AlarmHook) {
        lock(&self.inbox.alarms).push((delay, hook));
        (self.inbox.waker)();
    }
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
    /// Bytes the worker has queued that the loop has not taken.
    pub(crate) fn queued_bytes(&self) -> usize {
        lock(&self.queue).bytes
    }

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
        self.inbox.budget.sub_queued(taken);
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
        self.inbox.budget.sub_queued(q.bytes);
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
        s.inbox.budget.add_queued(reply.size());
        q.items.push_back(reply);
        if !q.notified && !hold {
            s.mark_ready(q);
        }
        Ok(())
    }

    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        self.shared.stop_reason()
    }

    /// The output budget the run's upstream streams hold their large events against
    /// ([`crate::budget::ReadHold`]).
    pub(crate) fn budget(&self) -> Arc<Budget> {
        self.shared.inbox.budget.clone()
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

    /// Set alarms on the loop (see [`Alarm`]).
    pub(crate) fn alarm(&self) -> Alarm {
        Alarm {
            inbox: self.shared.inbox.clone(),
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
mod tests;
