//! The in-memory view of thread state: lazily loaded documents, each behind its own mutex,
//! plus the index of live executions (for the cancel route). A worker holds a thread's lock
//! only while it mutates and persists that thread, never across kernel I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) use super::admission::Thread;
use crate::clock::{Clock, SystemClock};
use crate::history::{Bounds, Ops, Transcript};
use crate::principal::{Caller, ThreadKey};
use crate::store::document::ThreadDoc;
use crate::store::files::{FileStore, StoreError};

/// Where thread documents live (a trait so tests can inject failures).
pub trait ThreadStore: Send + Sync {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError>;
    /// Save under the document's owner and thread id.
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError>;
    /// The thread's conversation (a store without them has none).
    fn load_history(&self, _key: &ThreadKey) -> Result<Option<Transcript>, StoreError> {
        Ok(None)
    }
    fn save_history(&self, _key: &ThreadKey, _t: &Transcript) -> Result<(), StoreError> {
        Ok(())
    }
    /// Remove the thread's state and conversation.
    fn delete(&self, _key: &ThreadKey) -> Result<(), StoreError> {
        Ok(())
    }
    /// Every conversation of `caller`.
    fn histories(&self, _caller: &Caller) -> Vec<Transcript> {
        Vec::new()
    }
    /// Move a damaged conversation file out of the way (kept for the operator).
    fn set_history_aside(&self, _key: &ThreadKey) {}
    /// Every principal that has threads here.
    fn callers(&self) -> Vec<Caller> {
        vec![Caller::Shared]
    }
}

impl ThreadStore for FileStore {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        FileStore::load(self, key)
    }
    fn load_history(&self, key: &ThreadKey) -> Result<Option<Transcript>, StoreError> {
        FileStore::load_history(self, key)
    }
    fn save_history(&self, key: &ThreadKey, t: &Transcript) -> Result<(), StoreError> {
        FileStore::save_history(self, key, t)
    }
    fn delete(&self, key: &ThreadKey) -> Result<(), StoreError> {
        FileStore::delete(self, key)
    }
    fn histories(&self, caller: &Caller) -> Vec<Transcript> {
        FileStore::histories(self, caller)
    }
    fn set_history_aside(&self, key: &ThreadKey) {
        FileStore::set_history_aside(self, key)
    }
    fn callers(&self) -> Vec<Caller> {
        FileStore::callers(self)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        FileStore::save(self, doc)
    }
}

/// `None` inside the mutex: the thread does not exist (yet).
pub(crate) type Slot = Arc<Mutex<Option<Thread>>>;

use crate::a2a::calls::CallPool;
use crate::sync::lock;

pub struct Registry {
    store: Arc<dyn ThreadStore>,
    threads: Mutex<HashMap<ThreadKey, Slot>>,
    /// Live executions: executionId → the thread.
    live: Mutex<HashMap<String, ThreadKey>>,
    last_activity: Mutex<Instant>,
    max_cached: usize,
    /// Idle time (`--idle-shutdown`); the adapter's `Env` once `Shared` owns the registry.
    clock: Arc<dyn Clock>,
    /// Saves run on a call thread: a run's worker lives as long as its stream, and the
    /// write path (serialise, write, fsync, rename) would stay in its resident stack.
    calls: CallPool,
}

