//! Where the A2A kernel comes from: a managed `iac-code a2a` child process, or the built-in
//! demo kernel.

#[cfg(feature = "demo")]
pub mod demo;
pub mod diagnose;
pub mod process;
pub(crate) mod watch;
