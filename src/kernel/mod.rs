//! Where the A2A kernel comes from: a managed `iac-code a2a` child process, or the built-in
//! demo kernel.

#[cfg(feature = "demo")]
pub mod demo;
pub mod diagnose;
pub mod process;
pub(crate) mod watch;

/// A kernel an extra runs in place of `iac-code a2a` (the demo's).
pub(crate) struct OwnKernel {
    /// Its base URL and the bearer token it takes.
    pub(crate) url: String,
    pub(crate) token: Option<String>,
    /// The kernel itself, held for its `Drop`, which stops it.
    pub(crate) held: Box<dyn std::any::Any>,
}
