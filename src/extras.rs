//! The extras: what the sidecar (`cargo build --no-default-features`) leaves out, each one
//! cargo feature a user can name, default on. This is their one list. Each extra owns its rows
//! of the option table (in every build, so that a build without it refuses them by name),
//! its settings, its routes and its wiring; the hubs — `config`, `cli`, `routes`, admission —
//! ask this list and name none of an extra's types.

use crate::config::{ConfigError, Extra, Sources};

/// Every extra, in the order of the help.
pub(crate) const EXTRAS: &[Extra] = &[
    Extra {
        feature: "console",
        options: crate::console::OPTIONS,
        built: cfg!(feature = "console"),
    },
    Extra {
        feature: "cors",
        options: crate::cors::OPTIONS,
        built: cfg!(feature = "cors"),
    },
    Extra {
        feature: "demo",
        options: crate::demo::OPTIONS,
        built: cfg!(feature = "demo"),
    },
    Extra {
        feature: "otlp",
        options: crate::otlp::OPTIONS,
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
    Extra {
        feature: "identity",
        options: crate::auth::callers::OPTIONS,
        built: cfg!(feature = "identity"),
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
    #[cfg(feature = "console")]
    pub(crate) console: Option<crate::console::Settings>,
    #[cfg(feature = "cors")]
    pub(crate) cors: Option<crate::cors::Settings>,
    #[cfg(feature = "demo")]
    pub(crate) demo: Option<crate::demo::Settings>,
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<crate::otlp::Settings>,
    #[cfg(feature = "quotas")]
    pub(crate) quotas: crate::quota::Settings,
    #[cfg(feature = "audit")]
    pub(crate) audit: Option<crate::audit::Settings>,
    #[cfg(feature = "identity")]
    pub(crate) identity: Option<crate::auth::callers::Settings>,
    #[cfg(feature = "threads")]
    pub(crate) threads: crate::conversation::Settings,
}

/// Each built extra reads its own settings.
pub(crate) fn configure(_s: &Sources) -> Result<Settings, ConfigError> {
    #[cfg(feature = "demo")]
    let demo = crate::demo::configure(_s)?;
    // `--demo` serves the console.
    #[cfg(feature = "demo")]
    let console_implied = demo
        .as_ref()
        .is_some_and(crate::demo::Settings::serves_console);
    #[cfg(all(feature = "console", not(feature = "demo")))]
    let console_implied = false;
    Ok(Settings {
        #[cfg(feature = "console")]
        console: crate::console::configure(_s, console_implied)?,
        #[cfg(feature = "cors")]
        cors: crate::cors::configure(_s)?,
        #[cfg(feature = "demo")]
        demo,
        #[cfg(feature = "otlp")]
        otlp: crate::otlp::configure(_s)?,
        #[cfg(feature = "quotas")]
        quotas: crate::quota::configure(_s)?,
        #[cfg(feature = "audit")]
        audit: crate::audit::configure(_s)?,
        #[cfg(feature = "identity")]
        identity: crate::auth::callers::configure(_s)?,
        #[cfg(feature = "threads")]
        threads: crate::conversation::configure(_s)?,
    })
}

/// What the extras change of the core's settings, once `--default-cwd` is checked (the demo's
/// workspace, disconnect grace and state directory).
pub(crate) fn amend(_s: &Settings, _c: &mut crate::config::Config) {
    #[cfg(feature = "demo")]
    if let Some(d) = &_s.demo {
        d.amend(_c);
    }
}

/// What an extra serves instead of the server, until a signal (`--demo-kernel-only`: the demo
/// kernel alone).
pub(crate) type Instead =
    Box<dyn FnOnce(&crate::config::Environ) -> Result<(), crate::startup::StartError>>;

/// The built extras' [`Instead`], if one was asked for.
pub(crate) fn instead(_s: &Settings) -> Option<Instead> {
    #[cfg(feature = "demo")]
    if let Some(f) = _s.demo.as_ref().and_then(crate::demo::Settings::instead) {
        return Some(Box::new(f));
    }
    None
}

/// The built extras' [`OwnKernel`](crate::kernel::OwnKernel), started, if one was asked for.
pub(crate) fn kernel(
    _s: &Settings,
) -> Result<Option<crate::kernel::OwnKernel>, crate::startup::StartError> {
    #[cfg(feature = "demo")]
    if let Some(d) = &_s.demo {
        return d.kernel();
    }
    Ok(None)
}

/// The extra that keeps the threads in a private temporary directory, removed at exit, in place
/// of the state directory (the demo without an explicit one), by its feature's name.
pub(crate) fn private_state(_s: &Settings, _c: &crate::config::Config) -> Option<&'static str> {
    #[cfg(feature = "demo")]
    if _s.demo.as_ref().is_some_and(|d| d.private_state(_c)) {
        return Some("demo");
    }
    None
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
    /// Who is calling (decided first: `identity`).
    pub(crate) identity: &'a crate::auth::Identity,
}

/// Who is calling, when a built extra tells callers apart (`None`: one shared caller, the
/// core's `auth::Identity::Shared`). Decided before the adapter's state, whose quotas ask it.
pub(crate) fn identity(
    _s: &Settings,
    _addr: std::net::SocketAddr,
    _signals: &crate::signals::Target,
) -> Result<Option<crate::auth::Identity>, crate::startup::StartError> {
    #[cfg(feature = "identity")]
    if let Some(i) = &_s.identity {
        return i.identity(_addr, _signals).map(Some);
    }
    Ok(None)
}

/// The adapter's shared state with each built extra's `with_*` builder applied.
pub(crate) fn shared(
    _s: &Settings,
    sh: crate::adapter::Shared,
    _ctx: &Context<'_>,
) -> Result<crate::adapter::Shared, crate::startup::StartError> {
    #[cfg(feature = "quotas")]
    let sh = {
        let files: std::sync::Arc<dyn crate::quota::UsageFiles> = _ctx.store.clone();
        // Callers told apart may have their own (a tokens-file line), and are few enough for
        // `/metrics` to name.
        let own = Some(_ctx.identity.clone())
            .filter(crate::auth::Identity::listed)
            .map(|i| std::sync::Arc::new(i) as std::sync::Arc<dyn crate::quota::OwnLimits>);
        _s.quotas.with_quotas(sh, files, own)
    };
    #[cfg(feature = "audit")]
    let sh = match &_s.audit {
        Some(a) => {
            let audit = a.open().map_err(|err| crate::startup::StartError::Io {
                doing: format!("open the audit log {}", a.path.display()),
                err,
            })?;
            crate::adapter::audited::records::with_audit(sh, audit)
        }
        None => sh,
    };
    #[cfg(feature = "threads")]
    let sh = _s.threads.shared(sh, _ctx.store);
    Ok(sh.with_worker_routes(worker_routes()))
}

/// Each built extra's routes and head checks in the route configuration, after the core's
/// fields (the caller identity) are set (a route may serve what the extra keeps in the
/// adapter's shared state). The order is `routes::decide`'s: CORS refuses an origin before
/// the console answers.
pub(crate) fn routes(
    _s: &Settings,
    _r: &mut crate::routes::RouteConfig,
    _sh: &std::sync::Arc<crate::adapter::Shared>,
    _ctx: &Context<'_>,
) -> Result<(), crate::startup::StartError> {
    #[cfg(feature = "cors")]
    if let Some(c) = &_s.cors {
        c.route(_r);
    }
    #[cfg(feature = "console")]
    if let Some(c) = &_s.console {
        c.route(_r);
    }
    _r.extra_routes = worker_routes().iter().map(|w| w.find).collect();
    _r.extra_series = series();
    Ok(())
}

/// What each built extra says once the server listens on `local`.
pub(crate) fn listening(_s: &Settings, _local: std::net::SocketAddr) {
    #[cfg(feature = "console")]
    if let Some(c) = &_s.console {
        c.listening(_local);
    }
}

/// Each built extra's worker routes: the route configuration finds them
/// (`RouteConfig::extra_routes`), the adapter answers them (`Shared::with_worker_routes`).
pub fn worker_routes() -> Vec<crate::adapter::WorkerRoute> {
    vec![
        #[cfg(feature = "threads")]
        crate::adapter::WorkerRoute {
            extra: crate::adapter::routes::threads::EXTRA,
            find: crate::adapter::routes::threads::find,
            answer: crate::adapter::routes::threads::answer,
        },
        #[cfg(feature = "quotas")]
        crate::adapter::WorkerRoute {
            extra: crate::quota::gate::EXTRA,
            find: crate::quota::gate::find,
            answer: crate::quota::gate::answer,
        },
    ]
}

/// Each built extra's entries in `/capabilities` (`custom.iacCode`).
pub(crate) fn capabilities(_s: &Settings, _iac: &mut serde_json::Map<String, serde_json::Value>) {
    #[cfg(feature = "threads")]
    crate::conversation::capabilities(_iac);
}

/// Each built extra's series in `/metrics` (none is rendered without its extra).
pub fn series() -> Vec<fn(&mut String)> {
    vec![
        #[cfg(feature = "threads")]
        |out| crate::conversation::SERIES.render(out),
    ]
}

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
    #[cfg(feature = "threads")]
    chores.extend(_s.threads.chores(_sh));
    chores
}

/// What each built extra does once the server stopped (a last flush).
pub(crate) fn stop(_s: &Settings, _sh: &std::sync::Arc<crate::adapter::Shared>) {
    #[cfg(feature = "quotas")]
    _s.quotas.stop(_sh);
}
