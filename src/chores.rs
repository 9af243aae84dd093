//! Periodic work beside the loop: expired replay logs freed, threads past their retention
//! deleted, the idle check. Each takes locks the workers take (the replay index, every
//! thread's mutex) or does file I/O, so none of it may run on the loop: they run on one
//! thread of their own, and what the loop must learn (a drain to begin) reaches it through
//! its `ShutdownHandle`, as a signal's does. The loop runs none of this, and none of the
//! adapter's code: what it tells a run (a client gone, a grace over, the drain's end) is an
//! event to the run's life cell (`crate::life`), whose only act is a session's socket
//! shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};

/// One chore: run every `period`; it returns false once it has nothing more to do.
pub(crate) struct Chore {
    period: Duration,
    next: Instant,
    run: Box<dyn FnMut() -> bool + Send>,
}

impl Chore {
    pub(crate) fn every(period: Duration, run: impl FnMut() -> bool + Send + 'static) -> Chore {
        Chore {
            period,
            next: SystemClock.now() + period,
            run: Box::new(run),
        }
    }
}

/// The chores' thread; it ends when `stop` is set (at the latest one period later) or when
/// every chore is done.
pub(crate) fn spawn(mut chores: Vec<Chore>, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    if chores.is_empty() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("iac-agui-chores".into())
        .stack_size(crate::limits::WORKER_STACK_BYTES)
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) && !chores.is_empty() {
                let now = SystemClock.now();
                chores.retain_mut(|c| {
                    if c.next > now {
                        return true;
                    }
                    c.next = now + c.period;
                    (c.run)()
                });
                let next = chores.iter().map(|c| c.next).min();
                if let Some(next) = next {
                    std::thread::sleep(next.saturating_duration_since(SystemClock.now()));
                }
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn chores_run_on_their_own_thread_until_done() {
        let n = Arc::new(AtomicUsize::new(0));
        let on = Arc::new(std::sync::Mutex::new(None));
        let (m, o) = (n.clone(), on.clone());
        let chore = Chore::every(Duration::from_millis(1), move || {
            *o.lock().unwrap() = std::thread::current().name().map(str::to_string);
            m.fetch_add(1, Ordering::SeqCst) < 2
        });
        spawn(vec![chore], Arc::new(AtomicBool::new(false))).unwrap();
        let deadline = SystemClock.now() + Duration::from_secs(10);
        while n.load(Ordering::SeqCst) < 3 && SystemClock.now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(n.load(Ordering::SeqCst), 3, "ran until it said it was done");
        assert_eq!(on.lock().unwrap().as_deref(), Some("iac-agui-chores"));
    }
}
