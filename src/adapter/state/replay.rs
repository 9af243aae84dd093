//! The replay log: the framed SSE events (`id: N\ndata: …\n\n`) of each live run and of
//! recently ended runs, so a client that lost its connection can re-attach and read on from
//! the last id it saw. Bounded per run (bytes and count: the oldest events go, the log
//! remembers the first id it still holds), in total (the oldest runs go first) and in time
//! (ended runs are kept for the retention window).
//!
//! Writers (the run's worker) never wait for readers: a subscriber that falls behind what a
//! log still holds is told so and closed (it can re-subscribe in snapshot mode).

use crate::server::job::Frame;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::limits;
use crate::sync::lock;

/// The bounds of the replay logs (defaults in `limits.rs`).
#[derive(Debug, Clone, Copy)]
pub struct ReplayBounds {
    pub run_bytes: usize,
    pub run_events: usize,
    pub total_bytes: usize,
    pub retention: Duration,
}

impl Default for ReplayBounds {
    fn default() -> Self {
        ReplayBounds {
            run_bytes: limits::REPLAY_RUN_BYTES,
            run_events: limits::REPLAY_RUN_EVENTS,
            total_bytes: limits::REPLAY_TOTAL_BYTES,
            retention: limits::REPLAY_RETENTION,
        }
    }
}

/// Who a log belongs to, for the subscribe route's identity checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunKey {
    pub(crate) thread: crate::principal::ThreadKey,
    pub(crate) run_id: String,
}

struct Held {
    events: VecDeque<Frame>,
    /// The id of `events[0]` (after an overflow, the first id still held).
    first_id: u64,
    bytes: usize,
    ended: bool,
    ended_at: Option<Instant>,
    /// Subscribers now attached (bounded per run).
    subscribers: usize,
    /// Readers blocked in `read_from`: an append wakes them only when there are some (a
    /// notify is a system call, and most runs have no reader).
    waiting: usize,
}

/// One run's log.
pub(crate) struct RunLog {
    pub(crate) execution_id: String,
    pub(crate) ros_invocation_id: String,
    /// The dialect its run was served in: a subscriber gets the run's framing (issue 57).
    pub(crate) dialect: crate::agui::dialect::Dialect,
    seq: u64,
    held: Mutex<Held>,
    changed: Condvar,
    bounds: ReplayBounds,
    total: Arc<AtomicUsize>,
    all: Weak<Inner>,
    clock: Arc<dyn Clock>,
}

/// What a subscriber gets from [`RunLog::read_from`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Events starting at the asked id (possibly none when the wait timed out).
    Events(Vec<Frame>),
    /// The asked id is no longer held.
    Gap,
    /// Every event was read and the run ended (its terminal event was among them, unless the
    /// worker vanished).
    End,
}

impl RunLog {
    /// Append one framed event (its id is the next one: the stream numbers them in order).
    /// The bytes are shared with the reply on its way to the client, not copied.
    pub(crate) fn append(&self, framed: Frame) {
        let mut h = lock(&self.held);
        if h.ended {
            return;
        }
        let len = framed.len();
        h.events.push_back(framed);
        h.bytes += len;
        self.total.fetch_add(len, Ordering::Relaxed);
        crate::metrics::M.replay_bytes.add(len as i64);
        while h.events.len() > 1
            && (h.bytes > self.bounds.run_bytes || h.events.len() > self.bounds.run_events)
        {
            if let Some(old) = h.events.pop_front() {
                h.bytes -= old.len();
                self.total.fetch_sub(old.len(), Ordering::Relaxed);
                crate::metrics::M.replay_bytes.add(-(old.len() as i64));
                h.first_id += 1;
            }
        }
        let wake = h.waiting > 0;
        drop(h);
        if wake {
            self.changed.notify_all();
        }
        if self.total.load(Ordering::Relaxed) > self.bounds.total_bytes
            && let Some(all) = self.all.upgrade()
        {
            all.enforce_total();
        }
    }

    /// No more events (terminal written, or the worker is gone).
    pub(crate) fn end(&self) {
        let mut h = lock(&self.held);
        if !h.ended {
            h.ended = true;
            h.ended_at = Some(self.clock.now());
        }
        drop(h);
        self.changed.notify_all();
    }

    pub(crate) fn ended(&self) -> bool {
        lock(&self.held).ended
    }

    /// The time on the log's clock (a reader's own deadlines).
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The first id still held, and the id the next event would get.
    pub(crate) fn span(&self) -> (u64, u64) {
        let h = lock(&self.held);
        (h.first_id, h.first_id + h.events.len() as u64)
    }

    /// The run's terminal event, once the log ended with one (the last event appended).
    pub(crate) fn terminal(&self) -> Option<Frame> {
        let h = lock(&self.held);
        let last = h.events.back().filter(|_| h.ended)?;
        is_terminal(last).then(|| last.clone())
    }

