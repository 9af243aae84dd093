//! The in-memory view of thread state: lazily loaded documents, each behind its own mutex,
//! plus the index of live executions (for the cancel route). A worker holds a thread's lock
//! only while it mutates and persists that thread, never across kernel I/O. The threads'
//! stored conversations are `conversations.rs`'s (feature `threads`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) use crate::adapter::rules::admission::Thread;
use crate::clock::{Clock, SystemClock};
use crate::principal::ThreadKey;
use crate::store::document::ThreadDoc;
use crate::store::files::{FileStore, StoreError};

mod conversations;
pub(crate) use conversations::TurnOf;

/// Where thread documents live (a trait so tests can inject failures). Conversations are
/// another store's (`store::conversations`, feature `threads`): a registry made with
/// `Registry::new` keeps none.
pub trait ThreadStore: Send + Sync {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError>;
    /// Save under the document's owner and thread id.
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError>;
    /// Remove the thread's state.
    fn delete(&self, _key: &ThreadKey) -> Result<(), StoreError> {
        Ok(())
    }
}

impl ThreadStore for FileStore {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        FileStore::load(self, key)
    }
    fn delete(&self, key: &ThreadKey) -> Result<(), StoreError> {
        FileStore::delete(self, key)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        FileStore::save(self, doc)
    }
}

/// The conversation a turn's stream restates first (`MESSAGES_SNAPSHOT`).
pub(crate) type Snapshot = Vec<serde_json::Value>;

/// `None` inside the mutex: the thread does not exist (yet).
pub(crate) type Slot = Arc<Mutex<Option<Thread>>>;

use crate::sync::lock;

/// Where the registry's file work runs: a trait of its own (the registry is the thread
/// store's, not the kernel client's). A run's worker lives as long as its stream and keeps
/// the deepest stack it ever had, so saves (serialise, write, fsync, rename) go elsewhere.
pub(crate) trait Offload: Send + Sync {
    /// Run `job` off the caller's stack and return once it has run (a panic in it is
    /// resumed here).
    fn run(&self, job: Box<dyn FnOnce() + Send>);
}

/// Right where it is asked (a registry nobody gave threads to: tests).
struct InPlace;

impl Offload for InPlace {
    fn run(&self, job: Box<dyn FnOnce() + Send>) {
        job()
    }
}

/// `f` through `o`, its result handed back.
fn offloaded<T: Send + 'static>(o: &dyn Offload, f: impl FnOnce() -> T + Send + 'static) -> T {
    let out = Arc::new(Mutex::new(None));
    let put = out.clone();
    o.run(Box::new(move || *lock(&put) = Some(f())));
    let taken = lock(&out).take();
    taken.unwrap_or_else(|| unreachable!("Offload::run returns once its job ran"))
}

