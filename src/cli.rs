//! The binary's entry point: configuration, logging, the kernel, the server, shutdown.

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;

use crate::a2a::client::{A2aClient, A2aConfig};
use crate::adapter::env::SystemEnv;
use crate::adapter::threads::Registry;
use crate::adapter::{AguiBackend, Shared};
use crate::app::{App, Backend};
use crate::config::{self, Command, Config};
use crate::routes::{HostRule, RouteConfig};
use crate::server::timers::SystemClock;
use crate::server::{Server, ServerConfig};
use crate::store::files::{FileStore, state_root};

use crate::startup::{EXIT_FAILURE, EXIT_USAGE, StartError, VERSION};

pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let mut args = args.into_iter().peekable();
    if args
        .peek()
        .is_some_and(|a| a == crate::signals::KERNEL_CHILD_ARG)
    {
        args.next();
        return ExitCode::from(crate::signals::kernel_child_main(args));
    }
    let env = config::Environ::capture();
    if args.peek().is_some_and(|a| a == "healthcheck") {
        args.next();
        return crate::healthcheck::main(args, &env);
    }
    let cfg = match config::parse(args.collect::<Vec<_>>(), &env, crate::extras::EXTRAS) {
        Ok(Command::Serve(c)) => *c,
        Ok(Command::Help) => {
            print!("{}", config::help(crate::extras::EXTRAS));
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("iac-agui {VERSION}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("iac-agui: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Each extra reads its own settings (an error in one is a usage error too).
    let extras = match crate::extras::configure(&cfg.sources) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("iac-agui: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // What an extra serves instead of the server (the demo kernel alone) keeps glibc's
    // defaults.
    let instead = crate::extras::instead(&extras);
    if instead.is_none() {
        crate::malloc::tune_once(|k| env.get_os(k));
    }
    crate::logging::init(cfg.debug, cfg.log_stdout, cfg.log_format);
    crate::notify::init(cfg.env.get("NOTIFY_SOCKET"));
    let mut cfg = cfg;
    match checked_default_cwd(&cfg) {
        Ok(d) => cfg.default_cwd = d,
        Err(e) => {
            crate::logging::fatal(&e);
            return ExitCode::from(EXIT_USAGE);
        }
    }
    crate::extras::amend(&extras, &mut cfg);
    warn_about_roots(&cfg.allowed_roots);
    for w in &cfg.warnings {
        log::warn!("{w}");
    }
    raise_fd_limit();
    if let Some(instead) = instead {
        return match instead(&cfg.env) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                crate::logging::fatal(&e);
                ExitCode::from(EXIT_FAILURE)
            }
        };
    }
    match serve(cfg, extras) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            crate::logging::fatal(&e);
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Every open stream costs a client socket and an upstream socket: use the whole hard limit.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// `GET /capabilities`: an AG-UI 1.0 `AgentCapabilities` object (the discovery convention of
/// the AG-UI docs and ag-ui-adk), with iac-code's own facts under `custom.iacCode`.
pub(crate) fn capabilities_body(
    cfg: &Config,
    extras: &crate::extras::Settings,
    default_cwd: Option<&str>,
) -> Vec<u8> {
    use crate::agui::dialect::Dialect;
    let dialect = Dialect::of(cfg.agui_protocol);
    // What each dialect changes for a client: a request gets the one its `protocolVersion`
    // declares (1.x, or one the server cannot read: 1.0; 0.x: 0.1), else `protocolMode`.
    let dialects: serde_json::Map<String, serde_json::Value> = Dialect::ALL
        .iter()
        .map(|d| {
            let facts = serde_json::json!({
                "contextForwarded": d.forwards_context,
                "interruptKinds": crate::adapter::interrupts::kinds(d),
            });
            (d.mode.to_string(), facts)
        })
        .collect();
    let v = serde_json::json!({
        "identity": {
            "name": "iac-agui",
            "type": "iac-code",
            "description": "The iac-code infrastructure agent over AG-UI (an adapter in front of its A2A kernel).",
            "version": VERSION,
            "provider": "iac-code",
        },
        "transport": {
            "streaming": true,
            "websocket": false,
            "httpBinary": false,
            "pushNotifications": false,
            "resumable": true,
        },
        // Each declaration is what the agent does (docs/protocol.md, "Capabilities"): it calls
        // its own tools (files, shell, cloud) and streams the calls, runs read-only calls in
        // parallel, and takes no client-provided tools (`tools[]` is a 400).
        "tools": {"supported": true, "parallelCalls": true, "clientProvided": false},
        "output": {"structuredOutput": false},
        "state": {"snapshots": false, "deltas": false, "memory": true, "persistentState": false},
        "execution": {"codeExecution": true, "sandboxed": false},
        "reasoning": {"supported": true, "streaming": true, "encrypted": false},
        "multimodal": {
            "input": {"image": true, "audio": false, "video": false, "pdf": false, "file": false},
            "output": {"image": false, "audio": false},
        },
        "humanInTheLoop": {
            "supported": true,
            "approvals": true,
            "interrupts": true,
            "interventions": false,
            "feedback": false,
            "approveWithEdits": false,
        },
        "custom": {
            "iacCode": {
                "schemaVersion": 1,
                // The dialect of a request that declares no `protocolVersion`
                // (`--agui-protocol`); `dialects` has each one served (issue 57).
                "protocolMode": dialect.mode,
                "dialects": dialects,
                "forwardedPropsRequired": default_cwd.is_none(),
                // `context[]` reaches the model in the 1.0 dialect (the reference ignores it);
                // this and `interruptKinds` are `protocolMode`'s, as in `dialects`.
                "contextForwarded": dialect.forwards_context,
                // Each input kind the kernel asks and the interrupt `reason` it comes as
                // (issue 47); docs/protocol.md "Interrupts" has each shape.
                "interruptKinds": crate::adapter::interrupts::kinds(&dialect),
                // What a front end that answers resource selections sends as
                // `forwardedProps.iacCode.resourceSelector` for the kernel to raise them.
                "resourceSelector": {"schemaVersion": 1, "queryMode": "ros_api_json", "profileHash": crate::a2a::KERNEL_PROFILE_HASH},
                "routes": {
                    "run": "POST /",
                    "cancel": "POST /extensions/iac-code/v1/executions/{executionId}/cancel",
                    "subscribe": "POST /extensions/iac-code/v1/executions/{executionId}/subscribe",
                    "health": "GET /health",
                    "metrics": "GET /metrics",
                },
                "limits": {
                    "maxRunBodyBytes": crate::limits::MAX_RUN_BODY,
                    "maxRuns": cfg.max_runs,
                    "maxConnections": cfg.max_connections,
                    "outputBudgetBytes": cfg.output_budget,
                    "heartbeatIntervalSeconds": cfg.heartbeat_interval.as_secs(),
                    "disconnectGraceSeconds": cfg.disconnect_grace.as_secs(),
                    "replayRetentionSeconds": cfg.replay_retention.as_secs(),
                },
            },
        },
    });
    let mut v = v;
    // The server's workspace, for the console: only behind the same auth as this route.
    if let Some(cwd) = default_cwd {
        v["custom"]["iacCode"]["defaultCwd"] = cwd.into();
    }
    if let Some(iac) = v["custom"]["iacCode"].as_object_mut() {
        crate::extras::capabilities(extras, iac);
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The exact `/health` body (reference §1.2), plus `protocolVersion` when `--agui-protocol`
/// is 1.0 (the dialect of a request that declares none).
pub fn health_body(protocol: config::AguiProtocol) -> Vec<u8> {
    let mut v = serde_json::json!({
        "status": "ok",
        "protocol": "ag-ui",
        "protocolPackageVersion": "0.1.20",
        "executionKernel": "a2a-1.0",
        "serverVersion": VERSION,
    });
    if let Some(version) = crate::agui::dialect::Dialect::of(protocol).protocol_version {
        v["protocolVersion"] = version.into();
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, StartError> {
    let doing = format!("resolve {host}:{port}");
    (host, port)
        .to_socket_addrs()
        .map_err(StartError::io(doing.clone()))?
        .next()
        .ok_or_else(|| StartError::Io {
            doing,
            err: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        })
}

/// A private state directory for an extra (`--demo`), removed when dropped (at exit).
struct TempStateDir {
    path: std::path::PathBuf,
    /// The extra's feature, which names it.
    owner: &'static str,
}

impl TempStateDir {
    fn create(owner: &'static str) -> Result<TempStateDir, StartError> {
        let mut rnd = [0u8; 8];
        crate::ids::fill(&mut rnd).map_err(StartError::Random)?;
        let path = std::env::temp_dir().join(format!("iac-agui-{owner}-{}", crate::ids::hex(&rnd)));
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(StartError::io("create a temporary state directory"))?;
        Ok(TempStateDir { path, owner })
    }
}

impl Drop for TempStateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The kernel this process talks to; dropping it stops whatever was started.
#[allow(dead_code, reason = "the values are held only for their Drop")]
enum Kernel {
    /// An extra's (the demo kernel).
    Own(Box<dyn std::any::Any>),
    Managed(crate::kernel::watch::Managed),
    External,
}

fn start_kernel(
    cfg: &Config,
    extras: &crate::extras::Settings,
) -> Result<(Kernel, A2aClient), StartError> {
    let (kernel, url, token) = if let Some(k) = crate::extras::kernel(extras)? {
        (Kernel::Own(k.held), k.url, k.token)
    } else if let Some(url) = &cfg.a2a_url {
        (Kernel::External, url.clone(), cfg.a2a_token.clone())
    } else {
        let spec = crate::kernel::process::KernelSpec::from_env(|k| cfg.env.get(k));
        let k = crate::kernel::process::ManagedKernel::start(&spec, &cfg.env)
            .map_err(StartError::Kernel)?;
        let (url, token) = (k.base_url.clone(), Some(k.token.clone()));
        log::info!("local A2A kernel ready on {url}");
        (
            Kernel::Managed(Arc::new(std::sync::Mutex::new(k))),
            url,
            token,
        )
    };
    let mut a2a = A2aConfig::new(url, token);
    a2a.idle_timeout = cfg.a2a_idle_timeout;
    Ok((kernel, A2aClient::new(a2a)))
}

fn serve(cfg: Config, extras: crate::extras::Settings) -> Result<(), StartError> {
    // Signals first: one during the kernel's start-up must stop the child too.
    let signals = crate::signals::install().map_err(StartError::io("install signal handlers"))?;
    crate::ids::check().map_err(StartError::Random)?;
    let addr = resolve(&cfg.host, cfg.port)?;
    // Bind before starting a kernel, so a busy port costs no child process.
    let probe =
        std::net::TcpListener::bind(addr).map_err(StartError::io(format!("listen on {addr}")))?;
    drop(probe);
    let (kernel, client) = match start_kernel(&cfg, &extras) {
        Ok(k) => k,
        // Stopped by a signal while the kernel started: a normal exit (the child is gone).
        Err(_) if crate::signals::stop_requested() => {
            log::info!("stopped during start-up");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let ready = Arc::new(crate::kernel::watch::Probes::default());
    let managed = match &kernel {
        Kernel::Managed(m) => Some(m.clone()),
        _ => None,
    };
    crate::kernel::watch::start(
        ready.clone(),
        client.probe(),
        managed,
        crate::limits::KERNEL_PROBE_INTERVAL,
    )
    .map_err(StartError::io("start the kernel watcher"))?;
    let result = serve_with(cfg, &extras, addr, client, ready.clone(), &signals);
    // The watcher must not restart what is being stopped.
    ready.shutdown();
    if let Kernel::Managed(m) = &kernel {
        crate::sync::lock(m).stop();
    }
    // Every exit path (return, error, signal-initiated shutdown) stops the kernel here.
    drop(kernel);
    result
}

/// `--default-cwd` resolved like a request's cwd (it must lie under an allowed root).
fn checked_default_cwd(cfg: &Config) -> Result<Option<String>, StartError> {
    let roots = &cfg.allowed_roots;
    let home = cfg.env.get("HOME");
    let Some(wanted) = cfg.default_cwd.clone() else {
        return Ok(None);
    };
    crate::agui::cwd::resolve_cwd(&wanted, roots, home.as_deref())
        .map(Some)
        .map_err(|m| {
            StartError::DefaultCwd(format!(
                "{}: {wanted:?} {}",
                cfg.default_cwd_origin,
                default_cwd_refusal(m, roots)
            ))
        })
}

/// Why `--default-cwd` is refused, in the terms of the options (the catalog's words are the
/// request's: `forwardedProps.iacCode.cwd`).
fn default_cwd_refusal(m: crate::catalog::Msg, roots: &[std::path::PathBuf]) -> String {
    use crate::catalog::Msg;
    match m {
        Msg::CwdOutsideRoots if roots.is_empty() => "is outside the allowed workspace roots, and \
             there are none (IAC_CODE_AGUI_ALLOWED_CWDS names no existing directory): list a root \
             that holds it there."
            .into(),
        Msg::CwdOutsideRoots => {
            let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
            format!(
                "is outside the allowed workspace roots ({}): give a directory under one of \
                 them, or set IAC_CODE_AGUI_ALLOWED_CWDS (`:`-separated) to roots that hold it.",
                list.join(", ")
            )
        }
        Msg::CwdNotAbsolute => "must be an absolute path (or start with ~/).".into(),
        Msg::CwdNotDirectory => "is a file, not a directory.".into(),
        Msg::CwdCreateFailed => "does not exist and cannot be created.".into(),
        _ => "cannot be resolved to a directory.".into(),
    }
}

/// The allowed workspace roots, with a warning when one is `/` (every absolute path would be
/// an allowed workspace; in a container, the process cwd `/` is the usual culprit).
fn warn_about_roots(roots: &[std::path::PathBuf]) {
    if roots.iter().any(|r| r.as_os_str() == "/") {
        log::warn!(
            "an allowed workspace root is /: every absolute path is an allowed workspace \
             (set IAC_CODE_AGUI_ALLOWED_CWDS)"
        );
    }
}

/// Who may read `/metrics` besides the identity mode's callers (`docs/operations.md`,
/// "Callers").
fn metrics_access(cfg: &Config, identity: &crate::auth::Identity) -> crate::auth::MetricsAccess {
    let access = crate::auth::MetricsAccess {
        token: crate::auth::shared_token(cfg.metrics_token.clone()),
    };
    if !identity.authenticates() && access.token.is_some() {
        log::warn!(
            "IAC_CODE_AGUI_METRICS_TOKEN is set on a server without auth: /metrics stays open \
             like every route"
        );
    }
    access
}

fn serve_with(
    cfg: Config,
    extras: &crate::extras::Settings,
    addr: SocketAddr,
    client: A2aClient,
    ready: Arc<crate::kernel::watch::Probes>,
    signals: &crate::signals::Target,
) -> Result<(), StartError> {
    let env_get = |k: &str| cfg.env.get(k);
    // An extra's private state directory (the demo's) in place of the real one.
    let private = crate::extras::private_state(extras, &cfg)
        .map(TempStateDir::create)
        .transpose()?;
    let root = match &private {
        Some(d) => d.path.clone(),
        None => state_root(cfg.state_dir.as_deref(), env_get),
    };
    let store = Arc::new(FileStore::open(&root).map_err(StartError::State)?);
    {
        let store = store.clone();
        ready.set_store_probe(Box::new(move || match store.probe() {
            Ok(()) => true,
            Err(e) => {
                log::debug!("state probe: {e}");
                false
            }
        }));
    }
    if let Some(d) = &private {
        log::info!(
            "{}: thread state in the private temporary directory {}, removed at exit",
            d.owner,
            store.root().display()
        );
    } else {
        log::info!("state directory {}", store.root().display());
    }
    let server_key = store.server_key().map_err(StartError::State)?;
    // Who is calling is decided before the backend exists: a caller's credentials may carry
    // its own quotas (a tokens-file line).
    let identity = crate::extras::identity(extras, addr, signals)?
        .unwrap_or_else(|| crate::auth::Identity::shared(cfg.auth_token.clone()));
    let ctx = crate::extras::Context {
        store: &store,
        addr,
        signals,
        env: &cfg.env,
        identity: &identity,
    };
    let shared = Shared::new(
        Registry::new(store.clone()),
        client,
        Arc::new(SystemEnv),
        cfg.allowed_roots.clone(),
        env_get("HOME"),
        cfg.agui_protocol,
    )
    .with_detach(
        cfg.disconnect_grace,
        crate::adapter::replay::ReplayBounds {
            retention: cfg.replay_retention,
            ..Default::default()
        },
    )
    .with_readiness(ready.clone())
    .with_default_cwd(cfg.default_cwd.clone())
    .with_server_key(server_key);
    let shared = Arc::new(crate::extras::shared(extras, shared, &ctx)?);
    let backend: Arc<dyn Backend> = Arc::new(AguiBackend {
        shared: shared.clone(),
    });
    let mut routes = RouteConfig::new(cfg.auth_token.clone(), health_body(cfg.agui_protocol));
    routes.identity = identity.clone();
    routes.metrics = metrics_access(&cfg, &routes.identity);
    routes.capabilities_body = capabilities_body(&cfg, extras, cfg.default_cwd.as_deref());
    routes.hosts = HostRule::for_listener(addr.ip().is_loopback(), cfg.allowed_hosts.as_deref());
    crate::extras::routes(extras, &mut routes, &shared, &ctx)?;
    if !addr.ip().is_loopback() && !routes.identity.authenticates() {
        log::warn!(
            "listening on the non-loopback address {addr} with authentication off: anyone who \
             can reach it can run the agent (set IAC_CODE_AGUI_AUTH_TOKEN)"
        );
    }
    crate::extras::start(extras).map_err(StartError::io("start an extra's thread"))?;
    let app = App::new(routes, backend, cfg.max_runs).with_readiness(ready);
    let jobs = app.active_jobs();
    let server_cfg = ServerConfig {
        access_log: |method, path, status, bytes| {
            crate::app::access_log(
                method,
                &crate::server::http::percent_decode(path),
                status,
                std::time::Duration::ZERO,
                bytes as u64,
                Vec::new(),
            )
        },
        heartbeat_interval: cfg.heartbeat_interval,
        max_connections: cfg.max_connections,
        shutdown_grace: cfg.shutdown_grace,
        output_budget: cfg.output_budget,
        ..ServerConfig::default()
    };
    let server = Server::bind(addr, server_cfg, Arc::new(app), Arc::new(SystemClock))
        .map_err(StartError::io(format!("listen on {addr}")))?;
    let local = server.local_addr();
    signals.set(server.shutdown_handle());
    let mut chores = housekeeping(&shared, &cfg);
    chores.extend(crate::extras::chores(extras, &shared));
    if !cfg.idle_shutdown.is_zero() {
        chores.push(idle_monitor(
            server.shutdown_handle(),
            cfg.idle_shutdown,
            shared.clone(),
            jobs,
        ));
    }
    let chores_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    crate::chores::spawn(chores, chores_stop.clone())
        .map_err(StartError::io("start the chores' thread"))?;
    // One stable line that scripts and tests can wait for.
    crate::logging::ready(None, VERSION, &format!("http://{local}"));
    crate::notify::ready();
    crate::extras::listening(extras, local);
    let served = server.run();
    chores_stop.store(true, std::sync::atomic::Ordering::SeqCst);
    crate::extras::stop(extras, &shared);
    served.map_err(StartError::io("serve"))?;
    log::info!("stopped");
    Ok(())
}

/// Finished runs' replay logs go when their retention ends (not at the next request), so an
/// idle server gives their memory back. Off the loop: it takes locks the workers take
/// (`chores.rs`).
fn housekeeping(shared: &Arc<Shared>, cfg: &Config) -> Vec<crate::chores::Chore> {
    let tick = (cfg.replay_retention / 4).clamp(
        std::time::Duration::from_millis(250),
        crate::limits::REPLAY_EXPIRY_TICK,
    );
    let weak = Arc::downgrade(shared);
    vec![crate::chores::Chore::every(tick, move || {
        let Some(sh) = weak.upgrade() else {
            return false;
        };
        sh.retention.replay.purge_expired();
        true
    })]
    .into_iter()
    .chain(std::iter::once(crate::metrics::process_sampler()))
    .collect()
}

/// Reference §8.3: exit when no loaded thread has an active run or a pending interrupt, no
/// request is in flight, and nothing happened for `idle` (checked off the loop: it locks every
/// cached thread); the drain begins as a signal's would.
fn idle_monitor(
    server: crate::server::ShutdownHandle,
    idle: std::time::Duration,
    shared: Arc<Shared>,
    jobs: Arc<std::sync::atomic::AtomicUsize>,
) -> crate::chores::Chore {
    let tick = (idle / 4).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(5),
    );
    crate::chores::Chore::every(tick, move || {
        let quiet = jobs.load(std::sync::atomic::Ordering::SeqCst) == 0
            && shared.registry.quiescent()
            && shared
                .env
                .now()
                .saturating_duration_since(shared.registry.last_activity())
                >= idle;
        if quiet {
            log::info!("idle for {idle:?}: shutting down");
            server.drain();
        }
        !quiet
    })
}
