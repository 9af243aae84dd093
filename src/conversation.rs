//! Stored conversations and the thread routes (feature `threads`): each thread's conversation
//! kept by the server as the AG-UI 1.0 messages a client builds from the stream
//! (`transcript.rs`), as a log of what each turn did (`log.rs`) beside the thread's state
//! file (`store::conversations`, each caller's index `store::index`); listed, paged, renamed
//! and deleted by the thread routes (`adapter/routes/threads.rs`), restated to a 1.0 client
//! that holds less (`MESSAGES_SNAPSHOT`), deleted after `--thread-retention`
//! (`conversation/wiring.rs`).
//!
//! This file is compiled in every build: the extra's options, its settings and wiring, and
//! [`Ops`], what a run records of its conversation. Without the extra no conversation or
//! index is written or read, the thread routes do not exist, and `Ops` is a type with no
//! value: no run records anything.

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[
    opt(
        "history_max_messages",
        "Messages each thread's stored conversation keeps (the oldest go first, behind a marker)",
    )
    .flag("history-max-messages", Some("N"))
    .env("IAC_CODE_AGUI_HISTORY_MAX_MESSAGES")
    .default("2000"),
    opt(
        "history_max_bytes",
        "Bytes of JSON each thread's stored conversation keeps",
    )
    .flag("history-max-bytes", Some("N"))
    .env("IAC_CODE_AGUI_HISTORY_MAX_BYTES")
    .default("4194304"),
    opt(
        "thread_retention",
        "Delete a thread (state and conversation) this long after its last activity (0 = keep)",
    )
    .flag("thread-retention", Some("SECS"))
    .env("IAC_CODE_AGUI_THREAD_RETENTION")
    .default("0"),
];

#[cfg(feature = "threads")]
pub(crate) mod limits;
#[cfg(feature = "threads")]
pub mod log;
#[cfg(feature = "threads")]
mod metrics;
#[cfg(feature = "threads")]
mod transcript;
#[cfg(feature = "threads")]
mod wiring;

#[cfg(feature = "threads")]
pub(crate) use metrics::SERIES;
#[cfg(feature = "threads")]
pub use transcript::{Bounds, ConversationError, Ops, TRIMMED_ID, Transcript};

/// Without the extra no run records its conversation: no value of this type exists.
#[cfg(not(feature = "threads"))]
#[derive(Debug)]
pub(crate) enum Ops {}

#[cfg(not(feature = "threads"))]
impl Ops {
    pub(crate) fn record(&mut self, _event: &crate::agui::events::Event) {
        match *self {}
    }
}

/// `--history-max-messages`, `--history-max-bytes` and `--thread-retention`, checked.
#[cfg(feature = "threads")]
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    pub(crate) bounds: Bounds,
    /// Zero: threads are kept.
    pub(crate) retention: std::time::Duration,
}

/// The extra's settings.
#[cfg(feature = "threads")]
pub(crate) fn configure(
    s: &crate::config::Sources,
) -> Result<Settings, crate::config::ConfigError> {
    use crate::config::{as_count, as_seconds};
    let mut bounds = Bounds::default();
    if let Some(v) = s.pick("history_max_messages") {
        bounds.max_messages = as_count(&v)?;
    }
    if let Some(v) = s.pick("history_max_bytes") {
        bounds.max_bytes = as_count(&v)?;
    }
    let retention = match s.pick("thread_retention") {
        Some(v) => as_seconds(&v, true)?,
        None => std::time::Duration::ZERO,
    };
    Ok(Settings { bounds, retention })
}

/// The thread routes in `/capabilities`' `routes`, after the subscribe route (where they
/// always were).
#[cfg(feature = "threads")]
pub(crate) fn capabilities(iac: &mut serde_json::Map<String, serde_json::Value>) {
    let Some(serde_json::Value::Object(routes)) = iac.get_mut("routes") else {
        return;
    };
    let ours = [
        ("threads", "GET /threads"),
        ("threadMessages", "GET /threads/{threadId}/messages"),
        ("deleteThread", "DELETE /threads/{threadId}"),
    ];
    let before = std::mem::take(routes);
    for (k, v) in before {
        let after = k == "subscribe";
        routes.insert(k, v);
        if after {
            for (k, v) in ours {
                routes.insert(k.into(), v.into());
            }
        }
    }
}
