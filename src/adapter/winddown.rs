//! The per-thread wind-down barrier. A run that ends (cancel, disconnect) while its kernel task
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
    stopping: Mutex<HashMap<String, usize>>,
    changed: Condvar,
    /// The bound of `wait` (the adapter's `Env`).
    clock: Arc<dyn Clock>,
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
        while g.contains_key(thread_id) {
            let Some(left) = deadline.checked_duration_since(self.clock.now()) else {
                return false;
            };
            g = self
                .changed
                .wait_timeout(g, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        true
    }
}

impl Drop for WindDown {
    fn drop(&mut self) {
        let mut g = lock(&self.owner.stopping);
        if let Some(n) = g.get_mut(&self.thread_id) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.thread_id);
            }
        }
        drop(g);
        self.owner.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_every_stop_is_confirmed_or_the_bound() {
        let w = Arc::new(WindDowns::new(Arc::new(crate::clock::SystemClock)));
        assert!(w.wait("t", Duration::ZERO), "nothing stopping");
        let a = w.begin("t");
        let b = w.begin("t");
        let other = w.begin("u");
        assert!(!w.wait("t", Duration::from_millis(20)), "bounded");
        drop(a);
        assert!(!w.wait("t", Duration::from_millis(20)), "one left");
        let w2 = w.clone();
        let waiter = std::thread::spawn(move || w2.wait("t", Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(30));
        drop(b);
        assert!(waiter.join().unwrap(), "woken by the confirmation");
        assert!(!w.wait("u", Duration::ZERO));
        drop(other);
        assert!(w.wait("u", Duration::ZERO));
    }
}
