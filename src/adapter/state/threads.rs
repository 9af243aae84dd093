//! The in-memory view of thread state: lazily loaded documents, each behind its own mutex,
//! plus the index of live executions (for the cancel route). A worker holds a thread's lock
//! only while it mutates and persists that thread, never across kernel I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) use crate::adapter::admission::Thread;
use crate::clock::{Clock, SystemClock};
use crate::history::{Bounds, Ops, Transcript};
use crate::principal::{Caller, ThreadKey};
use crate::store::conversations::{ConversationFiles, Conversations};
use crate::store::document::ThreadDoc;
use crate::store::files::{FileStore, StoreError};
use crate::store::index::{After, Entry, Filter, Status};

/// Where thread documents live (a trait so tests can inject failures). Conversations are
/// another store's (`store::conversations`): a registry made with `Registry::new` keeps none.
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

/// Which turn an admission begins: its thread, its run, when.
pub(crate) struct TurnOf<'a> {
    pub(crate) key: &'a ThreadKey,
    pub(crate) run_id: &'a str,
    pub(crate) now_ms: u64,
}

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
    conversations: Option<Arc<Conversations>>,
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
            conversations: None,
            threads: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            last_activity: Mutex::new(SystemClock.now()),
            max_cached: crate::limits::MAX_CACHED_THREADS,
            clock: Arc::new(SystemClock),
            offload: Arc::new(InPlace),
        }
    }

    /// Threads in the state directory, their conversations beside them.
    pub fn files(store: Arc<FileStore>) -> Registry {
        Registry::new(store.clone()).with_conversations(store)
    }

    /// Keep the threads' conversations in `files`.
    pub fn with_conversations(mut self, files: Arc<dyn ConversationFiles>) -> Registry {
        self.conversations = Some(Arc::new(Conversations::new(files, Bounds::default())));
        self
    }

    /// Bound each stored conversation.
    pub(crate) fn set_history_bounds(&mut self, b: Bounds) {
        if let Some(c) = self.conversations.as_mut().and_then(Arc::get_mut) {
            c.set_bounds(b);
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

    /// What a thread's state file says of it, for index entries derived from the files (no
    /// slot lock: the index's lock may be held).
    fn status_of(store: &Arc<dyn ThreadStore>) -> impl Fn(&ThreadKey) -> Status + use<> {
        let store = store.clone();
        move |key: &ThreadKey| match store.load(key) {
            Ok(Some(d)) if !d.execution.pending.is_empty() => Status::Interrupted,
            _ => Status::Idle,
        }
    }

    /// Admit a turn: under the thread's lock, `next` decides the new state (as `update`);
    /// when it admits, `turn` gets the stored conversation and says which of the request's
    /// messages are new and whether the turn is one of its own (not guidance). Those are
    /// appended to the conversation first, the state saved next (the append is taken back
    /// when the save fails), and the thread's index entry says it runs: the turn is durable
    /// and listed before it is announced. `committed` runs after the save, before the lock is
    /// released (the run made findable with its cell registered). Runs on a call thread
    /// (admission does).
    pub(crate) fn admit<R>(
        &self,
        slot: &Slot,
        turn_of: TurnOf<'_>,
        next: impl FnOnce(Option<&Thread>) -> Option<(Thread, R)>,
        turn: impl FnOnce(&R, Option<Transcript>) -> (Vec<serde_json::Value>, bool),
        committed: impl FnOnce(&R),
    ) -> Result<Option<R>, StoreError> {
        let mut g = lock(slot);
        let Some((t, r)) = next(g.as_ref()) else {
            return Ok(None);
        };
        let Some(c) = &self.conversations else {
            turn(&r, None);
            self.save_as_current(&mut g, Box::new(t))?;
            committed(&r);
            return Ok(Some(r));
        };
        let status_of = Self::status_of(&self.store);
        let TurnOf {
            key,
            run_id,
            now_ms,
        } = turn_of;
        let begun = c.begin_turn(key, now_ms, run_id, &status_of, |stored| turn(&r, stored))?;
        if let Err(e) = self.save_as_current(&mut g, Box::new(t)) {
            c.undo(key, begun);
            return Err(e);
        }
        c.admitted(key, begun, &status_of);
        // Still under the thread's lock: whoever looks at the thread next finds the run
        // registered with the state that names it.
        committed(&r);
        Ok(Some(r))
    }

    /// Record a run's end in the thread's conversation (what its events did), under the
    /// thread's lock, so two writers of one thread (a run and its guidance) do not lose each
    /// other's messages. `main`: the thread's own turn (its end sets the listed status).
    pub(crate) fn record_history(
        &self,
        slot: &Slot,
        key: &ThreadKey,
        run_id: &str,
        now_ms: u64,
        ops: Ops,
        main: bool,
    ) -> Result<(), StoreError> {
        let Some(c) = self.conversations.clone() else {
            return Ok(());
        };
        let held = lock(slot);
        let status = main.then(|| match held.as_ref() {
            Some(t) if !t.doc.execution.pending.is_empty() => Status::Interrupted,
            _ => Status::Idle,
        });
        let status_of = Self::status_of(&self.store);
        let key = key.clone();
        let run_id = run_id.to_string();
        let r = offloaded(&*self.offload, move || {
            c.end_turn(&key, now_ms, &run_id, &ops, status, &status_of)
        });
        drop(held);
        r
    }

    /// A thread's run is over (however it ended): its index entry no longer says it runs.
    pub(crate) fn settle(&self, key: &ThreadKey, run_id: &str, pending: bool) {
        if let Some(c) = &self.conversations {
            let status = if pending {
                Status::Interrupted
            } else {
                Status::Idle
            };
            c.settle(key, run_id, status, &Self::status_of(&self.store));
        }
    }

    /// The thread's stored conversation, bounded.
    pub(crate) fn history(&self, key: &ThreadKey) -> Result<Option<Transcript>, StoreError> {
        let Some(c) = self.conversations.clone() else {
            return Ok(None);
        };
        let status_of = Self::status_of(&self.store);
        let key = key.clone();
        offloaded(&*self.offload, move || c.transcript(&key, &status_of))
    }

    /// The thread's index entry (`None`: the caller has no such thread, as far as the
    /// conversations know).
    pub(crate) fn listed(&self, key: &ThreadKey) -> Result<Option<Entry>, StoreError> {
        let Some(c) = self.conversations.clone() else {
            return Ok(None);
        };
        let status_of = Self::status_of(&self.store);
        let key = key.clone();
        offloaded(&*self.offload, move || c.entry(&key, &status_of))
    }

    /// A listing page of `caller`'s threads, newest activity first, and whether more follow.
    pub(crate) fn page(
        &self,
        caller: &Caller,
        after: Option<(u64, String)>,
        limit: usize,
        filter: Filter,
    ) -> Result<(Vec<Entry>, bool), StoreError> {
        let Some(c) = self.conversations.clone() else {
            return Ok((Vec::new(), false));
        };
        let status_of = Self::status_of(&self.store);
        let caller = caller.clone();
        offloaded(&*self.offload, move || {
            let after: Option<After<'_>> = after.as_ref().map(|(t, id)| (*t, id.as_str()));
            c.page(&caller, after, limit, &|e| filter.keeps(e), &status_of)
        })
    }

    /// Rename a thread (under its lock: its log has one writer at a time). `Ok(None)`: the
    /// caller has no such thread.
    pub(crate) fn rename(
        &self,
        slot: &Slot,
        key: &ThreadKey,
        title: Option<String>,
    ) -> Result<Option<Entry>, StoreError> {
        let Some(c) = self.conversations.clone() else {
            return Ok(None);
        };
        let held = lock(slot);
        let status_of = Self::status_of(&self.store);
        let key = key.clone();
        let r = offloaded(&*self.offload, move || {
            c.rename(&key, title.as_deref(), &status_of)
        });
        drop(held);
        r
    }

    /// The cached state of a thread, if it is cached (a listing's live status; never a read).
    pub(crate) fn cached_slot(&self, key: &ThreadKey) -> Option<Slot> {
        lock(&self.threads).get(key).cloned()
    }

    /// Delete a thread that has no active run, when `still` holds under the thread's lock
    /// (the audit record is written there): files first, then the cached state (a holder of
    /// the slot sees the thread gone). `Ok(Some(false))`: it has an active run; `Ok(None)`:
    /// `still` said no.
    pub(crate) fn delete_if(
        &self,
        slot: &Slot,
        key: &ThreadKey,
        still: impl FnOnce(&ThreadKey) -> bool,
    ) -> Result<Option<bool>, StoreError> {
        let mut g = lock(slot);
        if g.as_ref().is_some_and(|t| t.active_run.is_some()) {
            return Ok(Some(false));
        }
        if !still(key) {
            return Ok(None);
        }
        self.delete_files(key)?;
        if let Some(t) = g.take() {
            self.live_remove(&t.doc.execution.execution_id);
        }
        drop(g);
        self.forget_if_absent(key);
        Ok(Some(true))
    }

    /// Delete the threads idle since before `cutoff_ms` (Unix ms): their last activity as the
    /// index has it, checked again under each thread's lock (a turn that began or ended since
    /// the round looked keeps its thread); a thread with an active run stays. Returns the
    /// threads that went.
    pub(crate) fn expire(
        &self,
        cutoff_ms: u64,
        record: &dyn Fn(&ThreadKey) -> bool,
    ) -> Vec<ThreadKey> {
        let Some(c) = self.conversations.clone() else {
            return Vec::new();
        };
        let status_of = Self::status_of(&self.store);
        let old = offloaded(&*self.offload, move || c.idle_before(cutoff_ms, &status_of));
        self.expire_keys(old, cutoff_ms, record)
    }

    /// The deleting half of `expire`: each of `old` that is still idle since before the
    /// cutoff, as its lock and the index say now.
    /// `record` writes the deletion's audit record (false: the thread is kept).
    fn expire_keys(
        &self,
        old: Vec<ThreadKey>,
        cutoff_ms: u64,
        record: &dyn Fn(&ThreadKey) -> bool,
    ) -> Vec<ThreadKey> {
        let mut gone = Vec::new();
        for key in old {
            let still = |k: &ThreadKey| self.idle_before(k, cutoff_ms) && record(k);
            let deleted = match self.slot(&key) {
                Ok(slot) => self.delete_if(&slot, &key, still),
                Err(_) if still(&key) => self.delete_files(&key).map(|()| Some(true)),
                Err(_) => Ok(None),
            };
            match deleted {
                Ok(Some(true)) => gone.push(key),
                Ok(_) => {}
                Err(e) => log::error!("thread {}: expiry failed: {e}", key.id),
            }
        }
        gone
    }

    /// The index says the thread has been idle since before `cutoff_ms` (and runs nothing).
    fn idle_before(&self, key: &ThreadKey, cutoff_ms: u64) -> bool {
        match self.listed(key) {
            Ok(Some(e)) => e.updated_at < cutoff_ms && e.status != Status::Running,
            _ => false,
        }
    }

    /// Delete a thread's files: its conversation (and index entry), then its state.
    pub(crate) fn delete_files(&self, key: &ThreadKey) -> Result<(), StoreError> {
        let store = self.store.clone();
        let c = self.conversations.clone();
        let k = key.clone();
        offloaded(&*self.offload, move || {
            if let Some(c) = &c {
                c.delete(&k, &Self::status_of(&store))?;
            }
            store.delete(&k)
        })
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

    #[test]
    fn an_expiry_round_never_deletes_a_thread_that_had_a_turn_since_it_looked() {
        // Regression (issue 45, item 9): the sweep decided from an earlier scan and checked
        // only that no run was active at delete time, so a turn's answer could be deleted.
        let files = Arc::new(crate::store::conversations::mem::MemFiles::default());
        let store = Arc::new(Mem(Mutex::new(HashMap::new())));
        let reg = Registry::new(store.clone()).with_conversations(files.clone());
        let c = reg.conversations.clone().unwrap();
        let idle = |_: &ThreadKey| Status::Idle;
        let user = |id: &str| serde_json::json!([{"id": id, "role": "user", "content": "x"}]);
        for (id, at) in [("quiet", 10), ("busy", 10)] {
            store
                .save(&ThreadDoc {
                    thread_id: id.into(),
                    ..Default::default()
                })
                .unwrap();
            let b = c
                .begin_turn(&k(id), at, "r1", &idle, |_| {
                    (vec![user(id)[0].clone()], true)
                })
                .unwrap();
            c.admitted(&k(id), b, &idle);
            c.end_turn(&k(id), at, "r1", &Ops::default(), Some(Status::Idle), &idle)
                .unwrap();
        }
        let round = c.idle_before(100, &idle);
        assert_eq!(round.len(), 2);
        // A turn on `busy` begins and ends after the round looked, before it deletes.
        let b = c
            .begin_turn(&k("busy"), 200, "r2", &idle, |_| {
                (vec![user("u2")[0].clone()], true)
            })
            .unwrap();
        c.admitted(&k("busy"), b, &idle);
        c.end_turn(
            &k("busy"),
            201,
            "r2",
            &Ops::default(),
            Some(Status::Idle),
            &idle,
        )
        .unwrap();
        let gone = reg.expire_keys(round, 100, &|_| true);
        assert_eq!(gone, [k("quiet")]);
        assert!(
            c.entry(&k("busy"), &idle).unwrap().is_some(),
            "busy was deleted"
        );
        assert!(files.log(&k("busy")).is_some());
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