pub struct Registry {
    store: Arc<dyn ThreadStore>,
    /// The threads' conversations and the callers' indexes (`None`: kept nowhere).
    #[cfg(feature = "threads")]
    conversations: Option<Arc<crate::store::conversations::Conversations>>,
    threads: Mutex<HashMap<ThreadKey, Slot>>,
    /// Live executions: executionId → the thread.
    live: Mutex<HashMap<String, ThreadKey>>,
    last_activity: Mutex<Instant>,
    max_cached: usize,
    /// Idle time (`--idle-shutdown`); the adapter's `Env` once `Shared` owns the registry.
    clock: Arc<dyn Clock>,
    /// Saves run off the caller's stack: a run's worker lives as long as its stream, and the
    /// write path (serialise, write, fsync, rename) would stay in its resident stack.
    offload: Arc<dyn Offload>,
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
            #[cfg(feature = "threads")]
            conversations: None,
            threads: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            last_activity: Mutex::new(SystemClock.now()),
            max_cached: crate::limits::MAX_CACHED_THREADS,
            clock: Arc::new(SystemClock),
            offload: Arc::new(InPlace),
        }
    }

    /// Do the file work through `o` from now on.
    pub(crate) fn set_offload(&mut self, o: Arc<dyn Offload>) {
        self.offload = o;
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
            dialect: None,
        })));
        map.insert(key.clone(), slot.clone());
        if map.len() > self.max_cached {
            evict_idle(&mut map, self.max_cached / 2);
        }
        Ok(slot)
    }

    /// The one write path of a thread: under its lock, `next` builds the new state from the
    /// current one (`None`: nothing to write); it is saved, and becomes current only if the
    /// save worked. Returns `next`'s value, `None` when nothing was written. The new state
    /// is boxed by `next`: moved by value, a thread is copied through each frame on the way,
    /// and a run's worker keeps the deepest it has been for the stream's life.
    pub(crate) fn update<R>(
        &self,
        slot: &Slot,
        next: impl FnOnce(Option<&Thread>) -> Option<(Box<Thread>, R)>,
    ) -> Result<Option<R>, StoreError> {
        self.update_then(slot, next, |_, _| {})
    }

    /// [`Registry::update`], and `then` still under the thread's lock once the save's outcome
    /// is known (`true`: saved and current): what the change promised is published before
    /// anyone who takes the lock can look (the cancel route's claim, docs/LIFECYCLE.md).
    pub(crate) fn update_then<R>(
        &self,
        slot: &Slot,
        next: impl FnOnce(Option<&Thread>) -> Option<(Box<Thread>, R)>,
        then: impl FnOnce(&R, bool),
    ) -> Result<Option<R>, StoreError> {
        let mut g = lock(slot);
        let Some((t, r)) = next(g.as_ref()) else {
            return Ok(None);
        };
        let saved = self.save_as_current(&mut g, t);
        then(&r, saved.is_ok());
        saved?;
        Ok(Some(r))
    }

    /// Save `t` on a call thread, then make it current (the thread moved by pointer).
    fn save_as_current(
        &self,
        current: &mut Option<Thread>,
        t: Box<Thread>,
    ) -> Result<(), StoreError> {
        let store = self.store.clone();
        let (t, saved) = offloaded(&*self.offload, move || {
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

    /// Admit a turn: under the thread's lock, `next` decides the new state (as `update`);
    /// when it admits (`main`: a turn of its own, not guidance), the request's messages the
    /// thread's stored conversation lacks are appended to it first, the state saved next (the
    /// append is taken back when the save fails), and the thread's index entry says it runs:
    /// the turn is durable and listed before it is announced. `committed` runs after the
    /// save, before the lock is released (the run made findable with its cell registered).
    /// Returns `next`'s value and the conversation to restate (a 1.0 client's short history:
    /// `MESSAGES_SNAPSHOT`; never without stored conversations). Runs on a call thread
    /// (admission does).
    pub(crate) fn admit<R>(
        &self,
        slot: &Slot,
        turn: TurnOf<'_>,
        next: impl FnOnce(Option<&Thread>) -> Option<(Thread, R)>,
        main: impl FnOnce(&R) -> bool,
        committed: impl FnOnce(&R),
    ) -> Result<Option<(R, Option<Snapshot>)>, StoreError> {
        let mut g = lock(slot);
        let Some((t, r)) = next(g.as_ref()) else {
            return Ok(None);
        };
        let begun = self.begin_turn(&turn, main(&r))?;
        if let Err(e) = self.save_as_current(&mut g, Box::new(t)) {
            self.undo_turn(&turn, begun);
            return Err(e);
        }
        let snapshot = self.turn_admitted(&turn, begun);
        // Still under the thread's lock: whoever looks at the thread next finds the run
        // registered with the state that names it.
        committed(&r);
        Ok(Some((r, snapshot)))
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

    pub(super) struct Mem(pub(super) Mutex<HashMap<ThreadKey, ThreadDoc>>);

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

    pub(super) fn k(id: &str) -> ThreadKey {
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
    fn saves_run_through_the_registrys_offload_not_on_the_caller() {
        /// Each job on a thread of its own, named so the store can tell.
        struct Elsewhere;
        impl Offload for Elsewhere {
            fn run(&self, job: Box<dyn FnOnce() + Send>) {
                let t = std::thread::Builder::new().name("offloaded".into());
                t.spawn(job).unwrap().join().unwrap();
            }
        }
        let store = Arc::new(Where(Mutex::new(Vec::new())));
        let mut reg = Registry::new(store.clone());
        reg.set_offload(Arc::new(Elsewhere));
        let slot = reg.slot(&k("t")).unwrap();
        let doc = ThreadDoc {
            thread_id: "t".into(),
            ..Default::default()
        };
        let saved = reg.update(&slot, |_| {
            let t = Thread {
                doc,
                active_run: None,
                dialect: None,
            };
            Some((Box::new(t), 7))
        });
        assert_eq!(saved.unwrap(), Some(7));
        assert_eq!(lock(&store.0).as_slice(), [Some("offloaded".to_string())]);
        assert_eq!(
            lock(&slot).as_ref().unwrap().doc.thread_id,
            "t",
            "kept after the save"
        );
    }
}
