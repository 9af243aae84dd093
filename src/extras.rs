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
        feature: "identity",
        options: crate::auth::callers::OPTIONS,
        built: cfg!(feature = "identity"),
    },
];

/// The built extras' settings, read with the rest of the configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<crate::trace::otlp::Settings>,
    #[cfg(feature = "identity")]
    pub(crate) identity: Option<crate::auth::callers::Settings>,
}

/// Each built extra reads its own settings.
pub(crate) fn configure(_s: &Sources) -> Result<Settings, ConfigError> {
    Ok(Settings {
        #[cfg(feature = "otlp")]
        otlp: crate::trace::otlp::configure(_s)?,
        #[cfg(feature = "identity")]
        identity: crate::auth::callers::configure(_s)?,
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

/// Who is calling, when a built extra tells callers apart (`None`: one shared caller, the
/// core's `auth::Identity::Shared`). Decided before the adapter's state, whose quotas ask it.
pub(crate) fn identity(
    _s: &Settings,
    _ctx: &Context<'_>,
) -> Result<Option<crate::auth::Identity>, crate::cli::StartError> {
    #[cfg(feature = "identity")]
    if let Some(i) = &_s.identity {
        return i.identity(_ctx).map(Some);
    }
    Ok(None)
}

/// The adapter's shared state with each built extra's `with_*` builder applied.
pub(crate) fn shared(
    _s: &Settings,
    sh: crate::adapter::Shared,
    _ctx: &Context<'_>,
) -> Result<crate::adapter::Shared, crate::cli::StartError> {
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

/// Each built extra's entries in `/capabilities` (`custom.iacCode`).
pub(crate) fn capabilities(_s: &Settings, _iac: &mut serde_json::Map<String, serde_json::Value>) {}

/// Each built extra's periodic work, off the loop (`crate::chores`).
pub(crate) fn chores(
    _s: &Settings,
    _sh: &std::sync::Arc<crate::adapter::Shared>,
) -> Vec<crate::chores::Chore> {
    Vec::new()
}

/// What each built extra does once the server stopped (a last flush).
pub(crate) fn stop(_s: &Settings, _sh: &std::sync::Arc<crate::adapter::Shared>) {}
