//! Stored conversations (feature `threads`): each thread's log (`conversation::log`) and each caller's index
//! (`store::index`), kept together so that a turn appends to one and updates the other, a
//! listing reads only the index, and what a crash cut off is found and marked.
//!
//! The caller of a thread's write (`begin_turn`, `end_turn`, `delete`) holds that thread's
//! lock (the registry's slot); a caller's index has a lock of its own, taken after a
//! thread's, never before one. A caller's index is read, and checked against the files, the
//! first time anything of that caller is touched; in the first such read of a process, the
//! turns its logs hold open were cut off by the stop before (no run of this process can
//! exist yet: every admission reads the index first), and each gets its cut record.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::document::stem;
use super::files::{Refusal, StoreError};
use super::index::{After, CallerIndex, Entry, Stamp, Status};
use crate::conversation::log::{self as conv_log, Replayed};
use crate::conversation::{Bounds, ConversationError, Ops, Transcript, limits};
use crate::principal::{Caller, ThreadKey};
use crate::sync::lock;

/// One thread's files as a directory scan finds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub stem: String,
    pub log: Option<Stamp>,
    /// A conversation in the whole-file form of earlier versions.
    pub legacy: bool,
    /// The state file's modification time (Unix ms), when there is one.
    pub state_ms: Option<u64>,
}

/// The bytes under stored conversations (the state directory; an in-memory one in tests).
pub trait ConversationFiles: Send + Sync {
    /// The log's bytes and stamp; `None` when it has none.
    fn read_log(&self, key: &ThreadKey) -> Result<Option<(Vec<u8>, Stamp)>, StoreError>;
    /// The whole-file conversation of earlier versions.
    fn read_legacy(&self, key: &ThreadKey) -> Result<Option<Vec<u8>>, StoreError>;
    /// Write `bytes` at offset `at` of the log (anything past `at`, a torn line, goes first)
    /// and fsync it; the log is made when absent.
    fn append_log(&self, key: &ThreadKey, at: u64, bytes: &[u8]) -> Result<Stamp, StoreError>;
    /// Replace the log whole, atomically, and remove the whole-file form.
    fn replace_log(&self, key: &ThreadKey, bytes: &[u8]) -> Result<Stamp, StoreError>;
    /// Cut the log back to `len` bytes (0: remove it).
    fn truncate_log(&self, key: &ThreadKey, len: u64) -> Result<(), StoreError>;
    /// Remove the log and the whole-file form.
    fn remove_logs(&self, key: &ThreadKey) -> Result<(), StoreError>;
    /// Move a refused conversation out of the way (kept for the operator).
    fn set_aside(&self, key: &ThreadKey);
    fn read_index(&self, caller: &Caller) -> Result<Option<Vec<u8>>, StoreError>;
    /// Append to the caller's index journal (not fsynced: a cache of the logs).
    fn append_index(&self, caller: &Caller, bytes: &[u8]) -> Result<(), StoreError>;
    fn replace_index(&self, caller: &Caller, bytes: &[u8]) -> Result<(), StoreError>;
    /// Every thread the caller's directory holds.
    fn scan(&self, caller: &Caller) -> Result<Vec<Found>, StoreError>;
    /// The thread id a stem's files name (its state file, else its log, else the old form).
    fn thread_id(&self, caller: &Caller, stem: &str) -> Option<String>;
    /// Every principal with threads here, the shared one first.
    fn callers(&self) -> Vec<Caller>;
}

/// What a thread's state file says of it (pending inputs: interrupted), for entries the
/// index derives again.
pub type StatusOf<'a> = &'a dyn Fn(&ThreadKey) -> Status;

/// A conversation as read for a write.
#[derive(Debug, Clone)]
pub struct Read {
    pub replayed: Replayed,
    /// The log's stamp (`None`: no log yet).
    stamp: Option<Stamp>,
    /// It came from the whole-file form: the first write migrates it.
    legacy: bool,
}

impl Read {
    fn empty(key: &ThreadKey, now_ms: u64) -> Read {
        Read {
            replayed: Replayed {
                transcript: Transcript::new(&key.id, now_ms),
                open: Vec::new(),
                complete: 0,
            },
            stamp: None,
            legacy: false,
        }
    }
}

/// A turn's input, appended; the index learns of it once the state save that admits the
/// turn worked (`Conversations::admitted`), or the append is taken back (`undo`).
#[derive(Debug)]
pub struct Begun {
    undo_to: u64,
    entry: Entry,
}

struct Cached {
    index: Arc<Mutex<Option<CallerIndex>>>,
    used: u64,
}

