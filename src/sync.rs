//! The one mutex helper: a poisoned lock (a panicking worker) is still usable, because every
//! guarded structure here stays consistent between statements. And `Kick`, how a watcher
//! thread is woken before its tick.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A flag that wakes a sleeping watcher early (a failed kernel call, SIGHUP); one kick
/// counts once.
#[derive(Debug, Default)]
pub(crate) struct Kick {
    kicked: Mutex<bool>,
    wake: Condvar,
}

impl Kick {
    pub(crate) fn kick(&self) {
        *lock(&self.kicked) = true;
        self.wake.notify_all();
    }

    /// Sleep until `d` passed or someone kicked; true when kicked.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let mut k = lock(&self.kicked);
        if !*k {
            k = match self.wake.wait_timeout(k, d) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        std::mem::replace(&mut *k, false)
    }
}
