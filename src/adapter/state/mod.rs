//! What outlives a run: the thread registry, the replay logs, the shared handles, the clock.

pub mod env;
pub(crate) mod policies;
pub mod replay;
pub(crate) mod shared;
pub mod threads;