    /// Whether event `id` can still be read (held, or the next one to come).
    pub(crate) fn holds(&self, id: u64) -> bool {
        let h = lock(&self.held);
        id >= h.first_id && id <= h.first_id + h.events.len() as u64
    }

    /// Events from `id` on, waiting up to `wait` for one to arrive.
    pub(crate) fn read_from(&self, id: u64, wait: Duration) -> Read {
        let mut h = lock(&self.held);
        let deadline = self.clock.now() + wait;
        loop {
            if id < h.first_id {
                return Read::Gap;
            }
            let next = h.first_id + h.events.len() as u64;
            if id < next {
                let skip = (id - h.first_id) as usize;
                let mut out = Vec::new();
                let mut bytes = 0;
                for e in h.events.iter().skip(skip) {
                    // A batch bounded like a job queue: the copy is what the reader holds.
                    if !out.is_empty() && bytes + e.len() > limits::JOB_QUEUE_BYTES {
                        break;
                    }
                    bytes += e.len();
                    out.push(e.clone());
                }
                return Read::Events(out);
            }
            if h.ended {
                return Read::End;
            }
            let now = self.clock.now();
            if now >= deadline {
                return Read::Events(Vec::new());
            }
            h.waiting += 1;
            h = match self.changed.wait_timeout(h, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            h.waiting -= 1;
        }
    }

    /// A subscriber attaches; false when the run already has the most it may have. (Its
    /// adopting a detached run is the run's cell's: `Event::Subscribed`.)
    pub(crate) fn attach(&self) -> bool {
        let mut h = lock(&self.held);
        if h.subscribers >= limits::MAX_SUBSCRIBERS_PER_RUN {
            return false;
        }
        h.subscribers += 1;
        crate::metrics::M.subscribers.add(1);
        true
    }

    pub(crate) fn detach(&self) {
        let mut h = lock(&self.held);
        h.subscribers = h.subscribers.saturating_sub(1);
        crate::metrics::M.subscribers.add(-1);
    }

    #[cfg(test)]
    fn subscribers(&self) -> usize {
        lock(&self.held).subscribers
    }

    fn bytes(&self) -> usize {
        lock(&self.held).bytes
    }

    fn expired(&self, now: Instant) -> bool {
        let h = lock(&self.held);
        h.ended_at
            .is_some_and(|t| now.duration_since(t) >= self.bounds.retention)
            && h.subscribers == 0
    }

    /// Drop every event (total bound); readers that need them get a gap.
    fn evict(&self) {
        let mut h = lock(&self.held);
        let n = h.events.len() as u64;
        self.total.fetch_sub(h.bytes, Ordering::Relaxed);
        crate::metrics::M.replay_bytes.add(-(h.bytes as i64));
        h.events.clear();
        h.bytes = 0;
        h.first_id += n;
        drop(h);
        self.changed.notify_all();
    }
}

impl Drop for RunLog {
    fn drop(&mut self) {
        let h = lock(&self.held);
        self.total.fetch_sub(h.bytes, Ordering::Relaxed);
        crate::metrics::M.replay_bytes.add(-(h.bytes as i64));
    }
}

/// Every run's log.
pub struct ReplayLogs {
    inner: Arc<Inner>,
}

struct Inner {
    bounds: ReplayBounds,
    runs: Mutex<Index>,
    total: Arc<AtomicUsize>,
    /// Retention and reader waits (the adapter's `Env`).
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct Index {
    by_run: HashMap<(crate::principal::ThreadKey, String), Arc<RunLog>>,
    next_seq: u64,
    /// When `open` last dropped expired logs: every admission opens a log, and a scan of
    /// every log per admission is not needed for a 10-minute retention.
    purged: Option<Instant>,
}

impl Index {
    fn purge(&mut self, now: Instant) {
        self.by_run.retain(|_, l| !l.expired(now));
        self.purged = Some(now);
    }
}

/// How often opening a log also drops the expired ones (a subscribe always does).
const PURGE_EVERY: Duration = Duration::from_secs(1);

impl Default for ReplayLogs {
    fn default() -> Self {
        ReplayLogs::new(ReplayBounds::default(), Arc::new(SystemClock))
    }
}

impl ReplayLogs {
    pub fn new(bounds: ReplayBounds, clock: Arc<dyn Clock>) -> ReplayLogs {
        ReplayLogs {
            inner: Arc::new(Inner {
                bounds,
                runs: Mutex::new(Index::default()),
                total: Arc::new(AtomicUsize::new(0)),
                clock,
            }),
        }
    }

