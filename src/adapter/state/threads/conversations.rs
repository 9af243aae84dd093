//! The registry's side of the threads' stored conversations (feature `threads`; the files and
//! indexes are `store::conversations`'): a turn's new messages appended at its admission
//! (before the save that admits it, taken back when that fails), what its run did appended
//! at its end, its index entry settled when it released its thread; a thread's conversation,
//! listing, renaming, deletion and expiry, each under the thread's lock where it writes.
//!
//! Without the feature the registry keeps none: an admission writes no conversation and
//! restates none, a run records nothing ([`Ops`] has no value) and its end writes nothing.

use crate::principal::ThreadKey;

/// Which turn an admission begins: its thread, its run, when, the request's messages (what
/// of them the conversation lacks is appended) and its dialect (whether a short history is
/// restated).
#[cfg_attr(
    not(feature = "threads"),
    allow(
        dead_code,
        reason = "what a stored conversation reads; the sidecar keeps none"
    )
)]
pub(crate) struct TurnOf<'a> {
    pub(crate) key: &'a ThreadKey,
    pub(crate) run_id: &'a str,
    pub(crate) now_ms: u64,
    pub(crate) messages: &'a [serde_json::Value],
    pub(crate) dialect: &'a crate::agui::dialect::Dialect,
}

#[cfg(feature = "threads")]
mod kept;

/// Nothing is kept: an admission and a run's end write no conversation.
#[cfg(not(feature = "threads"))]
mod none {
    use std::sync::Arc;

    use super::TurnOf;
    use crate::adapter::state::threads::{Registry, Slot, Snapshot};
    use crate::conversation::Ops;
    use crate::principal::ThreadKey;
    use crate::store::files::{FileStore, StoreError};

    /// A turn begun in no conversation.
    pub(in crate::adapter::state::threads) struct Begun;

    impl Registry {
        /// Threads in the state directory.
        pub fn files(store: Arc<FileStore>) -> Registry {
            Registry::new(store)
        }

        pub(in crate::adapter::state::threads) fn begin_turn(
            &self,
            _turn: &TurnOf<'_>,
            _main: bool,
        ) -> Result<Begun, StoreError> {
            Ok(Begun)
        }

        pub(in crate::adapter::state::threads) fn undo_turn(
            &self,
            _turn: &TurnOf<'_>,
            _begun: Begun,
        ) {
        }

        pub(in crate::adapter::state::threads) fn turn_admitted(
            &self,
            _turn: &TurnOf<'_>,
            _begun: Begun,
        ) -> Option<Snapshot> {
            None
        }

        /// A run records no conversation.
        pub(crate) fn run_ops(&self) -> Option<Ops> {
            None
        }

        pub(crate) fn end_turn(
            &self,
            _slot: &Slot,
            _key: &ThreadKey,
            _run_id: &str,
            _now_ms: u64,
            ops: Ops,
            _main: bool,
        ) -> Result<(), StoreError> {
            match ops {}
        }

        pub(crate) fn settle(&self, _key: &ThreadKey, _run_id: &str, _pending: bool) {}
    }
}
