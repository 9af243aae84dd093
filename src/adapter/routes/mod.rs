//! The adapter's HTTP routes: `POST /` (admission in stages, `run/`), and the thin ones beside
//! it: cancel, the thread listing and its changes, subscribe.

pub(crate) mod cancel;
pub(crate) mod history;
pub(crate) mod run;
pub(crate) mod subscribe;
