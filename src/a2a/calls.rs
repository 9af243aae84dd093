//! Call threads: where the deep part of an upstream call runs.
//!
//! A thread's resident stack is the deepest it has ever been, and a run's worker lives as long
//! as its stream. ureq's request path (connect, request head, body, response head: its state
//! machine keeps large frames) reaches ~20 KiB below the worker's own frames, while reading
//! the body of an open stream needs only a few. So each call is made here, on a small shared
//! pool, and hands back what the caller reads afterwards (a response body reader): the
//! worker's stack then only ever sees the shallow read → SSE parse → projection path
//! (docs/performance.md, issue 26). Still blocking threads; the caller waits for the answer.
//!
//! Measured (issue 37, shipped build, K = 1 000): 23.5 KiB per open stream with the pool, 39.0
//! without (one worker's resident stack 12 KiB against 28). Its cost: two wake-ups per call,
//! 7 to 11 calls per run (`tests/it/handoffs.rs`), none per event. Each call is counted on the
//! call thread that runs it (`iac_agui_thread_handoffs_total{kind="call"}`): that test fails
//! when a run's calls stop coming here, and the shipped build's `make bench` when a worker's
//! resident stack grows past 12 KiB.
//!
//! The pool grows on demand (a caller never waits for another run's slow call) and threads
//! idle for [`IDLE_EXIT`] end, down to [`WARM`]: in-flight calls are bounded by the workers
//! making them.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::limits;
use crate::sync::lock;

/// Threads kept when idle, so a quiet server does not spawn one per call.
const WARM: usize = 2;
/// How long a call thread beyond [`WARM`] waits for work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

thread_local! {
    /// This thread is a call thread (of any pool): a nested call needs no hand-over.
    static ON_CALL_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs the call and returns what hands its result over (sent once the thread counts as idle
/// again, so a caller's next call finds this thread instead of starting one).
type Job = Box<dyn FnOnce() -> Reply + Send>;
type Reply = Box<dyn FnOnce() + Send>;
/// What a call returned, whatever its type.
type Answer = Box<dyn Any + Send>;

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    idle: usize,
    threads: usize,
}

/// A pool of call threads; cheap to clone (shared).
#[derive(Clone, Default)]
pub(crate) struct CallPool {
    inner: Arc<(Mutex<State>, Condvar)>,
}

impl std::fmt::Debug for CallPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.inner.0);
        f.debug_struct("CallPool")
            .field("threads", &s.threads)
            .field("idle", &s.idle)
            .finish()
    }
}

