//! AG-UI side: request validation, content conversion, canonical digests and the event model.

pub mod content;
pub(crate) mod cwd;
pub mod dialect;
pub mod digest;
pub mod events;
pub(crate) mod field;
pub mod image;
pub mod input;
