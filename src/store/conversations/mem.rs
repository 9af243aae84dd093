//! Conversation files in memory (unit tests): the same contract as the state directory's,
//! with writes that fail while `fail` is set.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{ConversationFiles, Found, StoreError};
use crate::principal::{Caller, ThreadKey};
use crate::store::index::Stamp;
use crate::sync::lock;

#[derive(Default)]
pub(crate) struct MemFiles {
    pub(crate) logs: Mutex<HashMap<ThreadKey, (Vec<u8>, u64)>>,
    pub(crate) legacy: Mutex<HashMap<ThreadKey, Vec<u8>>>,
    pub(crate) indexes: Mutex<HashMap<Caller, Vec<u8>>>,
    /// Threads that have a state file (what `scan` finds beside the logs), with its time.
    pub(crate) states: Mutex<HashMap<ThreadKey, u64>>,
    pub(crate) fail: AtomicBool,
    /// Log writes that still succeed before they fail (a disk that fills up); unlimited
    /// when not set.
    pub(crate) writes_left: Mutex<Option<usize>>,
    next_ino: AtomicU64,
    pub(crate) set_aside: Mutex<Vec<ThreadKey>>,
    /// Conversations read whole (a listing must read none).
    pub(crate) log_reads: AtomicU64,
}

impl MemFiles {
    fn check(&self) -> Result<(), StoreError> {
        let full = || Err(StoreError::Io(std::io::Error::other("disk full (test)")));
        if self.fail.load(Ordering::SeqCst) {
            return full();
        }
        if let Some(n) = lock(&self.writes_left).as_mut() {
            if *n == 0 {
                return full();
            }
            *n -= 1;
        }
        Ok(())
    }

    fn ino(&self) -> u64 {
        self.next_ino.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn log(&self, key: &ThreadKey) -> Option<Vec<u8>> {
        lock(&self.logs).get(key).map(|(b, _)| b.clone())
    }
}

impl ConversationFiles for MemFiles {
    fn read_log(&self, key: &ThreadKey) -> Result<Option<(Vec<u8>, Stamp)>, StoreError> {
        self.log_reads.fetch_add(1, Ordering::SeqCst);
        Ok(lock(&self.logs).get(key).map(|(b, ino)| {
            let s = Stamp {
                len: b.len() as u64,
                ino: *ino,
            };
            (b.clone(), s)
        }))
    }
    fn read_legacy(&self, key: &ThreadKey) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(lock(&self.legacy).get(key).cloned())
    }
    fn append_log(&self, key: &ThreadKey, at: u64, bytes: &[u8]) -> Result<Stamp, StoreError> {
        self.check()?;
        let ino = self.ino();
        let mut logs = lock(&self.logs);
        let (b, i) = logs.entry(key.clone()).or_insert_with(|| (Vec::new(), ino));
        b.truncate(at as usize);
        b.extend_from_slice(bytes);
        Ok(Stamp {
            len: b.len() as u64,
            ino: *i,
        })
    }
    fn replace_log(&self, key: &ThreadKey, bytes: &[u8]) -> Result<Stamp, StoreError> {
        self.check()?;
        let ino = self.ino();
        lock(&self.logs).insert(key.clone(), (bytes.to_vec(), ino));
        lock(&self.legacy).remove(key);
        Ok(Stamp {
            len: bytes.len() as u64,
            ino,
        })
    }
    fn truncate_log(&self, key: &ThreadKey, len: u64) -> Result<(), StoreError> {
        let mut logs = lock(&self.logs);
        if len == 0 {
            logs.remove(key);
        } else if let Some((b, _)) = logs.get_mut(key) {
            b.truncate(len as usize);
        }
        Ok(())
    }
    fn remove_logs(&self, key: &ThreadKey) -> Result<(), StoreError> {
        self.check()?;
        lock(&self.logs).remove(key);
        lock(&self.legacy).remove(key);
        Ok(())
    }
    fn set_aside(&self, key: &ThreadKey) {
        lock(&self.logs).remove(key);
        lock(&self.legacy).remove(key);
        lock(&self.set_aside).push(key.clone());
    }
    fn read_index(&self, caller: &Caller) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(lock(&self.indexes).get(caller).cloned())
    }
    fn append_index(&self, caller: &Caller, bytes: &[u8]) -> Result<(), StoreError> {
        self.check()?;
        lock(&self.indexes)
            .entry(caller.clone())
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }
    fn replace_index(&self, caller: &Caller, bytes: &[u8]) -> Result<(), StoreError> {
        self.check()?;
        lock(&self.indexes).insert(caller.clone(), bytes.to_vec());
        Ok(())
    }
    fn scan(&self, caller: &Caller) -> Result<Vec<Found>, StoreError> {
        let mut by: HashMap<String, Found> = HashMap::new();
        let stem = crate::store::document::stem;
        let empty = |s: String| Found {
            stem: s,
            log: None,
            legacy: false,
            state_ms: None,
        };
        for (k, (b, ino)) in lock(&self.logs).iter().filter(|(k, _)| k.caller == *caller) {
            by.entry(stem(&k.id))
                .or_insert_with(|| empty(stem(&k.id)))
                .log = Some(Stamp {
                len: b.len() as u64,
                ino: *ino,
            });
        }
        for k in lock(&self.legacy).keys().filter(|k| k.caller == *caller) {
            by.entry(stem(&k.id))
                .or_insert_with(|| empty(stem(&k.id)))
                .legacy = true;
        }
        for (k, t) in lock(&self.states)
            .iter()
            .filter(|(k, _)| k.caller == *caller)
        {
            by.entry(stem(&k.id))
                .or_insert_with(|| empty(stem(&k.id)))
                .state_ms = Some(*t);
        }
        Ok(by.into_values().collect())
    }
    fn thread_id(&self, caller: &Caller, stem: &str) -> Option<String> {
        let s = crate::store::document::stem;
        let logs = lock(&self.logs);
        let legacy = lock(&self.legacy);
        let states = lock(&self.states);
        logs.keys()
            .chain(legacy.keys())
            .chain(states.keys())
            .find(|k| k.caller == *caller && s(&k.id) == stem)
            .map(|k| k.id.clone())
    }
    fn callers(&self) -> Vec<Caller> {
        let mut c = vec![Caller::Shared];
        for k in lock(&self.logs).keys().chain(lock(&self.states).keys()) {
            if !c.contains(&k.caller) {
                c.push(k.caller.clone());
            }
        }
        c
    }
}