    /// Drop the logs whose retention ended (a timer calls this: memory must not wait for
    /// the next request).
    pub(crate) fn purge_expired(&self) {
        let expired: Vec<Arc<RunLog>> = {
            let mut idx = lock(&self.inner.runs);
            let now = self.inner.clock.now();
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut idx.by_run)
                .into_iter()
                .partition(|(_, l)| l.expired(now));
            idx.by_run = kept.into_iter().collect();
            idx.purged = Some(now);
            gone.into_iter().map(|(_, l)| l).collect()
        };
        // Freed outside the index lock (a large log is many frames).
        drop(expired);
    }

    /// A new log for a run (replacing an older one of the same thread and run id).
    pub(crate) fn open(
        &self,
        key: RunKey,
        execution_id: &str,
        ros: &str,
        dialect: crate::agui::dialect::Dialect,
    ) -> Arc<RunLog> {
        let this = &self.inner;
        let mut idx = lock(&this.runs);
        let now = this.clock.now();
        if idx
            .purged
            .is_none_or(|t| now.duration_since(t) >= PURGE_EVERY)
        {
            idx.purge(now);
        }
        let seq = idx.next_seq;
        idx.next_seq += 1;
        let log = Arc::new(RunLog {
            execution_id: execution_id.to_string(),
            ros_invocation_id: ros.to_string(),
            dialect,
            seq,
            held: Mutex::new(Held {
                events: VecDeque::new(),
                first_id: 0,
                bytes: 0,
                ended: false,
                ended_at: None,
                subscribers: 0,
                waiting: 0,
            }),
            changed: Condvar::new(),
            bounds: this.bounds,
            total: this.total.clone(),
            all: Arc::downgrade(this),
            clock: this.clock.clone(),
        });
        idx.by_run.insert((key.thread, key.run_id), log.clone());
        log
    }

    pub(crate) fn get(
        &self,
        thread: &crate::principal::ThreadKey,
        run_id: &str,
    ) -> Option<Arc<RunLog>> {
        let mut idx = lock(&self.inner.runs);
        idx.purge(self.inner.clock.now());
        idx.by_run
            .get(&(thread.clone(), run_id.to_string()))
            .cloned()
    }

    /// Drop every log of a thread's runs (the thread was deleted: a subscribe to one of
    /// them must not replay it, whether or not the id is used again). Freed outside the
    /// index lock.
    #[cfg(feature = "threads")]
    pub(crate) fn forget_thread(&self, thread: &crate::principal::ThreadKey) {
        let gone: Vec<Arc<RunLog>> = {
            let mut idx = lock(&self.inner.runs);
            let keys: Vec<_> = idx
                .by_run
                .keys()
                .filter(|(t, _)| t == thread)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| idx.by_run.remove(k)).collect()
        };
        for l in &gone {
            l.end();
        }
        drop(gone);
    }

    #[cfg(test)]
    fn enforce_total(&self) {
        self.inner.enforce_total();
    }

    /// Bytes held by every log (metrics, tests).
    pub fn total_bytes(&self) -> usize {
        self.inner.total.load(Ordering::Relaxed)
    }

    /// Subscribers attached to any log.
    #[cfg(test)]
    fn subscribers(&self) -> usize {
        lock(&self.inner.runs)
            .by_run
            .values()
            .map(|l| l.subscribers())
            .sum()
    }
}

impl Inner {
    /// After an append: while the total is over its bound, empty the oldest runs' logs.
    fn enforce_total(&self) {
        if self.total.load(Ordering::Relaxed) <= self.bounds.total_bytes {
            return;
        }
        let idx = lock(&self.runs);
        let mut logs: Vec<&Arc<RunLog>> = idx.by_run.values().collect();
        logs.sort_by_key(|l| l.seq);
        for l in logs {
            if self.total.load(Ordering::Relaxed) <= self.bounds.total_bytes {
                break;
            }
            if l.bytes() > 0 {
                l.evict();
            }
        }
    }
}

/// Whether a framed event (`id: N\ndata: {json}\n\n`) is `RUN_FINISHED` or `RUN_ERROR`.
fn is_terminal(frame: &[u8]) -> bool {
    let Some(start) = frame.windows(6).position(|w| w == b"data: ") else {
        return false;
    };
    let data = frame[start + 6..]
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or(&[]);
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: &'a str,
    }
    serde_json::from_slice::<Typed<'_>>(data)
        .is_ok_and(|t| matches!(t.kind, "RUN_FINISHED" | "RUN_ERROR"))
}

#[cfg(test)]
mod tests {
    use super::*;
    const V0_1: crate::agui::dialect::Dialect = crate::agui::dialect::Dialect::V0_1;

    fn key(r: &str) -> RunKey {
        RunKey {
            thread: crate::principal::ThreadKey::shared("t"),
            run_id: r.into(),
        }
    }

    fn bounds(run_bytes: usize, run_events: usize, total: usize) -> ReplayBounds {
        ReplayBounds {
            run_bytes,
            run_events,
            total_bytes: total,
            retention: Duration::from_secs(600),
        }
    }

