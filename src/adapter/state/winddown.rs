//! The per-thread wind-down barrier, keyed by the thread's kernel context (one per owner and
//! thread id). A run that ends (cancel, disconnect) while its kernel task
//! may still be live releases the thread at once, but the kernel is still stopping that task;
//! a task started on the same context meanwhile fails. So the next turn, resume or guidance
//! on the thread waits — on its worker, bounded — until the kernel has confirmed the old
//! task's end (its `CancelTask` answer).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::clock::Clock;
use crate::sync::lock;

/// Threads with tasks still stopping, and how many each.
pub(crate) struct WindDowns {
    stopping: Mutex<Stopping>,
    changed: Condvar,
    /// The bound of `wait` (the adapter's `Env`).
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct Stopping {
    tasks: HashMap<String, usize>,
    /// Workers blocked in `wait` (tests synchronise on it).
    waiters: usize,
}

/// One task stopping on a thread; dropping it (also on a panic) says the kernel confirmed.
#[must_use]
pub(crate) struct WindDown {
    owner: Arc<WindDowns>,
    thread_id: String,
}

impl WindDowns {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> WindDowns {
        WindDowns {
            stopping: Mutex::default(),
            changed: Condvar::new(),
            clock,
        }
    }

    /// A task of `thread_id` is being stopped from now on.
    pub(crate) fn begin(self: &Arc<Self>, thread_id: &str) -> WindDown {
        *lock(&self.stopping)
            .tasks
            .entry(thread_id.to_string())
            .or_insert(0) += 1;
        WindDown {
            owner: self.clone(),
            thread_id: thread_id.to_string(),
        }
    }

    /// Wait until nothing of `thread_id` is stopping, at most `bound`. True when clear.
    pub(crate) fn wait(&self, thread_id: &str, bound: Duration) -> bool {
        let deadline = self.clock.now() + bound;
        let mut g = lock(&self.stopping);
        g.waiters += 1;
        let clear = loop {
            if !g.tasks.contains_key(thread_id) {
                break true;
            }
            let left = deadline.saturating_duration_since(self.clock.now());
            if left.is_zero() {
                break false;
            }
            g = self
                .changed
                .wait_timeout(g, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        };
        g.waiters -= 1;
        clear
    }

    #[cfg(test)]
    fn waiters(&self) -> usize {
        lock(&self.stopping).waiters
    }
}

impl Drop for WindDown {
    fn drop(&mut self) {
        let mut g = lock(&self.owner.stopping);
        if let Some(n) = g.tasks.get_mut(&self.thread_id) {
            *n -= 1;
            if *n == 0 {
                g.tasks.remove(&self.thread_id);
            }
        }
        drop(g);
        self.owner.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::clock::ManualClock;
    use std::sync::mpsc;

    /// Start `wait(thread, 10 s)` on a thread; return once it is blocked in the condvar
    /// (counted under the lock the condvar releases).
    fn waiter(w: &Arc<WindDowns>, thread: &'static str) -> mpsc::Receiver<bool> {
        let before = w.waiters();
        let (tx, rx) = mpsc::channel();
        let w2 = w.clone();
        std::thread::spawn(move || tx.send(w2.wait(thread, Duration::from_secs(10))));
        while w.waiters() == before {
            std::thread::yield_now();
        }
        rx
    }

    /// On a manual clock the only way out of a wait is a confirmation's wake-up: checked
    /// against the defect by removing `notify_all` from `WindDown::drop`, which makes both
    /// `recv_timeout`s below fail (the waiter sleeps on while the clock stands still).
    #[test]
    fn waits_until_every_stop_is_confirmed_or_the_bound() {
        let clock = Arc::new(ManualClock::new());
        let w = Arc::new(WindDowns::new(clock.clone()));
        assert!(w.wait("t", Duration::ZERO), "nothing stopping");
        let a = w.begin("t");
        let b = w.begin("t");
        let other = w.begin("u");
        let extra = w.begin("v");
        assert!(!w.wait("t", Duration::ZERO), "bounded");
        // The bound is the clock's: past it, the next wake-up gives up.
        let gave_up = waiter(&w, "t");
        clock.advance(Duration::from_secs(11));
        drop(extra);
        assert_eq!(gave_up.recv_timeout(Duration::from_secs(5)), Ok(false));
        drop(a);
        assert!(!w.wait("t", Duration::ZERO), "one left");
        let cleared = waiter(&w, "t");
        drop(b);
        assert_eq!(
            cleared.recv_timeout(Duration::from_secs(5)),
            Ok(true),
            "woken by the confirmation"
        );
        assert!(!w.wait("u", Duration::ZERO));
        drop(other);
        assert!(w.wait("u", Duration::ZERO));
    }
}
