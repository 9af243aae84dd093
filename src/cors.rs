//! `--cors-origins` (feature `cors`): pages on the listed origins may call from a browser, with
//! credentials; any other `Origin` gets 403 (`origins.rs`, one of the head decision's checks).
//! Without the feature, or without the option, no `Access-Control-*` header is ever sent, a
//! preflight gets 405 and `Origin` is not looked at.

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[opt(
    "cors_origins",
    "Pages on these other origins (comma-separated, exact `scheme://host[:port]`, never `*`) \
     may call from a browser, with credentials; any other Origin gets 403",
)
.flag("cors-origins", Some("ORIGINS"))
.env("IAC_CODE_AGUI_CORS_ORIGINS")
.default("none: no CORS headers, preflights get 405")];

#[cfg(feature = "cors")]
mod origins;
#[cfg(feature = "cors")]
pub(crate) use origins::Cors;

/// `--cors-origins`, checked and normalised: at least one.
#[cfg(feature = "cors")]
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) origins: Vec<String>,
}

/// The extra's settings: `None` when no origin is listed.
#[cfg(feature = "cors")]
pub(crate) fn configure(
    s: &crate::config::Sources,
) -> Result<Option<Settings>, crate::config::ConfigError> {
    let Some(v) = s.pick("cors_origins") else {
        return Ok(None);
    };
    let text = crate::config::as_string(&v)?;
    let mut origins = Vec::new();
    for o in text.split(',').filter(|o| !o.trim().is_empty()) {
        let origin = origins::parse_origin(o).map_err(|why| {
            v.err(format_args!(
                "takes exact origins such as http://localhost:5173, not {:?}: {why}.",
                o.trim()
            ))
        })?;
        origins.push(origin);
    }
    if origins.is_empty() {
        return Err(v.err("needs at least one origin such as http://localhost:5173."));
    }
    Ok(Some(Settings { origins }))
}

#[cfg(feature = "cors")]
impl Settings {
    /// The head decision's CORS check; the identity header, when callers are named by one, is
    /// allowed in requests (so `r.identity` is decided first).
    pub(crate) fn route(&self, r: &mut crate::routes::RouteConfig) {
        if let Some(cors) = Cors::configured(&self.origins, r.identity.header()) {
            r.checks.push(std::sync::Arc::new(cors));
        }
    }
}