    fn ev(i: u64) -> Frame {
        format!("id: {i}\ndata: {{}}\n\n").into_bytes().into()
    }

    #[test]
    fn a_reader_gets_events_from_its_id_then_the_end() {
        let logs = ReplayLogs::default();
        let log = logs.open(key("r"), "e", "ros", V0_1);
        for i in 0..3 {
            log.append(ev(i));
        }
        assert_eq!(
            log.read_from(1, Duration::ZERO),
            Read::Events(vec![ev(1), ev(2)])
        );
        assert_eq!(log.read_from(3, Duration::ZERO), Read::Events(vec![]));
        log.end();
        assert_eq!(log.read_from(3, Duration::ZERO), Read::End);
        log.append(ev(3));
        assert_eq!(
            log.read_from(3, Duration::ZERO),
            Read::End,
            "closed for good"
        );
    }

    #[test]
    fn an_overflowing_log_keeps_its_newest_events_and_knows_its_first_id() {
        let logs = ReplayLogs::new(bounds(1 << 20, 2, 1 << 30), Arc::new(SystemClock));
        let log = logs.open(key("r"), "e", "ros", V0_1);
        for i in 0..5 {
            log.append(ev(i));
        }
        assert!(!log.holds(2));
        assert!(log.holds(3) && log.holds(5) && !log.holds(6));
        assert_eq!(log.read_from(1, Duration::ZERO), Read::Gap);
        assert_eq!(
            log.read_from(3, Duration::ZERO),
            Read::Events(vec![ev(3), ev(4)])
        );
        // A single event larger than the byte bound is still held.
        let small = ReplayLogs::new(bounds(4, 100, 1 << 30), Arc::new(SystemClock));
        let l = small.open(key("r"), "e", "ros", V0_1);
        l.append(ev(0));
        assert!(l.holds(0));
    }

    #[test]
    fn the_total_bound_empties_the_oldest_runs_first() {
        let one = ev(0).len();
        let logs = ReplayLogs::new(bounds(1 << 20, 1000, one * 3), Arc::new(SystemClock));
        let a = logs.open(key("a"), "e", "ros", V0_1);
        let b = logs.open(key("b"), "e2", "ros", V0_1);
        a.append(ev(0));
        a.append(ev(1));
        b.append(ev(0));
        b.append(ev(1));
        logs.enforce_total();
        assert!(logs.total_bytes() <= one * 3);
        assert_eq!(a.read_from(0, Duration::ZERO), Read::Gap, "oldest run went");
        assert!(b.holds(0));
        drop(a);
        assert_eq!(logs.total_bytes(), one * 2);
    }

    #[test]
    fn subscribers_are_bounded() {
        let logs = ReplayLogs::default();
        let log = logs.open(key("r"), "e", "ros", V0_1);
        for _ in 0..limits::MAX_SUBSCRIBERS_PER_RUN {
            assert!(log.attach());
        }
        assert!(!log.attach());
        log.detach();
        assert!(log.attach());
        assert_eq!(logs.subscribers(), limits::MAX_SUBSCRIBERS_PER_RUN);
    }

    #[test]
    fn ended_logs_expire_after_the_retention_window() {
        let mut b = bounds(1 << 20, 1000, 1 << 30);
        b.retention = Duration::from_secs(600);
        let clock = Arc::new(crate::clock::ManualClock::new());
        let logs = ReplayLogs::new(b, clock.clone());
        let log = logs.open(key("r"), "e", "ros", V0_1);
        clock.advance(Duration::from_secs(3600));
        assert!(
            logs.get(&crate::principal::ThreadKey::shared("t"), "r")
                .is_some(),
            "live logs stay"
        );
        log.end();
        clock.advance(Duration::from_secs(599));
        assert!(
            logs.get(&crate::principal::ThreadKey::shared("t"), "r")
                .is_some(),
            "kept for the retention"
        );
        clock.advance(Duration::from_secs(2));
        assert!(
            logs.get(&crate::principal::ThreadKey::shared("t"), "r")
                .is_none()
        );
        // The timer's purge drops them too, without a request.
        let log = logs.open(key("r2"), "e", "ros", V0_1);
        log.end();
        clock.advance(Duration::from_secs(601));
        logs.purge_expired();
        assert_eq!(logs.inner.runs.lock().unwrap().by_run.len(), 0);
    }

    #[test]
    fn a_waiting_reader_wakes_on_append() {
        let logs = ReplayLogs::default();
        let log = logs.open(key("r"), "e", "ros", V0_1);
        let l2 = log.clone();
        let t = std::thread::spawn(move || l2.read_from(0, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(50));
        log.append(ev(0));
        assert_eq!(t.join().unwrap(), Read::Events(vec![ev(0)]));
    }
}
