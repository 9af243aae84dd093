//! The A2A 1.0 side: the upstream SSE reader, typed payloads and the blocking client.

pub mod client;
pub mod sse;
pub mod types;
