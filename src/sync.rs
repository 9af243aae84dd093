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

/// Named points where a test stops a thread (only in tests): the test arms a point, the
/// first thread that reaches it waits there until the test releases it, so an ordering
/// between threads is made on purpose instead of hoped for with a sleep.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Points {
    gates: Mutex<std::collections::HashMap<&'static str, std::sync::Arc<Gate>>>,
}

#[cfg(test)]
#[derive(Default)]
pub(crate) struct Gate {
    /// (a thread reached it, the test released it)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

#[cfg(test)]
impl Points {
    /// Stop the next thread that reaches `name`.
    pub(crate) fn arm(&self, name: &'static str) -> std::sync::Arc<Gate> {
        let g = std::sync::Arc::new(Gate::default());
        lock(&self.gates).insert(name, g.clone());
        g
    }

    /// A thread passes `name`: it waits there if the point is armed (once).
    pub(crate) fn at(&self, name: &'static str) {
        let gate = lock(&self.gates).remove(name);
        if let Some(g) = gate {
            let mut s = lock(&g.state);
            s.0 = true;
            g.changed.notify_all();
            while !s.1 {
                s = g.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

#[cfg(test)]
impl Gate {
    /// Wait until a thread stopped here (at most `d`); true when one did.
    pub(crate) fn reached(&self, d: Duration) -> bool {
        let s = lock(&self.state);
        let (s, _) = self
            .changed
            .wait_timeout_while(s, d, |s| !s.0)
            .unwrap_or_else(|e| e.into_inner());
        s.0
    }

    /// Let the stopped thread (or the next one to come) go on.
    pub(crate) fn release(&self) {
        lock(&self.state).1 = true;
        self.changed.notify_all();
    }
}