/// Stored conversations.
pub struct Conversations {
    files: Arc<dyn ConversationFiles>,
    bounds: Bounds,
    cache: Mutex<(HashMap<Caller, Cached>, u64)>,
    /// Callers whose index this process has read once (open turns then are cut ones).
    reconciled: Mutex<HashSet<Caller>>,
}

fn invalid(e: ConversationError) -> StoreError {
    StoreError::Invalid(Refusal::Conversation(e.to_string()))
}

fn entry_of(t: &Transcript, log: Option<Stamp>, status: Status, run: Option<String>) -> Entry {
    Entry {
        thread_id: t.thread_id.clone(),
        created_at: t.created_at,
        updated_at: t.updated_at,
        title: t.title(),
        messages: t.messages.len() as u64,
        status,
        run,
        log,
    }
}

impl Conversations {
    pub fn new(files: Arc<dyn ConversationFiles>, bounds: Bounds) -> Conversations {
        Conversations {
            files,
            bounds,
            cache: Mutex::new((HashMap::new(), 0)),
            reconciled: Mutex::new(HashSet::new()),
        }
    }

    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// A thread's conversation; `Ok(None)` when it has none. A refused file is an error for
    /// this thread only.
    pub fn read(&self, key: &ThreadKey) -> Result<Option<Read>, StoreError> {
        if let Some((bytes, stamp)) = self.files.read_log(key)? {
            let replayed = conv_log::replay(&bytes, &key.id).map_err(invalid)?;
            if replayed.complete > 0 {
                return Ok(Some(Read {
                    replayed,
                    stamp: Some(stamp),
                    legacy: false,
                }));
            }
        }
        let Some(bytes) = self.files.read_legacy(key)? else {
            return Ok(None);
        };
        let transcript = Transcript::from_bytes(&bytes, &key.id).map_err(invalid)?;
        Ok(Some(Read {
            replayed: Replayed {
                transcript,
                open: Vec::new(),
                complete: 0,
            },
            stamp: None,
            legacy: true,
        }))
    }

    /// The conversation bounded, as a page shows it (the caller's index read first, so that
    /// turns a stop cut off are marked before anyone sees them).
    pub fn transcript(
        &self,
        key: &ThreadKey,
        status_of: StatusOf<'_>,
    ) -> Result<Option<Transcript>, StoreError> {
        self.index(&key.caller, status_of)?;
        Ok(self.read(key)?.map(|r| r.replayed.bounded(self.bounds).0))
    }

