//! AG-UI side: request validation, content conversion, canonical digests and the event model.

pub mod content;
pub mod cwd;
pub mod digest;
pub mod events;
pub mod image;
pub mod input;
