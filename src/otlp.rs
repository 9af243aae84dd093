//! `--otlp-endpoint` (the `otlp` extra): finished spans to an OpenTelemetry collector over
//! OTLP/HTTP with the JSON encoding (`POST {endpoint}/v1/traces`), from a thread of its own
//! (`export.rs`), given to `trace` as its exporter. Without the extra spans are never
//! exported; W3C trace context is core (`trace/`): still joined, passed on to the kernel and
//! logged.

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[
    opt(
        "otlp_endpoint",
        "Send spans (request, run, kernel calls) to this OpenTelemetry collector over OTLP/HTTP \
         JSON (POST URL/v1/traces); loopback only unless --otlp-allow-remote",
    )
    .flag("otlp-endpoint", Some("URL"))
    .env("IAC_CODE_AGUI_OTLP_ENDPOINT")
    .default("none: no export (trace context is still passed on and logged)"),
    opt(
        "otlp_allow_remote",
        "Let --otlp-endpoint name a non-loopback collector (spans name callers and runs)",
    )
    .flag("otlp-allow-remote", None),
];

#[cfg(feature = "otlp")]
mod export;
#[cfg(feature = "otlp")]
pub(crate) use export::endpoint;

/// `--otlp-endpoint`, checked: the collector's base URL.
#[cfg(feature = "otlp")]
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) endpoint: String,
}

/// The extra's settings: `None` when no endpoint is given.
#[cfg(feature = "otlp")]
pub(crate) fn configure(
    s: &crate::config::Sources,
) -> Result<Option<Settings>, crate::config::ConfigError> {
    let Some(v) = s.pick("otlp_endpoint") else {
        return Ok(None);
    };
    let allow = s.switch("otlp_allow_remote")?;
    let url = crate::config::as_string(&v)?;
    let endpoint = endpoint(&url, allow)
        // Not quoted: a URL may carry credentials.
        .map_err(|e| v.err(format_args!("{e}.")))?;
    Ok(Some(Settings { endpoint }))
}

#[cfg(feature = "otlp")]
impl Settings {
    /// The exporter's thread.
    pub(crate) fn start(&self) -> std::io::Result<()> {
        export::start(self.endpoint.clone())?;
        log::info!(
            "spans are exported to {}/v1/traces (OTLP/HTTP JSON)",
            self.endpoint
        );
        Ok(())
    }
}
