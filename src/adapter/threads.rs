//! The in-memory view of thread state: lazily loaded documents, each behind its own mutex,
//! plus the index of live executions (for the cancel route). A worker holds a thread's lock
//! only while it mutates and persists that thread, never across kernel I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::store::document::ThreadDoc;
use crate::store::files::{FileStore, StoreError};

/// Where thread documents live (a trait so tests can inject failures).
pub trait ThreadStore: Send + Sync {
    fn load(&self, thread_id: &str) -> Result<Option<ThreadDoc>, StoreError>;
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError>;
}

impl ThreadStore for FileStore {
    fn load(&self, thread_id: &str) -> Result<Option<ThreadDoc>, StoreError> {
        FileStore::load(self, thread_id)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        FileStore::save(self, doc)
    }
}

/// A loaded thread: its document and the memory-only active run.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    pub doc: ThreadDoc,
    /// The non-guidance run streaming on this thread, if any (never persisted).
    pub active_run: Option<String>,
}

/// `None` inside the mutex: the thread does not exist (yet).
pub type Slot = Arc<Mutex<Option<Thread>>>;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Registry {
    store: Arc<dyn ThreadStore>,
    threads: Mutex<HashMap<String, Slot>>,
    /// Live executions: executionId → threadId.
    live: Mutex<HashMap<String, String>>,
    last_activity: Mutex<Instant>,
}

impl Registry {
    pub fn new(store: Arc<dyn ThreadStore>) -> Registry {
        Registry {
            store,
            threads: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            last_activity: Mutex::new(Instant::now()),
        }
    }

    /// The thread's slot, loading it from disk the first time it is named.
    pub fn slot(&self, thread_id: &str) -> Result<Slot, StoreError> {
        let mut map = lock(&self.threads);
        if let Some(s) = map.get(thread_id) {
            return Ok(s.clone());
        }
        let loaded = self.store.load(thread_id)?;
        if let Some(doc) = &loaded {
            let ex = &doc.execution;
            if ex.task_id.is_some() && !doc.terminal.contains(&ex.execution_id) {
                lock(&self.live).insert(ex.execution_id.clone(), thread_id.to_string());
            }
        }
        let slot: Slot = Arc::new(Mutex::new(loaded.map(|doc| Thread {
            doc,
            active_run: None,
        })));
        map.insert(thread_id.to_string(), slot.clone());
        Ok(slot)
    }

    /// Drop the cache entry of a thread that turned out not to exist, so unknown ids from
    /// failed requests do not accumulate.
    pub fn forget_if_absent(&self, thread_id: &str) {
        let mut map = lock(&self.threads);
        if let Some(s) = map.get(thread_id)
            && Arc::strong_count(s) == 1
            && lock(s).is_none()
        {
            map.remove(thread_id);
        }
    }

    pub fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        self.store.save(doc)
    }

    pub fn live_insert(&self, execution_id: &str, thread_id: &str) {
        lock(&self.live).insert(execution_id.into(), thread_id.into());
    }

    pub fn live_remove(&self, execution_id: &str) {
        lock(&self.live).remove(execution_id);
    }

    pub fn live_thread(&self, execution_id: &str) -> Option<String> {
        lock(&self.live).get(execution_id).cloned()
    }

    pub fn touch(&self) {
        *lock(&self.last_activity) = Instant::now();
    }

    pub fn last_activity(&self) -> Instant {
        *lock(&self.last_activity)
    }

    /// True when no loaded thread has an active run or pending interrupts (idle shutdown).
    pub fn quiescent(&self) -> bool {
        let slots: Vec<Slot> = lock(&self.threads).values().cloned().collect();
        slots.iter().all(|s| {
            lock(s)
                .as_ref()
                .is_none_or(|t| t.active_run.is_none() && t.doc.execution.pending.is_empty())
        })
    }
}
