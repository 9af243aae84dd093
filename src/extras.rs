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
        feature: "quotas",
        options: crate::quota::OPTIONS,
        built: cfg!(feature = "quotas"),
    },
    Extra {
        feature: "audit",
        options: crate::audit::OPTIONS,
        built: cfg!(feature = "audit"),
    },
];

/// The built extras' settings, read with the rest of the configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<crate::trace::otlp::Settings>,
    #[cfg(feature = "quotas")]
    pub(crate) quotas: crate::quota::Settings,
    #[cfg(feature = "audit")]
    pub(crate) audit: Option<crate::audit::Settings>,
}

/// Each built extra reads its own settings.
pub(crate) fn configure(_s: &Sources) -> Result<Settings, ConfigError> {
    Ok(Settings {
        #[cfg(feature = "otlp")]
        otlp: crate::trace::otlp::configure(_s)?,
        #[cfg(feature = "quotas")]
        quotas: crate::quota::configure(_s)?,
        #[cfg(feature = "audit")]
        audit: crate::audit::configure(_s)?,
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
/// signals (a tokens file's reload), the environment, the tokens file (callers named by it,
/// and their own quotas).
#[allow(
    dead_code,
    reason = "read by the extras that need it; the sidecar has none"
)]
pub(crate) struct Context<'a> {
    pub(crate) store: &'a std::sync::Arc<crate::store::files::FileStore>,
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) signals: &'a crate::signals::Target,
    pub(crate) env: &'a crate::config::Environ,
    pub(crate) tokens: Option<&'a std::sync::Arc<crate::auth::TokenFile>>,
}

/// The adapter's shared state with each built extra's `with_*` builder applied.
pub(crate) fn shared(
    _s: &Settings,
    sh: crate::adapter::Shared,
    _ctx: &Context<'_>,
) -> Result<crate::adapter::Shared, crate::cli::StartError> {
    #[cfg(feature = "quotas")]
    let sh = {
        let files: std::sync::Arc<dyn crate::quota::UsageFiles> = _ctx.store.clone();
        let own = _ctx
            .tokens
            .map(|f| f.clone() as std::sync::Arc<dyn crate::quota::OwnLimits>);
        _s.quotas.with_quotas(sh, files, own)
    };
    #[cfg(feature = "audit")]
    let sh = match &_s.audit {
        Some(a) => {
            let audit = a.open().map_err(|err| crate::cli::StartError::Io {
                doing: format!("open the audit log {}", a.path.display()),
                err,
            })?;
            crate::adapter::audited::records::with_audit(sh, audit)
        }
        None => sh,
    };
    Ok(sh)
}

/// Each built extra's routes and head checks in the route configuration (a route may serve
/// what the extra keeps in the adapter's shared state).
pub(crate) fn routes(
    _s: &Settings,
    _r: &mut crate::routes::RouteConfig,
    _sh: &std::sync::Arc<crate::adapter::Shared>,
    _ctx: &Context<'_>,
) -> Result<(), crate::cli::StartError> {
    #[cfg(feature = "quotas")]
    _s.quotas.routes(_sh, _r);
    Ok(())
}

/// Each built extra's entries in `/capabilities` (`custom.iacCode`).
pub(crate) fn capabilities(_s: &Settings, _iac: &mut serde_json::Map<String, serde_json::Value>) {}

/// Each built extra's periodic work, off the loop (`crate::chores`).
pub(crate) fn chores(
    _s: &Settings,
    _sh: &std::sync::Arc<crate::adapter::Shared>,
) -> Vec<crate::chores::Chore> {
    #[allow(
        unused_mut,
        reason = "an extra's chores are pushed only in a build with it"
    )]
    let mut chores = Vec::new();
    #[cfg(feature = "quotas")]
    chores.extend(_s.quotas.chores(_sh));
    chores
}

/// What each built extra does once the server stopped (a last flush).
pub(crate) fn stop(_s: &Settings, _sh: &std::sync::Arc<crate::adapter::Shared>) {
    #[cfg(feature = "quotas")]
    _s.quotas.stop(_sh);
}
