//! How stored conversations are wired into the adapter: the registry keeps them; threads idle
//! past `--thread-retention` are deleted, a round at most every half retention and at most
//! once a minute, on the chores' thread (each round reads the callers' thread indexes, not the
//! conversations, and takes each thread's lock before it deletes it: `Registry::expire`).
//! Apart from the model (`super`), which the store uses.

use std::sync::Arc;
use std::time::Duration;

use super::SERIES;
use crate::adapter::Shared;
use crate::chores::Chore;
use crate::principal::ThreadKey;
use crate::store::files::FileStore;

impl super::Settings {
    /// The registry keeps each thread's conversation in the state directory, within the
    /// bounds; `/metrics` starts from what the directory holds.
    pub(crate) fn shared(&self, mut sh: Shared, store: &Arc<FileStore>) -> Shared {
        let (threads, bytes) = store.conversation_census();
        SERIES.threads.set(threads);
        SERIES.bytes.set(bytes);
        sh.registry.keep_conversations(store.clone(), self.bounds);
        sh
    }

    /// Threads idle past `--thread-retention` are deleted, a round at most every half
    /// retention and at most once a minute (each round reads the callers' thread indexes).
    pub(crate) fn chores(&self, sh: &Arc<Shared>) -> Vec<Chore> {
        if self.retention.is_zero() {
            return Vec::new();
        }
        vec![chore(sh, self.retention)]
    }
}

/// The periodic round for threads idle past `retention` (not zero).
fn chore(sh: &Arc<Shared>, retention: Duration) -> Chore {
    let every = (retention / 2).clamp(Duration::from_secs(1), super::limits::THREAD_EXPIRY_EVERY);
    let weak = Arc::downgrade(sh);
    Chore::every(every, move || {
        let Some(sh) = weak.upgrade() else {
            return false;
        };
        round(&sh, retention);
        true
    })
}

/// Delete the threads idle past `retention`.
fn round(sh: &Shared, retention: Duration) {
    let cutoff = sh.env.now_ms().saturating_sub(retention.as_millis() as u64);
    // Each deletion is in the audit log first; one that cannot be recorded is kept.
    let record = |k: &ThreadKey| crate::adapter::audited::expire(sh, k).is_ok();
    let gone = sh.registry.expire(cutoff, &record);
    // What was deleted is not served again: its runs' replay logs go too.
    for key in &gone {
        sh.retention.replay.forget_thread(key);
    }
    if !gone.is_empty() {
        log::info!(
            "{} threads idle past --thread-retention deleted",
            gone.len()
        );
    }
}
