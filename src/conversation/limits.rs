//! The bounds of stored conversations and of the thread routes (the configurable ones are
//! the defaults).

use std::time::Duration;

/// A thread's stored conversation: at most this many messages (`--history-max-messages`)…
pub(crate) const HISTORY_MAX_MESSAGES: usize = 2_000;
/// …and this many bytes of JSON (`--history-max-bytes`); the oldest go first.
pub(crate) const HISTORY_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Characters of the first user message a listing shows as the thread's title.
pub(crate) const HISTORY_TITLE_CHARS: usize = 80;
/// Characters of a title a person gives a thread (`PATCH /threads/{id}`), and of a listing's
/// search text (`q`).
pub(crate) const THREAD_TITLE_MAX_CHARS: usize = 200;
/// The largest conversation file read (the bytes bound plus room for its frame; a log is
/// compacted long before it grows this large).
pub(crate) const MAX_HISTORY_FILE: u64 = 64 * 1024 * 1024;
/// Ids of dropped messages a conversation remembers (and their bytes), so that a client
/// restating its whole history does not bring them back as new: ten times the default
/// message bound covers a client that kept every message of a long session.
pub(crate) const HISTORY_DROPPED_IDS: usize = 20_000;
pub(crate) const HISTORY_DROPPED_ID_BYTES: usize = 1024 * 1024;
/// A conversation log is rewritten as one snapshot once it holds more than twice what it
/// replays to, plus this: appends stay O(turn) and the rewrite is paid once per bound's worth.
pub(crate) const HISTORY_COMPACT_SLACK: u64 = 64 * 1024;
/// The largest per-caller thread index read (about 200 bytes a thread: 100 000 threads fit).
pub(crate) const MAX_INDEX_FILE: u64 = 64 * 1024 * 1024;
/// Callers whose thread index is kept in memory (the least recently used goes; it is read
/// again from its file when needed).
pub(crate) const CACHED_INDEXES: usize = 256;
/// Items of a thread listing or conversation page when `limit` is not given…
pub(crate) const DEFAULT_PAGE: usize = 50;
/// …and at most.
pub(crate) const MAX_PAGE: usize = 200;
/// How often at most threads idle past `--thread-retention` are looked for.
pub(crate) const THREAD_EXPIRY_EVERY: Duration = Duration::from_secs(60);