    /// For a write: a refused conversation is set aside and a new one starts (contained
    /// to its thread; the operator keeps the file).
    fn read_for_write(&self, key: &ThreadKey, now_ms: u64) -> Result<Read, StoreError> {
        match self.read(key) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Ok(Read::empty(key, now_ms)),
            Err(StoreError::Invalid(why)) => {
                log::error!("thread {}: {why}; set aside, a new one starts", key.id);
                self.files.set_aside(key);
                Ok(Read::empty(key, now_ms))
            }
            Err(e) => Err(e),
        }
    }

    /// Append `record` to what `read` read; returns the new stamp and where the log ended
    /// before (what an undo cuts back to).
    fn append(
        &self,
        key: &ThreadKey,
        read: &Read,
        record: &[u8],
    ) -> Result<(Stamp, u64), StoreError> {
        let r = &read.replayed;
        if r.complete > 0 {
            let stamp = self.files.append_log(key, r.complete, record)?;
            return Ok((stamp, r.complete));
        }
        if read.legacy {
            let mut bytes = conv_log::snapshot(&r.transcript);
            let base = bytes.len() as u64;
            bytes.extend_from_slice(record);
            return Ok((self.files.replace_log(key, &bytes)?, base));
        }
        let mut bytes = conv_log::header(&key.id, r.transcript.created_at);
        bytes.extend_from_slice(record);
        Ok((self.files.append_log(key, 0, &bytes)?, 0))
    }

    /// A turn admitted: its new messages appended (durable before the turn is announced).
    /// `new_messages` gets the conversation bounded (what the request is compared with) and
    /// says which of the request's messages are new, and whether the turn is one of its own
    /// (guidance rides on the running one).
    pub fn begin_turn(
        &self,
        key: &ThreadKey,
        now_ms: u64,
        run_id: &str,
        status_of: StatusOf<'_>,
        new_messages: impl FnOnce(Option<Transcript>) -> (Vec<Value>, bool),
    ) -> Result<Begun, StoreError> {
        // The caller's index first: the turns a stop cut off are marked before any new one.
        let index = self.index(&key.caller, status_of)?;
        let mut read = self.read_for_write(key, now_ms)?;
        let known = read.stamp.is_some() || read.legacy;
        let (new, main) = new_messages(known.then(|| read.replayed.bounded(self.bounds).0));
        let new = Transcript::storable(&new);
        let (stamp, undo_to) = self.append(key, &read, &conv_log::input(now_ms, run_id, &new))?;
        let t = &mut read.replayed.transcript;
        t.add_input(&new);
        t.updated_at = now_ms;
        let (t, _) = read.replayed.bounded(self.bounds);
        let before = lock(&index)
            .as_ref()
            .and_then(|ix| ix.get(&key.id).cloned());
        let (status, run) = match (main, before) {
            (true, _) => (Status::Running, Some(run_id.to_string())),
            (false, Some(e)) => (e.status, e.run),
            (false, None) => (Status::Running, None),
        };
        Ok(Begun {
            undo_to,
            entry: entry_of(&t, Some(stamp), status, run),
        })
    }

    /// The turn's state save failed: its input is taken back out of the log.
    pub fn undo(&self, key: &ThreadKey, begun: Begun) {
        if let Err(e) = self.files.truncate_log(key, begun.undo_to) {
            log::error!(
                "thread {}: a refused turn's input stays in its log: {e}",
                key.id
            );
        }
    }

    /// The turn's state save worked: the index lists it (running, from its admission).
    pub fn admitted(&self, key: &ThreadKey, begun: Begun, status_of: StatusOf<'_>) {
        self.update_index(&key.caller, status_of, |ix| Some(ix.upsert(begun.entry)));
    }

    /// A turn's end: what its events did, appended; `status` is the thread's now (a turn
    /// of its own) or left as it is (guidance).
    pub fn end_turn(
        &self,
        key: &ThreadKey,
        now_ms: u64,
        run_id: &str,
        ops: &Ops,
        status: Option<Status>,
        status_of: StatusOf<'_>,
    ) -> Result<(), StoreError> {
        let index = self.index(&key.caller, status_of)?;
        let mut read = self.read_for_write(key, now_ms)?;
        let (mut stamp, _) = self.append(key, &read, &conv_log::end(now_ms, run_id, ops))?;
        let raw = &mut read.replayed.transcript;
        raw.apply(ops, run_id);
        raw.updated_at = now_ms;
        read.replayed.open.retain(|o| o != run_id);
        let (t, held) = read.replayed.bounded(self.bounds);
        if stamp.len > 2 * held + limits::HISTORY_COMPACT_SLACK
            || stamp.len > limits::MAX_HISTORY_FILE / 2
        {
            stamp = self.compact(key, &t, &read.replayed.open).unwrap_or(stamp);
        }
        let before = lock(&index)
            .as_ref()
            .and_then(|ix| ix.get(&key.id).cloned());
        let (status, run) = match (status, before) {
            (Some(s), _) => (s, None),
            (None, Some(e)) => (e.status, e.run),
            (None, None) => (Status::Idle, None),
        };
        let entry = entry_of(&t, Some(stamp), status, run);
        self.update_index(&key.caller, status_of, |ix| Some(ix.upsert(entry)));
        Ok(())
    }

    /// Rewrite the log as one snapshot of `t` (turns still open are started again after it,
    /// so that their ends still apply). A failure keeps the longer log, which still reads.
    fn compact(&self, key: &ThreadKey, t: &Transcript, open: &[String]) -> Option<Stamp> {
        let mut bytes = conv_log::snapshot(t);
        for run in open {
            bytes.extend(conv_log::input(t.updated_at, run, &[]));
        }
        match self.files.replace_log(key, &bytes) {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!(
                    "thread {}: the conversation log was not compacted: {e}",
                    key.id
                );
                None
            }
        }
    }

    /// A turn that ended without its end record (a panic): the index no longer says it runs.
    pub fn settle(&self, key: &ThreadKey, run_id: &str, status: Status, status_of: StatusOf<'_>) {
        self.update_index(&key.caller, status_of, |ix| {
            let e = ix.get(&key.id)?;
            if e.status != Status::Running || e.run.as_deref() != Some(run_id) {
                return None;
            }
            let mut e = e.clone();
            e.status = status;
            e.run = None;
            Some(ix.upsert(e))
        });
    }

    /// Give a thread a title of a person's choosing (`None`: the first message's again),
    /// kept in its log. `Ok(None)`: the caller has no such thread.
    pub fn rename(
        &self,
        key: &ThreadKey,
        title: Option<&str>,
        status_of: StatusOf<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        let index = self.index(&key.caller, status_of)?;
        let Some(before) = lock(&index)
            .as_ref()
            .and_then(|ix| ix.get(&key.id).cloned())
        else {
            return Ok(None);
        };
        let mut read = self.read_for_write(key, before.created_at)?;
        let (stamp, _) = self.append(key, &read, &conv_log::title(before.updated_at, title))?;
        read.replayed.transcript.renamed = title.map(str::to_string);
        let (t, _) = read.replayed.bounded(self.bounds);
        let mut entry = entry_of(&t, Some(stamp), before.status, before.run);
        // A thread with a state file only keeps its time.
        entry.updated_at = entry.updated_at.max(before.updated_at);
        entry.created_at = before.created_at;
        self.update_index(&key.caller, status_of, |ix| Some(ix.upsert(entry.clone())));
        Ok(Some(entry))
    }

    /// Remove a thread's conversation and its index entry.
    pub fn delete(&self, key: &ThreadKey, status_of: StatusOf<'_>) -> Result<(), StoreError> {
        self.files.remove_logs(key)?;
        self.update_index(&key.caller, status_of, |ix| ix.remove(&key.id));
        Ok(())
    }

    /// The index's entry of a thread (`None`: the caller has no such thread).
    pub fn entry(
        &self,
        key: &ThreadKey,
        status_of: StatusOf<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        let index = self.index(&key.caller, status_of)?;
        let g = lock(&index);
        Ok(g.as_ref().and_then(|ix| ix.get(&key.id).cloned()))
    }

    /// A listing page of the caller's threads, newest activity first, and whether more
    /// follow.
    pub fn page(
        &self,
        caller: &Caller,
        after: Option<After<'_>>,
        limit: usize,
        only: &dyn Fn(&Entry) -> bool,
        status_of: StatusOf<'_>,
    ) -> Result<(Vec<Entry>, bool), StoreError> {
        let index = self.index(caller, status_of)?;
        let g = lock(&index);
        let Some(ix) = g.as_ref() else {
            return Ok((Vec::new(), false));
        };
        let (page, more) = ix.page(after, limit, only);
        Ok((page.into_iter().cloned().collect(), more))
    }

    /// Every caller's threads idle since before `cutoff_ms`, oldest first per caller.
    pub fn idle_before(&self, cutoff_ms: u64, status_of: StatusOf<'_>) -> Vec<ThreadKey> {
        let mut out = Vec::new();
        for c in self.files.callers() {
            match self.index(&c, status_of) {
                Ok(index) => {
                    if let Some(ix) = lock(&index).as_ref() {
                        out.extend(ix.older_than(cutoff_ms).into_iter().map(|id| ThreadKey {
                            caller: c.clone(),
                            id,
                        }));
                    }
                }
                Err(e) => log::error!("thread index not read: {e}"),
            }
        }
        out
    }

    /// The caller's index, read (and checked against the files) when not cached.
    fn index(
        &self,
        caller: &Caller,
        status_of: StatusOf<'_>,
    ) -> Result<Arc<Mutex<Option<CallerIndex>>>, StoreError> {
        let index = {
            let mut g = lock(&self.cache);
            let (map, tick) = &mut *g;
            *tick += 1;
            let now = *tick;
            if !map.contains_key(caller)
                && map.len() >= limits::CACHED_INDEXES
                && let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, c)| c.used)
                    .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
            let c = map.entry(caller.clone()).or_insert_with(|| Cached {
                index: Arc::new(Mutex::new(None)),
                used: now,
            });
            c.used = now;
            c.index.clone()
        };
        let mut g = lock(&index);
        if g.is_none() {
            *g = Some(self.load_index(caller, status_of)?);
        }
        drop(g);
        Ok(index)
    }

    fn update_index(
        &self,
        caller: &Caller,
        status_of: StatusOf<'_>,
        f: impl FnOnce(&mut CallerIndex) -> Option<Vec<u8>>,
    ) {
        let index = match self.index(caller, status_of) {
            Ok(i) => i,
            Err(e) => {
                log::error!("thread index not updated: {e}");
                return;
            }
        };
        let mut g = lock(&index);
        let Some(ix) = g.as_mut() else { return };
        let Some(line) = f(ix) else { return };
        let written = if ix.wants_rewrite() {
            self.files.replace_index(caller, &ix.to_journal())
        } else {
            self.files.append_index(caller, &line)
        };
        if let Err(e) = written {
            // The journal is behind its logs: the next read finds the stamps changed and
            // derives those threads again.
            log::warn!("thread index journal not written: {e}");
        }
    }

    /// Read a caller's index and check it against the files: an entry whose files are gone
    /// goes, one whose log changed since (a write the journal did not see) is derived again
    /// from its log, a thread without an entry (a state file of an earlier version or of
    /// iac-code 0.16.0, a log the journal lost) gets one.
    fn load_index(
        &self,
        caller: &Caller,
        status_of: StatusOf<'_>,
    ) -> Result<CallerIndex, StoreError> {
        let journal = match self.files.read_index(caller) {
            Ok(b) => b.unwrap_or_default(),
            Err(e) => {
                log::warn!("thread index refused, derived again from the files: {e}");
                Vec::new()
            }
        };
        let mut ix = CallerIndex::from_journal(&journal);
        let mut found: HashMap<String, Found> = self
            .files
            .scan(caller)?
            .into_iter()
            .map(|f| (f.stem.clone(), f))
            .collect();
        let first = lock(&self.reconciled).insert(caller.clone());
        let mut changed = journal.is_empty() && !found.is_empty();
        let ids: Vec<String> = ix.entries().map(|e| e.thread_id.clone()).collect();
        for id in ids {
            let key = ThreadKey {
                caller: caller.clone(),
                id,
            };
            let Some(f) = found.remove(&stem(&key.id)) else {
                ix.remove(&key.id);
                changed = true;
                continue;
            };
            let Some(e) = ix.get(&key.id) else { continue };
            let stale = e.log != f.log || (e.log.is_none() && f.legacy);
            if stale || (first && e.status == Status::Running) {
                let old = e.clone();
                let e = self.derive(&key, &f, Some(old), first, status_of)?;
                ix.upsert(e);
                changed = true;
            }
        }
        for f in found.into_values() {
            // A conversation without its state file is an admission a stop cut before its
            // state save (the turn's messages go first): never admitted, never announced, so
            // not a thread; a retry of the run admits it.
            if f.state_ms.is_none() {
                continue;
            }
            let Some(id) = self.files.thread_id(caller, &f.stem) else {
                continue;
            };
            if stem(&id) != f.stem {
                continue;
            }
            let key = ThreadKey {
                caller: caller.clone(),
                id,
            };
            let e = self.derive(&key, &f, None, first, status_of)?;
            ix.upsert(e);
            changed = true;
        }
        if (changed || ix.wants_rewrite())
            && let Err(e) = self.files.replace_index(caller, &ix.to_journal())
        {
            log::warn!("thread index journal not rewritten: {e}");
        }
        Ok(ix)
    }

    /// A thread's entry from its files; `cut`: its open turns were cut off by a stop.
    fn derive(
        &self,
        key: &ThreadKey,
        f: &Found,
        old: Option<Entry>,
        cut: bool,
        status_of: StatusOf<'_>,
    ) -> Result<Entry, StoreError> {
        let status = status_of(key);
        let state_only = |old: Option<Entry>| {
            let t = f.state_ms.unwrap_or(0);
            let mut e = old.unwrap_or(Entry {
                thread_id: key.id.clone(),
                created_at: t,
                updated_at: t,
                title: String::new(),
                messages: 0,
                status,
                run: None,
                log: None,
            });
            e.log = f.log;
            e.status = status;
            e.run = None;
            e
        };
        if f.log.is_none() && !f.legacy {
            return Ok(state_only(old));
        }
        let mut read = match self.read(key) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(state_only(old)),
            // Listed as it was (it exists, and can be deleted); its pages say it is unreadable.
            Err(StoreError::Invalid(why)) => {
                log::error!("thread {}: {why}", key.id);
                return Ok(state_only(old));
            }
            Err(e) => return Err(e),
        };
        let mut stamp = read.stamp;
        if cut && !read.replayed.open.is_empty() && !read.legacy {
            let at = read.replayed.transcript.updated_at;
            let open = std::mem::take(&mut read.replayed.open);
            let records: Vec<u8> = open.iter().flat_map(|r| conv_log::cut(at, r)).collect();
            match self.append(key, &read, &records) {
                Ok((s, _)) => {
                    stamp = Some(s);
                    let t = &mut read.replayed.transcript;
                    t.messages
                        .extend(open.iter().map(|r| conv_log::cut_marker(r)));
                    log::warn!(
                        "thread {}: {} turn(s) cut off by the last stop, marked in its conversation",
                        key.id,
                        open.len()
                    );
                }
                Err(e) => log::error!("thread {}: cut turns not marked: {e}", key.id),
            }
        }
        let (t, _) = read.replayed.bounded(self.bounds);
        Ok(entry_of(&t, stamp, status, None))
    }
}

#[cfg(test)]
pub(crate) mod mem;
#[cfg(test)]
mod tests;
