//! `--thread-retention` (feature `threads`): threads whose last activity is older are
//! deleted, a round at most every half retention and at most once a minute, on the chores'
//! thread (each round reads the callers' thread indexes, not the conversations, and takes
//! each thread's lock before it deletes it: `Registry::expire`).

use std::sync::Arc;
use std::time::Duration;

use crate::adapter::shared::Shared;
use crate::principal::ThreadKey;

/// The periodic round for threads idle past `retention` (not zero).
pub(crate) fn chore(sh: &Arc<Shared>, retention: Duration) -> crate::chores::Chore {
    let every = (retention / 2).clamp(
        Duration::from_secs(1),
        crate::conversation::limits::THREAD_EXPIRY_EVERY,
    );
    let weak = Arc::downgrade(sh);
    crate::chores::Chore::every(every, move || {
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
