//! The link between the loop and one worker job.
//!
//! Each job has its own bounded reply queue, so a slow client only ever blocks its own worker
//! (which then stops reading upstream): backpressure without head-of-line blocking. A worker
//! that queues into an empty queue puts the job on the shared ready list and wakes the loop
//! once; the loop drains ready jobs. The loop tells a job its client is gone or the server is
//! stopping by sending the job's life cell an event (`crate::life`): the cell cuts the upstream
//! sessions the worker registered with it, and the loop runs nothing of the worker's.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::http::Response;
use crate::budget::Budget;
use crate::life::{Abort, Cell, Effects, Event};
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
    waker: Box<dyn Fn() + Send + Sync>,
    /// The output budget: the bytes jobs queue count against it.
    budget: Arc<Budget>,
}

impl Inbox {
    pub(crate) fn new(waker: Box<dyn Fn() + Send + Sync>) -> Arc<Inbox> {
        Arc::new(Inbox {
            ready: Mutex::new(Vec::new()),
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
    /// The job's life: where its client is, whether the server stops it, and for a run all
    /// the rest (`crate::life`).
    cell: Arc<Cell>,
    /// The output the connection holds (`Conn::held_out`) is above the watermark (published
    /// by the loop): the worker reads no more upstream until it is not, so a paused reader
    /// holds at most the watermark plus the one event that crossed it.
    congested: AtomicBool,
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

    /// The loop tells the job its client is gone or the server stops: an event to its cell
    /// (which cuts the upstream sessions when its table says so). The effects left are the
    /// loop's to carry out (`ArmGrace`). A worker waiting for room is woken.
    pub(crate) fn stop(&self, reason: StopReason) -> Effects {
        let effects = self.cell.send(match reason {
            StopReason::ClientGone => Event::ClientGone,
            StopReason::Shutdown => Event::Shutdown,
        });
        // Hold the queue lock so a sender between its check and its wait cannot miss this.
        let _q = lock(&self.queue);
        self.space.notify_all();
        effects
    }

    /// The job's life cell.
    pub(crate) fn cell(&self) -> &Arc<Cell> {
        &self.cell
    }

    /// The worker dropped its end: the job is over.
    pub(crate) fn worker_gone(&self) -> bool {
        lock(&self.queue).closed
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

/// The worker's end: send replies, read the job's life, register what a stop cuts.
pub struct Outbox {
    shared: Arc<JobShared>,
    /// For the access log: the status of the answer and the bytes handed to the loop.
    sent: std::cell::Cell<(u16, u64)>,
    /// Events are queued without waking the loop until [`Outbox::flush`] (the worker has
    /// more upstream bytes in hand): one wake per burst instead of one per event.
    held: std::cell::Cell<bool>,
}

/// Returned by [`Outbox::send`] when nobody reads the job's replies any more (its client is
/// gone, or gone and the run detached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

impl Outbox {
    /// Queue a reply, blocking while the queue is full. Fails once the client is gone.
    pub(crate) fn send(&self, reply: Reply) -> Result<(), Stopped> {
        let s = &self.shared;
        let mut q = lock(&s.queue);
        loop {
            if s.cell.life().unattended() {
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

    /// The job's life cell.
    pub(crate) fn cell(&self) -> &Arc<Cell> {
        &self.shared.cell
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
            let life = s.cell.life();
            if !behind || life.unattended() || life.shutdown {
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

    /// Cut `abort`'s session when the job's upstream is cut (at once if it already is).
    pub(crate) fn arm_abort(&self, abort: Abort) {
        self.shared.cell.arm_abort(abort);
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
        cell: Arc::new(Cell::default()),
        congested: AtomicBool::new(false),
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
