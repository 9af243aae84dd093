//! The A2A 1.0 side: the upstream SSE reader, typed payloads and the blocking client.

pub(crate) mod calls;
pub mod client;
mod delta;
pub mod frame;
pub mod sse;
mod transport;
pub mod types;
