//! The one mutex helper: a poisoned lock (a panicking worker) is still usable, because every
//! guarded structure here stays consistent between statements.

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
