//! Per-caller identity (feature `identity`): callers told apart by a tokens file
//! (`--auth-tokens-file`, `tokens.rs`) or by the header a trusted proxy sets
//! (`--identity-header`), each with threads of its own and a fair share of the output budget
//! and the connections (`budget/fair.rs`); who of them reads `/metrics`
//! (`--metrics-principals`). Without the feature there is one caller, `Caller::Shared`: no
//! auth, or the one shared token (reference §1.5, `auth.rs`).

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[
    opt(
        "auth_tokens_file",
        "One caller per line, `NAME SHA256HEX-OF-TOKEN`: a bearer token names its caller, whose \
         threads are their own (re-read on SIGHUP or when it changes)",
    )
    .flag("auth-tokens-file", Some("FILE"))
    .env("IAC_CODE_AGUI_AUTH_TOKENS_FILE"),
    opt(
        "identity_header",
        "The caller is this request header's value, as set by a trusted proxy that strips it \
         from clients (e.g. X-Forwarded-User)",
    )
    .flag("identity-header", Some("NAME"))
    .env("IAC_CODE_AGUI_IDENTITY_HEADER"),
    opt(
        "trust_identity_header",
        "Accept --identity-header on a non-loopback address without IAC_CODE_AGUI_AUTH_TOKEN \
         (only where nothing but the proxy can reach the port)",
    )
    .flag("trust-identity-header", None),
    opt(
        "metrics_principals",
        "Callers (comma-separated principal names) that may read /metrics when callers are told \
         apart; the metrics token also does",
    )
    .flag("metrics-principals", Some("NAMES"))
    .env("IAC_CODE_AGUI_METRICS_PRINCIPALS"),
];

#[cfg(feature = "identity")]
mod modes;
#[cfg(feature = "identity")]
pub(crate) use modes::{Settings, configure};
