//! The thin HTTP routes beside `POST /`: cancel, the thread listing and its changes, subscribe.

pub(crate) mod cancel;
pub(crate) mod history;
pub(crate) mod subscribe;
