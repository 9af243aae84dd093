//! iac-agui: an AG-UI (HTTP + SSE) adapter in front of a loopback iac-code A2A kernel.
#![forbid(unsafe_code)]

pub mod a2a;
pub mod adapter;
pub mod agui;
pub mod app;
pub mod audit;
pub mod auth;
pub(crate) mod authority;
pub mod budget;
pub(crate) mod buffers;
pub mod catalog;
pub(crate) mod chores;
pub mod cli;
pub mod clock;
pub mod config;
pub(crate) mod console;
pub mod conversation;
pub(crate) mod cors;
pub(crate) mod demo;
pub mod errors;
pub mod extras;
pub(crate) mod healthcheck;
pub mod i18n;
pub(crate) mod ids;
pub mod json;
pub mod kernel;
pub(crate) mod life;
pub(crate) mod limits;
pub(crate) mod logging;
#[doc(hidden)]
pub mod malloc;
pub(crate) mod metrics;
mod notify;
pub(crate) mod otlp;
pub mod principal;
pub mod quota;
pub(crate) mod rfc3339;
pub mod routes;
pub(crate) mod scan;
pub mod server;
mod signals;
mod startup;
pub mod store;
pub(crate) mod sync;
pub mod trace;
pub mod yaml;
