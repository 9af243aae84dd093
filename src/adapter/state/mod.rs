//! What outlives a run: the thread registry, the replay logs, the shared handles, the clock.

pub mod env;
#[cfg(feature = "threads")]
pub(crate) mod expiry;
pub(crate) mod policies;
pub mod replay;
pub(crate) mod shared;
pub mod threads;
