//! The adapter's HTTP routes: `POST /` (admission in stages, `run/`), and the thin ones beside
//! it: cancel, subscribe; the extras' routes (`crate::extras::answer`): the thread listing
//! and its changes (feature `threads`).

pub(crate) mod cancel;
pub(crate) mod run;
pub(crate) mod subscribe;
#[cfg(feature = "threads")]
pub(crate) mod threads;
