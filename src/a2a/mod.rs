//! The A2A 1.0 side: the upstream SSE reader, typed payloads and the blocking client.

pub(crate) mod calls;
pub mod client;
mod delta;
pub mod frame;
pub mod sse;
mod transport;
pub mod types;

/// The resource-selector profile hash of iac-code 0.16.0 (`resource_selector.profiles.PROFILE_HASH`):
/// a front end advertises it (`forwardedProps.iacCode.resourceSelector`) and the kernel raises
/// resource selections only when it matches its own. `/capabilities` publishes it.
pub const KERNEL_PROFILE_HASH: &str =
    "sha256:9a0b5ea612c96be97a62bd06167b0308f6e8066dde64533edc4d27664837f193";

/// Why an upstream call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum A2aError {
    /// Transport failure, timeout, non-2xx status, unreadable body.
    Unavailable(String),
    /// The kernel answered with something this adapter cannot interpret.
    Protocol(String),
}

impl std::fmt::Display for A2aError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            A2aError::Unavailable(s) => write!(f, "A2A kernel unavailable: {s}"),
            A2aError::Protocol(s) => write!(f, "A2A protocol error: {s}"),
        }
    }
}

impl std::error::Error for A2aError {}
