//! The pure rules: admission gates, resume reconciliation and answer schemas, identity checks, the
//! interrupts of each kernel kind, the projection of A2A events into AG-UI events; the clock and
//! ids they are given (`env`), injectable so they are deterministic under test.

pub mod admission;
pub mod env;
pub(crate) mod identity;
pub mod interrupts;
pub mod projection;
pub(crate) mod reconcile;
pub(crate) mod schema;