/// Drop cached threads nobody holds and that have no active run, until `target` remain (or
/// no more can go). Their files are the truth; they reload when named again.
fn evict_idle(map: &mut HashMap<ThreadKey, Slot>, target: usize) {
    let idle: Vec<ThreadKey> = map
        .iter()
        .filter(|(_, s)| {
            Arc::strong_count(s) == 1
                && s.try_lock()
                    .is_ok_and(|t| t.as_ref().is_none_or(|t| t.active_run.is_none()))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in idle {
        if map.len() <= target {
            break;
        }
        map.remove(&k);
    }
}

impl Registry {
    pub fn new(store: Arc<dyn ThreadStore>) -> Registry {
        Registry {
            store,
            threads: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            last_activity: Mutex::new(SystemClock.now()),
            max_cached: crate::limits::MAX_CACHED_THREADS,
            clock: Arc::new(SystemClock),
            calls: CallPool::default(),
        }
    }

    /// Save on these call threads (the kernel client's).
    pub(crate) fn set_calls(&mut self, calls: CallPool) {
        self.calls = calls;
    }

    /// The call threads saves run on; admission runs there too.
    pub(crate) fn calls(&self) -> &CallPool {
        &self.calls
    }

    /// Take the time from `clock` from now on.
    pub(crate) fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.last_activity = Mutex::new(clock.now());
        self.clock = clock;
    }

    /// A registry that keeps at most `n` threads cached (tests).
    #[cfg(test)]
    pub(crate) fn with_cache_limit(mut self, n: usize) -> Registry {
        self.max_cached = n.max(2);
        self
    }

    /// Threads currently cached.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        lock(&self.threads).len()
    }

    /// The thread's slot, loading it from disk the first time it is named. The file is read
    /// without the registry-wide lock held, so a slow disk delays only this thread.
    pub(crate) fn slot(&self, key: &ThreadKey) -> Result<Slot, StoreError> {
        if let Some(s) = lock(&self.threads).get(key) {
            return Ok(s.clone());
        }
        let loaded = self.store.load(key)?;
        let mut map = lock(&self.threads);
        // Another worker may have loaded it meanwhile: its slot (perhaps already changed) wins.
        if let Some(s) = map.get(key) {
            return Ok(s.clone());
        }
        if let Some(doc) = &loaded {
            let ex = &doc.execution;
            if ex.task_id.is_some() && !doc.terminal.contains(&ex.execution_id) {
                lock(&self.live).insert(ex.execution_id.clone(), key.clone());
            }
        }
        let slot: Slot = Arc::new(Mutex::new(loaded.map(|doc| Thread {
            doc,
            active_run: None,
        })));
        map.insert(key.clone(), slot.clone());
        if map.len() > self.max_cached {
            evict_idle(&mut map, self.max_cached / 2);
        }
        Ok(slot)
    }

    /// The one write path of a thread: under its lock, `next` builds the new state from the
    /// current one (`None`: nothing to write); it is saved, and becomes current only if the
    /// save worked. Returns `next`'s value, `None` when nothing was written.
    pub(crate) fn update<R>(
        &self,
        slot: &Slot,
        next: impl FnOnce(Option<&Thread>) -> Option<(Thread, R)>,
    ) -> Result<Option<R>, StoreError> {
        let mut g = lock(slot);
        let Some((t, r)) = next(g.as_ref()) else {
            return Ok(None);
        };
        self.save_as_current(&mut g, Box::new(t))?;
        Ok(Some(r))
    }

    /// Save `t` on a call thread, then make it current (the thread moved by pointer).
    fn save_as_current(
        &self,
        current: &mut Option<Thread>,
        t: Box<Thread>,
    ) -> Result<(), StoreError> {
        let store = self.store.clone();
        let (t, saved) = self.calls.run(move || {
            let saved = store.save(&t.doc);
            (t, saved)
        });
        saved?;
        *current = Some(*t);
        Ok(())
    }

    /// Drop the cache entry of a thread that turned out not to exist, so unknown ids from
    /// failed requests do not accumulate.
    pub(crate) fn forget_if_absent(&self, key: &ThreadKey) {
        let mut map = lock(&self.threads);
        if let Some(s) = map.get(key)
            && Arc::strong_count(s) == 1
            && lock(s).is_none()
        {
            map.remove(key);
        }
    }

    pub(crate) fn live_insert(&self, execution_id: &str, key: &ThreadKey) {
        lock(&self.live).insert(execution_id.into(), key.clone());
    }

    pub(crate) fn live_remove(&self, execution_id: &str) {
        lock(&self.live).remove(execution_id);
    }

    /// The thread of a live execution, whoever owns it: callers compare its owner with
    /// theirs before saying anything about it.
    pub(crate) fn live_thread(&self, execution_id: &str) -> Option<ThreadKey> {
        lock(&self.live).get(execution_id).cloned()
    }

    /// Record a run's part of the conversation: the request's new messages (a JSON array),
    /// then what its events did, bounded; under the thread's lock, so two writers of one thread (a run
    /// and its guidance) do not lose each other's messages.
    pub(crate) fn record_history(
        &self,
        slot: &Slot,
        key: &ThreadKey,
        now_ms: u64,
        input: Box<[u8]>,
        ops: Ops,
        bounds: Bounds,
    ) -> Result<(), StoreError> {
        if input.is_empty() && ops.is_empty() {
            return Ok(());
        }
        let _held = lock(slot);
        let store = self.store.clone();
        let key = key.clone();
        self.calls.run(move || {
            // The request's new messages, kept as compact JSON since admission.
            let input: Vec<serde_json::Value> = serde_json::from_slice(&input).unwrap_or_default();
            let stored = match store.load_history(&key) {
                Ok(t) => t,
                // Contained: the damaged file is kept aside for the operator and the thread
                // goes on with a conversation that starts here.
                Err(StoreError::Invalid(why)) => {
                    log::error!("thread {}: {why}; set aside, a new one starts", key.id);
                    store.set_history_aside(&key);
                    None
                }
                Err(e) => return Err(e),
            };
            let mut t = stored.unwrap_or_else(|| Transcript::new(&key.id, now_ms));
            t.add_input(&input);
            t.apply(&ops);
            t.bound(bounds);
            t.updated_at = now_ms;
            store.save_history(&key, &t)
        })
    }

    /// The thread's stored conversation.
    pub(crate) fn history(&self, key: &ThreadKey) -> Result<Option<Transcript>, StoreError> {
        let store = self.store.clone();
        let key = key.clone();
        self.calls.run(move || store.load_history(&key))
    }

    /// Every conversation of `caller`.
    pub(crate) fn histories(&self, caller: &Caller) -> Vec<Transcript> {
        let store = self.store.clone();
        let caller = caller.clone();
        self.calls.run(move || store.histories(&caller))
    }

    /// Delete a thread that has no active run: files first, then the cached state (a
    /// holder of the slot sees the thread gone). `Ok(false)`: it has an active run.
    pub(crate) fn delete(&self, slot: &Slot, key: &ThreadKey) -> Result<bool, StoreError> {
        let mut g = lock(slot);
        if g.as_ref().is_some_and(|t| t.active_run.is_some()) {
            return Ok(false);
        }
        let store = self.store.clone();
        let k = key.clone();
        self.calls.run(move || store.delete(&k))?;
        if let Some(t) = g.take() {
            self.live_remove(&t.doc.execution.execution_id);
        }
        drop(g);
        self.forget_if_absent(key);
        Ok(true)
    }

    /// Delete the threads idle since before `cutoff_ms` (Unix ms): their last conversation
    /// write; a thread with an active run stays. Returns how many went.
    pub(crate) fn expire(&self, cutoff_ms: u64) -> usize {
        let store = self.store.clone();
        let old: Vec<ThreadKey> = self.calls.run(move || {
            store
                .callers()
                .into_iter()
                .flat_map(|c| {
                    store
                        .histories(&c)
                        .into_iter()
                        .filter(|t| t.updated_at < cutoff_ms)
                        .map(move |t| ThreadKey::new(&c, &t.thread_id))
                        .collect::<Vec<_>>()
                })
                .collect()
        });
        let mut gone = 0;
        for key in old {
            let deleted = match self.slot(&key) {
                Ok(slot) => self.delete(&slot, &key),
                Err(_) => self.delete_files(&key).map(|()| true),
            };
            match deleted {
                Ok(true) => gone += 1,
                Ok(false) => {}
                Err(e) => log::error!("thread {}: expiry failed: {e}", key.id),
            }
        }
        gone
    }

    /// Delete the files of a thread whose state cannot be loaded (nothing of it is cached).
    pub(crate) fn delete_files(&self, key: &ThreadKey) -> Result<(), StoreError> {
        let store = self.store.clone();
        let k = key.clone();
        self.calls.run(move || store.delete(&k))
    }

    pub(crate) fn touch(&self) {
        *lock(&self.last_activity) = self.clock.now();
    }

    pub(crate) fn last_activity(&self) -> Instant {
        *lock(&self.last_activity)
    }

    /// True when no loaded thread has an active run or pending interrupts (idle shutdown).
    pub(crate) fn quiescent(&self) -> bool {
        let slots: Vec<Slot> = lock(&self.threads).values().cloned().collect();
        slots.iter().all(|s| {
            lock(s)
                .as_ref()
                .is_none_or(|t| t.active_run.is_none() && t.doc.execution.pending.is_empty())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::document::{Execution, ThreadDoc};

    struct Mem(Mutex<HashMap<ThreadKey, ThreadDoc>>);

    impl ThreadStore for Mem {
        fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
            Ok(lock(&self.0).get(key).cloned())
        }
        fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
            let key = ThreadKey::new(&doc.owner, &doc.thread_id);
            lock(&self.0).insert(key, doc.clone());
            Ok(())
        }
    }

    fn k(id: &str) -> ThreadKey {
        ThreadKey::shared(id)
    }

    #[test]
    fn the_cache_is_bounded_and_evicted_threads_reload_from_the_store() {
        let store = Arc::new(Mem(Mutex::new(HashMap::new())));
        for i in 0..50 {
            let doc = ThreadDoc {
                thread_id: format!("t{i}"),
                context_id: "c".into(),
                cwd: "/w".into(),
                execution: Execution {
                    execution_id: format!("e{i}"),
                    ros_invocation_id: "r".into(),
                    ..Default::default()
                },
                ..Default::default()
            };
            store.save(&doc).unwrap();
        }
        let reg = Registry::new(store).with_cache_limit(10);
        // A busy thread is never evicted.
        let busy = reg.slot(&k("t0")).unwrap();
        lock(&busy).as_mut().unwrap().active_run = Some("run".into());
        drop(busy);
        for i in 1..50 {
            let _ = reg.slot(&k(&format!("t{i}"))).unwrap();
        }
        assert!(reg.cached() <= 11, "{} cached", reg.cached());
        let busy = reg.slot(&k("t0")).unwrap();
        assert_eq!(
            lock(&busy).as_ref().unwrap().active_run.as_deref(),
            Some("run")
        );
        let again = reg.slot(&k("t3")).unwrap();
        assert_eq!(
            lock(&again).as_ref().unwrap().doc.execution.execution_id,
            "e3"
        );
    }

    /// Records the thread each save ran on.
    struct Where(Mutex<Vec<Option<String>>>);

    impl ThreadStore for Where {
        fn load(&self, _: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
            Ok(None)
        }
        fn save(&self, _: &ThreadDoc) -> Result<(), StoreError> {
            let name = std::thread::current().name().map(str::to_string);
            lock(&self.0).push(name);
            Ok(())
        }
    }

    #[test]
    fn saves_run_on_a_call_thread_not_the_runs_worker() {
        let store = Arc::new(Where(Mutex::new(Vec::new())));
        let reg = Registry::new(store.clone());
        let slot = reg.slot(&k("t")).unwrap();
        let doc = ThreadDoc {
            thread_id: "t".into(),
            ..Default::default()
        };
        let saved = reg.update(&slot, |_| {
            let t = Thread {
                doc,
                active_run: None,
            };
            Some((t, 7))
        });
        assert_eq!(saved.unwrap(), Some(7));
        assert_eq!(
            lock(&store.0).as_slice(),
            [Some("iac-agui-call".to_string())]
        );
        assert_eq!(
            lock(&slot).as_ref().unwrap().doc.thread_id,
            "t",
            "kept after the save"
        );
    }
}
