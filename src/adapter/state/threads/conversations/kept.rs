//! The stored conversations the registry keeps (`Registry::keep_conversations`).

use std::sync::Arc;

use serde_json::Value;

use super::TurnOf;
use crate::adapter::state::threads::{Registry, Slot, Snapshot, ThreadStore, offloaded};
use crate::agui::dialect::Dialect;
use crate::conversation::{Bounds, Ops, TRIMMED_ID, Transcript};
use crate::principal::{Caller, ThreadKey};
use crate::store::conversations::{self, ConversationFiles, Conversations};
use crate::store::files::{FileStore, StoreError};
use crate::store::index::{After, Entry, Filter, Status};
use crate::sync::lock;

/// A turn begun in its thread's conversation, and the conversation to restate.
pub(in crate::adapter::state::threads) type Begun =
    Option<(conversations::Begun, Option<Snapshot>)>;

impl Registry {
    /// Threads in the state directory, their conversations beside them.
    pub fn files(store: Arc<FileStore>) -> Registry {
        Registry::new(store.clone()).with_conversations(store)
    }

    /// Keep the threads' conversations in `files`.
    pub fn with_conversations(mut self, files: Arc<dyn ConversationFiles>) -> Registry {
        self.keep_conversations(files, Bounds::default());
        self
    }

    /// Keep each thread's conversation in `files`, within `bounds`.
    pub(crate) fn keep_conversations(&mut self, files: Arc<dyn ConversationFiles>, bounds: Bounds) {
        self.conversations = Some(Arc::new(Conversations::new(files, bounds)));
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

    /// Admission's turn, under the thread's lock: the request's messages the conversation
    /// lacks appended (durable before the state save), and what to restate.
    pub(in crate::adapter::state::threads) fn begin_turn(
        &self,
        turn: &TurnOf<'_>,
        main: bool,
    ) -> Result<Begun, StoreError> {
        let Some(c) = &self.conversations else {
            return Ok(None);
        };
        let status_of = Self::status_of(&self.store);
        let mut snapshot = None;
        let begun = c.begin_turn(turn.key, turn.now_ms, turn.run_id, &status_of, |stored| {
            let (new, snap) = restated(turn.dialect, stored, turn.messages);
            snapshot = snap;
            (new, main)
        })?;
        Ok(Some((begun, snapshot)))
    }

    /// The turn's state save failed: its input is taken back out of the log.
    pub(in crate::adapter::state::threads) fn undo_turn(&self, turn: &TurnOf<'_>, begun: Begun) {
        if let (Some(c), Some((b, _))) = (&self.conversations, begun) {
            c.undo(turn.key, b);
        }
    }

    /// The turn's state save worked: the index lists it, running. Returns what to restate.
    pub(in crate::adapter::state::threads) fn turn_admitted(
        &self,
        turn: &TurnOf<'_>,
        begun: Begun,
    ) -> Option<Snapshot> {
        let (c, (b, snapshot)) = (self.conversations.as_ref()?, begun?);
        c.admitted(turn.key, b, &Self::status_of(&self.store));
        snapshot
    }

    /// An empty record of a run's part of the conversation, bounded like the conversation it
    /// goes into (`None`: the registry keeps none).
    pub(crate) fn run_ops(&self) -> Option<Ops> {
        let c = self.conversations.as_ref()?;
        Some(Ops::with_cap(c.bounds().max_bytes))
    }

    /// Record a run's end in the thread's conversation (what its events did), under the
    /// thread's lock, so two writers of one thread (a run and its guidance) do not lose each
    /// other's messages. `main`: the thread's own turn (its end sets the listed status).
    /// A failed write is counted (`iac_agui_history_write_failures_total`): the run then
    /// fails closed.
    pub(crate) fn end_turn(
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
        if r.is_err() {
            crate::conversation::SERIES.write_failures.inc();
        }
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
    pub(crate) fn transcript(&self, key: &ThreadKey) -> Result<Option<Transcript>, StoreError> {
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
}

/// The request's messages the stored conversation lacks, and in AG-UI 1.0 mode the whole
/// conversation to restate when the request holds less than the server keeps. 1.0 spec,
/// `RunAgentInput.messages`: "the complete history"; `MESSAGES_SNAPSHOT`: "a complete
/// snapshot of the conversation", which a client adopts in place of its own copy.
fn restated(
    dialect: &Dialect,
    stored: Option<Transcript>,
    request: &[Value],
) -> (Vec<Value>, Option<Snapshot>) {
    let sent: std::collections::HashSet<&str> =
        request.iter().filter_map(|m| m["id"].as_str()).collect();
    let known: std::collections::HashSet<&str> = stored.iter().flat_map(|t| t.ids()).collect();
    // Clients do not send activity messages back (`HttpAgent` drops them from its input).
    let restated: Vec<&str> = stored
        .iter()
        .flat_map(|t| t.messages.iter())
        .filter(|m| m["role"] != "activity" && m["id"] != TRIMMED_ID)
        .filter_map(|m| m["id"].as_str())
        .collect();
    let new: Vec<Value> = request
        .iter()
        .filter(|m| m["id"].as_str().is_none_or(|id| !known.contains(id)))
        .cloned()
        .collect();
    let short = dialect.snapshots_short_history && restated.iter().any(|id| !sent.contains(id));
    let snapshot = match stored {
        Some(mut t) if short => {
            t.add_input(&new);
            Some(t.messages)
        }
        _ => None,
    };
    (new, snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::state::threads::tests::{Mem, k};
    use crate::store::document::ThreadDoc;
    use std::collections::HashMap;
    use std::sync::Mutex;

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
}
