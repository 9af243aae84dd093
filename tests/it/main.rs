//! The integration tests, one binary (ripgrep's shape): each module is a suite that was a
//! binary of its own, and keeps its file's name, so a test's path is `file::test`
//! (`cargo test --test it stops::`). One binary links the crate once instead of once per suite.
//!
//! The tests share one process. A test that measures the process as a whole (its counters in
//! `/metrics`, its threads, its file descriptors, its peak memory) runs itself again in a
//! process of its own (`common::alone_in_a_process`); whatever else a test makes is its own
//! (a temporary directory per name, `common::tempdir`; servers on port 0).

mod common;

// Suites that need no demo kernel: they run in the sidecar build too.
mod a2a_client;
mod docs_refs;
mod edges;
mod http_server;
mod kernel_pin;
mod kernel_process;
mod projection_fixtures;
mod reference_examples;
mod resume_edges;
mod run_language;

// Suites against the demo kernel (in-process or `--demo-kernel-only`).
#[cfg(feature = "demo")]
mod agui_flows;
#[cfg(all(feature = "demo", feature = "audit", feature = "identity"))]
mod audit;
#[cfg(feature = "demo")]
mod callers;
#[cfg(feature = "demo")]
mod cli;
#[cfg(all(feature = "cors", feature = "demo"))]
mod cors;
#[cfg(feature = "demo")]
mod crash_adapter;
#[cfg(feature = "demo")]
mod demo_kernel;
#[cfg(feature = "demo")]
mod dialects;
#[cfg(feature = "demo")]
mod drain;
#[cfg(all(feature = "demo", feature = "identity"))]
mod fair_share;
#[cfg(feature = "demo")]
mod handoffs;
#[cfg(feature = "demo")]
mod hostile;
#[cfg(feature = "demo")]
mod input_kinds;
#[cfg(feature = "demo")]
mod large_events;
#[cfg(feature = "demo")]
mod ops;
#[cfg(all(feature = "demo", feature = "quotas", feature = "identity"))]
mod quotas;
#[cfg(feature = "demo")]
mod reattach;
#[cfg(feature = "demo")]
mod state_and_secrets;
#[cfg(feature = "demo")]
mod state_faults;
#[cfg(feature = "demo")]
mod stop_then_send;
#[cfg(feature = "demo")]
mod stops;
#[cfg(all(feature = "demo", feature = "threads"))]
mod threads;
#[cfg(feature = "demo")]
mod trace_context;
#[cfg(feature = "demo")]
mod tuning;

// The build without the demo kernel, as docs/operations.md recommends for production.
#[cfg(not(feature = "demo"))]
mod production_build;