impl CallPool {
    /// Run `f` on a call thread and wait for its result. A panic in `f` is resumed here, on
    /// the caller (whose worker turns it into that run's error). When no thread can be started
    /// and none is running, `f` runs on the caller: slower to page in, never lost.
    /// On a call thread already, `f` runs right there.
    pub(crate) fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        if ON_CALL_THREAD.get() {
            return f();
        }
        // The hand-over is written once for every `T` (a channel per result type was ~5 KiB
        // of the binary each, docs/performance.md); the answer is boxed for the way back.
        let answer = self.run_erased(Box::new(move || Box::new(f()) as Answer));
        match answer.downcast::<T>() {
            Ok(v) => *v,
            // `run_erased` hands back what `f` returned, boxed above as a `T`.
            Err(_) => resume_unwind(Box::new("a call thread answered another type")),
        }
    }

    fn run_erased(&self, f: Box<dyn FnOnce() -> Answer + Send>) -> Answer {
        let (tx, rx) = sync_channel(1);
        let job: Job = Box::new(move || {
            let answer = catch_unwind(AssertUnwindSafe(f));
            Box::new(move || {
                let _ = tx.send(answer);
            })
        });
        if let Some(job) = self.submit(job).err() {
            job()();
        }
        match rx.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(panic)) => resume_unwind(panic),
            // The job was dropped unrun: only when its thread died outside `catch_unwind`.
            Err(_) => resume_unwind(Box::new("the call thread ended without an answer")),
        }
    }

    /// Queue the job, starting a thread when none is idle; `Err` gives the job back when the
    /// pool has no thread at all and cannot start one.
    fn submit(&self, job: Job) -> Result<(), Job> {
        let (m, cv) = &*self.inner;
        let mut s = lock(m);
        if s.idle > s.queue.len() {
            s.queue.push_back(job);
            cv.notify_one();
            return Ok(());
        }
        s.threads += 1;
        let pool = self.clone();
        let spawned = std::thread::Builder::new()
            .name("iac-agui-call".into())
            .stack_size(limits::WORKER_STACK_BYTES)
            .spawn(move || pool.serve());
        match spawned {
            Ok(_) => {
                s.queue.push_back(job);
                cv.notify_one();
                Ok(())
            }
            Err(e) => {
                s.threads -= 1;
                log::warn!("cannot start a call thread: {e}");
                if s.threads == 0 {
                    return Err(job);
                }
                // A running thread takes it when it is free.
                s.queue.push_back(job);
                cv.notify_one();
                Ok(())
            }
        }
    }

    fn serve(&self) {
        ON_CALL_THREAD.set(true);
        let (m, cv) = &*self.inner;
        let mut s = lock(m);
        s.idle += 1;
        loop {
            if let Some(job) = s.queue.pop_front() {
                s.idle -= 1;
                drop(s);
                // Counted where the call runs, not where it is asked for: a call made on its
                // caller's thread instead (the pool bypassed) leaves the count of
                // `tests/it/handoffs.rs` at zero, and that test fails.
                crate::metrics::M.call_handoffs.inc();
                let reply = job();
                s = lock(m);
                s.idle += 1;
                reply();
                continue;
            }
            let (next, timeout) = cv
                .wait_timeout(s, IDLE_EXIT)
                .unwrap_or_else(|e| e.into_inner());
            s = next;
            if timeout.timed_out() && s.queue.is_empty() && s.threads > WARM {
                s.threads -= 1;
                s.idle -= 1;
                return;
            }
        }
    }

    /// Call threads alive (tests).
    #[cfg(test)]
    fn threads(&self) -> usize {
        lock(&self.inner.0).threads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_runs_on_a_call_thread_and_answers() {
        let pool = CallPool::default();
        let name = pool.run(|| std::thread::current().name().map(str::to_string));
        assert_eq!(name.as_deref(), Some("iac-agui-call"));
        assert_eq!(pool.run(|| 6 * 7), 42);
        assert_eq!(pool.threads(), 1, "an idle thread is reused");
    }

    #[test]
    fn a_call_made_on_a_call_thread_runs_there() {
        let pool = CallPool::default();
        let p2 = pool.clone();
        let (outer, inner) = pool.run(move || {
            let me = std::thread::current().id();
            (me, p2.run(|| std::thread::current().id()))
        });
        assert_eq!(outer, inner);
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn a_panicking_call_panics_its_caller_only() {
        let pool = CallPool::default();
        let caught = catch_unwind(AssertUnwindSafe(|| pool.run(|| panic!("kernel bytes"))));
        let msg = caught.expect_err("the panic reaches the caller");
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"kernel bytes"));
        assert_eq!(pool.run(|| 1), 1, "the pool still serves");
    }

    #[test]
    fn a_slow_call_does_not_hold_up_another() {
        let pool = CallPool::default();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let p2 = pool.clone();
        let slow = std::thread::spawn(move || p2.run(move || wait.recv().is_ok()));
        // The slow call occupies its thread; this one gets a second thread at once.
        while pool.threads() < 1 {
            std::thread::yield_now();
        }
        assert_eq!(pool.run(|| "fast"), "fast");
        assert_eq!(pool.threads(), 2);
        release.send(()).unwrap();
        assert!(slow.join().unwrap());
    }
}
