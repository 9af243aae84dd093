//! The extras: what the sidecar (`cargo build --no-default-features`) leaves out, each one
//! cargo feature a user can name, default on. This is their one list. Each extra owns its rows
//! of the option table (in every build, so that a build without it refuses them by name),
//! its settings, its routes and its wiring; the hubs — `config`, `cli`, `routes`, admission —
//! ask this list and name none of an extra's types.

use crate::config::{ConfigError, Extra, Sources};

/// Every extra, in the order of the help.
pub(crate) const EXTRAS: &[Extra] = &[
    Extra {
        feature: "otlp",
        options: crate::trace::otlp::OPTIONS,
        built: cfg!(feature = "otlp"),
    },
    Extra {
        feature: "threads",
        options: crate::conversation::OPTIONS,
        built: cfg!(feature = "threads"),
    },
];

/// The built extras' settings, read with the rest of the configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<crate::trace::otlp::Settings>,
    #[cfg(feature = "threads")]
    pub(crate) threads: crate::conversation::Settings,
}

/// Each built extra reads its own settings.
pub(crate) fn configure(_s: &Sources) -> Result<Settings, ConfigError> {
    Ok(Settings {
        #[cfg(feature = "otlp")]
        otlp: crate::trace::otlp::configure(_s)?,
        #[cfg(feature = "threads")]
        threads: crate::conversation::configure(_s)?,
    })
}

/// What the extras start beside the server (threads of their own), once logging is up.
pub(crate) fn start(_s: &Settings) -> std::io::Result<()> {
    #[cfg(feature = "otlp")]
    if let Some(o) = &_s.otlp {
        o.start()?;
    }
    Ok(())
}

/// What an extra may need to wire itself in: the state store, the address served, the
/// signals (a tokens file's reload), the environment.
#[allow(
    dead_code,
    reason = "read by the extras that need it; the sidecar has none"
)]
pub(crate) struct Context<'a> {
    pub(crate) store: &'a std::sync::Arc<crate::store::files::FileStore>,
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) signals: &'a crate::signals::Target,
    pub(crate) env: &'a crate::config::Environ,
}

/// The adapter's shared state with each built extra's `with_*` builder applied.
pub(crate) fn shared(
    _s: &Settings,
    sh: crate::adapter::Shared,
    _ctx: &Context<'_>,
) -> Result<crate::adapter::Shared, crate::cli::StartError> {
    #[cfg(feature = "threads")]
    let sh = _s.threads.shared(sh, _ctx.store);
    Ok(sh)
}

/// Each built extra's routes and head checks in the route configuration.
pub(crate) fn routes(
    _s: &Settings,
    _r: &mut crate::routes::RouteConfig,
    _ctx: &Context<'_>,
) -> Result<(), crate::cli::StartError> {
    Ok(())
}

/// Each built extra's worker routes, which every route configuration has
/// (`RouteConfig::extra_routes`; answered by [`answer`]): each finds the route a raw path
/// names, if it is one of its extra's.
pub(crate) fn worker_routes() -> Vec<fn(&str) -> Option<crate::routes::ExtraPath>> {
    vec![
        #[cfg(feature = "threads")]
        crate::adapter::routes::threads::find,
        // `GET /usage` (per-caller quotas and usage; in the core until they are an extra).
        crate::adapter::routes::usage::find,
    ]
}

/// A request on a worker route of an extra's (`routes::ExtraWork`), answered by that extra
/// (`Backend::extra`).
pub(crate) fn answer(
    sh: &crate::adapter::Shared,
    req: crate::app::ExtraRequest,
) -> crate::server::http::Response {
    match req.work.extra {
        #[cfg(feature = "threads")]
        "threads" => crate::adapter::routes::threads::answer(sh, req),
        "usage" => crate::adapter::routes::usage::answer(sh, req),
        _ => crate::server::http::Response::text(404, "Not Found"),
    }
}

/// Each built extra's entries in `/capabilities` (`custom.iacCode`).
pub(crate) fn capabilities(_s: &Settings, _iac: &mut serde_json::Map<String, serde_json::Value>) {
    #[cfg(feature = "threads")]
    crate::conversation::capabilities(_iac);
}

/// Each built extra's series in `/metrics` (none is rendered without its extra).
pub(crate) fn metrics(_out: &mut String) {
    #[cfg(feature = "threads")]
    crate::conversation::SERIES.render(_out);
}

/// Each built extra's periodic work, off the loop (`crate::chores`).
pub(crate) fn chores(
    _s: &Settings,
    _sh: &std::sync::Arc<crate::adapter::Shared>,
) -> Vec<crate::chores::Chore> {
    #[allow(unused_mut, reason = "the sidecar has no chores of an extra")]
    let mut out = Vec::new();
    #[cfg(feature = "threads")]
    out.extend(_s.threads.chores(_sh));
    out
}

/// What each built extra does once the server stopped (a last flush).
pub(crate) fn stop(_s: &Settings, _sh: &std::sync::Arc<crate::adapter::Shared>) {}
