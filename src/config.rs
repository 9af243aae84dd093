//! Command line, environment and config file → [`Config`].
//! Precedence is the reference's: flag > environment > config file > default.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::limits;
use crate::yaml::{self, Scalar};

/// AG-UI wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AguiProtocol {
    /// The reference's dialect (ag-ui-protocol 0.1.20).
    V0_1,
    /// AG-UI 1.0: `protocolVersion` on RUN_STARTED and a `cancelled` outcome.
    V1_0,
}

impl AguiProtocol {
    fn parse(s: &str) -> Option<AguiProtocol> {
        match s.trim() {
            "0.1" | "0.1.20" => Some(AguiProtocol::V0_1),
            "1.0" | "1" => Some(AguiProtocol::V1_0),
            _ => None,
        }
    }
}

/// The process environment, read once at start-up: nothing else reads environment variables
/// (`clippy.toml`), so every setting has one source and tests inject their own.
#[derive(Debug, Clone, Default)]
pub struct Environ(std::collections::HashMap<OsString, OsString>);

impl Environ {
    #[allow(
        clippy::disallowed_methods,
        reason = "the one read of the process environment"
    )]
    pub fn capture() -> Environ {
        Environ(std::env::vars_os().collect())
    }

    /// An environment with just these variables (tests).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Environ {
        Environ(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// This environment with `key` set to `value`.
    pub fn with(mut self, key: &str, value: &str) -> Environ {
        self.0.insert(key.into(), value.into());
        self
    }

    /// A variable that is set and valid UTF-8 (like `std::env::var(k).ok()`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.0
            .get(std::ffi::OsStr::new(key))
            .and_then(|v| v.to_str())
            .map(str::to_string)
    }

    pub fn get_os(&self, key: &str) -> Option<OsString> {
        self.0.get(std::ffi::OsStr::new(key)).cloned()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) a2a_url: Option<String>,
    pub(crate) a2a_token: Option<String>,
    pub(crate) auth_token: Option<String>,
    pub(crate) state_dir: Option<PathBuf>,
    /// Zero disables idle shutdown.
    pub(crate) idle_shutdown: Duration,
    pub(crate) debug: bool,
    pub(crate) log_stdout: bool,
    pub(crate) demo: bool,
    pub(crate) agui_protocol: AguiProtocol,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_runs: usize,
    /// An upstream silent for this long (not even a keep-alive comment) is unavailable.
    pub(crate) a2a_idle_timeout: Duration,
    /// Serve only the demo kernel on this port (benchmarks, client tests).
    pub(crate) demo_kernel_only: Option<u16>,
    /// `--allowed-hosts`: Host names answered (`*` = any); None = the listener's default.
    pub(crate) allowed_hosts: Option<Vec<String>>,
    /// `--log-format text|json`.
    pub(crate) log_format: crate::logging::LogFormat,
    /// How long a run goes on after its client disconnected (0: stop at once).
    pub(crate) disconnect_grace: Duration,
    pub(crate) replay_retention: Duration,
    /// The workspace of requests without `forwardedProps.iacCode` (generic AG-UI clients).
    pub(crate) default_cwd: Option<String>,
    /// How long a drain lets running runs finish (0: stop at once).
    pub(crate) shutdown_grace: Duration,
    /// Serve the browser console at `/console` (`--console`, implied by `--demo`).
    pub(crate) console: bool,
    /// Things to tell the operator once logging is up (accepted but ignored settings).
    pub(crate) warnings: Vec<String>,
    /// The language of answers that have no request language (`LANGUAGE`/`LC_*`/`LANG`).
    pub(crate) default_lang: crate::i18n::Lang,
    /// The environment the settings came from (the kernel child's, paths, roots).
    pub(crate) env: Environ,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8000,
            a2a_url: None,
            a2a_token: None,
            auth_token: None,
            state_dir: None,
            idle_shutdown: Duration::ZERO,
            debug: false,
            log_stdout: false,
            demo: false,
            agui_protocol: AguiProtocol::V0_1,
            heartbeat_interval: limits::HEARTBEAT_INTERVAL,
            max_connections: limits::MAX_CONNECTIONS,
            max_runs: limits::MAX_JOBS,
            a2a_idle_timeout: limits::A2A_IDLE_TIMEOUT,
            demo_kernel_only: None,
            allowed_hosts: None,
            log_format: crate::logging::LogFormat::Text,
            disconnect_grace: limits::DISCONNECT_GRACE,
            replay_retention: limits::REPLAY_RETENTION,
            default_cwd: None,
            shutdown_grace: limits::SHUTDOWN_GRACE,
            console: false,
            warnings: Vec::new(),
            default_lang: crate::i18n::Lang::En,
            env: Environ::default(),
        }
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub(crate) enum Command {
    Serve(Box<Config>),
    Help,
    Version,
}

/// A usage or configuration error: printed as one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigError(pub(crate) String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) const HELP: &str = "\
iac-agui — AG-UI (HTTP + SSE) adapter for the iac-code A2A kernel

USAGE:
    iac-agui [OPTIONS]
    iac-agui healthcheck [URL]  GET URL (default http://127.0.0.1:$IAC_CODE_AGUI_PORT/health, port
                                8000); exit 0 on 200, else 1 (for container health checks)

OPTIONS:
    --host HOST                 Address to listen on [env IAC_CODE_AGUI_HOST] (default 127.0.0.1)
    --port PORT                 Port to listen on, 0 for any free port [env IAC_CODE_AGUI_PORT] (default 8000)
    --a2a-url URL               Loopback A2A kernel to use instead of starting `iac-code a2a`
                                [env IAC_CODE_AGUI_A2A_URL]
    --state-dir DIR             Thread state directory [env IAC_CODE_AGUI_STATE_DIR]
                                (default $IAC_CODE_CONFIG_DIR/agui or ~/.iac-code/agui)
    --idle-shutdown SECONDS     Exit after this long with no active run or pending interrupt (0 = never)
    --agui-protocol VERSION     AG-UI dialect: 0.1 (default) or 1.0 [env IAC_CODE_AGUI_PROTOCOL]
    --demo                      Serve with the built-in scripted demo kernel (no LLM, no cloud); implies
                                --console and a 30 s --disconnect-grace unless one is given
    --console                   Serve the browser console at /console [env IAC_CODE_AGUI_CONSOLE]
    --allowed-hosts NAMES       Host header names answered, comma-separated, `*` = any
                                [env IAC_CODE_AGUI_ALLOWED_HOSTS] (default: on a loopback address only
                                localhost, 127.0.0.1 and [::1]; elsewhere any)
    --interrupt-ttl SECONDS     Accepted for compatibility and ignored: interrupts have no adapter
                                deadline [env IAC_CODE_AGUI_INTERRUPT_TTL]
    --config PATH               Flat YAML file with any of the keys host, port, a2a_url, state_dir,
                                idle_shutdown, debug, log_stdout, auth_token, a2a_token, agui_protocol,
                                heartbeat_interval, max_connections, max_runs, a2a_idle_timeout, demo,
                                allowed_hosts, interrupt_ttl, log_format, disconnect_grace, shutdown_grace,
                                console, replay_retention, default_cwd
    --disconnect-grace SECS     Keep a run going this long after its client disconnected, so it can
                                re-attach (0 = a disconnect stops the run at once)
                                [env IAC_CODE_AGUI_DISCONNECT_GRACE] (default 0)
    --shutdown-grace SECS       On SIGTERM/SIGINT, let running runs finish for this long; a second
                                signal stops at once [env IAC_CODE_AGUI_SHUTDOWN_GRACE] (default 30)
    --replay-retention SECS     Keep a finished run's replay log (for re-attaching) this long
                                [env IAC_CODE_AGUI_REPLAY_RETENTION] (default 600)
    --default-cwd DIR           Workspace for requests without forwardedProps.iacCode (stock AG-UI
                                clients); must lie under an allowed root [env
                                IAC_CODE_AGUI_DEFAULT_CWD] (default: none; --demo: its workspace)
    --heartbeat-interval SECS   Seconds of silence before an SSE heartbeat (default 15)
    --max-connections N         Open client connections before new ones get 503 (default 4096)
    --max-runs N                Concurrent requests in workers before new ones get 503 (default 2048)
    --a2a-idle-timeout SECS     Upstream silence after which the kernel counts as unavailable (default 120)
    --demo-kernel-only PORT     Serve only the scripted demo A2A kernel on 127.0.0.1:PORT (token from
                                IACCODE_A2A_HTTP_TOKEN), for benchmarks and client tests
    -d, --debug                 Debug logging (RUST_LOG overrides)
    --log-stdout                Log to stdout instead of stderr
    --log-format text|json      One line per record; json: ts, level, target, msg and each field as
                                its own key [env IAC_CODE_AGUI_LOG_FORMAT] (default text)
    -V, --version               Print the version
    -h, --help                  Print this help

ENVIRONMENT:
    IAC_CODE_AGUI_AUTH_TOKEN    Bearer token required on POST routes (unset or empty: no auth)
    IAC_CODE_AGUI_A2A_TOKEN     Bearer token for an external A2A kernel
    IAC_CODE_AGUI_ALLOWED_CWDS  Allowed workspace roots (':'-separated)
    IAC_CODE_AGUI_KERNEL_CMD    Command that starts the kernel (default `iac-code`)
    RUST_LOG                    Log filter, e.g. `info` or `iac_agui=debug`
";

/// Parse everything from the arguments, the environment and the config file.
pub(crate) fn parse(
    args: impl IntoIterator<Item = OsString>,
    environ: &Environ,
) -> Result<Command, ConfigError> {
    let env = |k: &str| environ.get(k);
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut flags: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut debug = false;
    let mut log_stdout: Option<bool> = None;
    let mut demo = false;
    let mut console = false;
    let mut config_path: Option<PathBuf> = None;
    let err = |e: lexopt::Error| ConfigError(e.to_string());
    while let Some(arg) = p.next().map_err(err)? {
        let key = match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            Short('d') | Long("debug") => {
                debug = true;
                continue;
            }
            Long("log-stdout") => {
                log_stdout = Some(true);
                continue;
            }
            Long("no-log-stdout") => {
                log_stdout = Some(false);
                continue;
            }
            Long("demo") => {
                demo = true;
                continue;
            }
            Long("console") => {
                console = true;
                continue;
            }
            Long("config") => {
                config_path = Some(PathBuf::from(p.value().map_err(err)?));
                continue;
            }
            Long("host") => "host",
            Long("port") => "port",
            Long("a2a-url") => "a2a_url",
            Long("state-dir") => "state_dir",
            Long("idle-shutdown") => "idle_shutdown",
            Long("agui-protocol") => "agui_protocol",
            Long("heartbeat-interval") => "heartbeat_interval",
            Long("max-connections") => "max_connections",
            Long("max-runs") => "max_runs",
            Long("a2a-idle-timeout") => "a2a_idle_timeout",
            Long("demo-kernel-only") => "demo_kernel_only",
            Long("allowed-hosts") => "allowed_hosts",
            Long("interrupt-ttl") => "interrupt_ttl",
            Long("log-format") => "log_format",
            Long("disconnect-grace") => "disconnect_grace",
            Long("shutdown-grace") => "shutdown_grace",
            Long("replay-retention") => "replay_retention",
            Long("default-cwd") => "default_cwd",
            other => return Err(err(other.unexpected())),
        };
        let value = p.value().map_err(err)?;
        let value = value
            .into_string()
            .map_err(|_| ConfigError(format!("--{} must be valid UTF-8", key.replace('_', "-"))))?;
        flags.insert(key, value);
    }

    let file = match &config_path {
        Some(path) => load_file(path)?,
        None => BTreeMap::new(),
    };
    let env_of = |k: &str| env(k).filter(|v| !v.is_empty());
    // flag > env > config > default, per key.
    let pick = |key: &str, env_name: Option<&str>| -> Option<Scalar> {
        if let Some(v) = flags.get(key) {
            return Some(Scalar::Str(v.clone()));
        }
        if let Some(name) = env_name
            && let Some(v) = env_of(name)
        {
            return Some(Scalar::Str(v));
        }
        file.get(key).filter(|v| **v != Scalar::Null).cloned()
    };

    let mut c = Config::default();
    for key in file.keys().filter(|k| !FILE_KEYS.contains(&k.as_str())) {
        c.warnings.push(format!(
            "unknown config file key {} ignored",
            crate::logging::escape(key)
        ));
    }
    if pick("interrupt_ttl", Some("IAC_CODE_AGUI_INTERRUPT_TTL")).is_some() {
        c.warnings.push(
            "interrupt_ttl is accepted for compatibility and ignored: interrupts have no \
             adapter deadline (the kernel's own expiry applies)"
                .into(),
        );
    }
    if let Some(v) = pick("log_format", Some("IAC_CODE_AGUI_LOG_FORMAT")) {
        let s = as_string("log_format", v)?;
        c.log_format = crate::logging::LogFormat::parse(&s)
            .ok_or_else(|| ConfigError(format!("--log-format must be text or json, not {s:?}.")))?;
    }
    if let Some(v) = pick("allowed_hosts", Some("IAC_CODE_AGUI_ALLOWED_HOSTS")) {
        let s = as_string("allowed_hosts", v)?;
        let names: Vec<String> = s
            .split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return Err(ConfigError(
                "--allowed-hosts needs at least one host name (or *).".into(),
            ));
        }
        c.allowed_hosts = Some(names);
    }
    if let Some(v) = pick("host", Some("IAC_CODE_AGUI_HOST")) {
        c.host = as_string("host", v)?;
    }
    if let Some(v) = pick("port", Some("IAC_CODE_AGUI_PORT")) {
        let n = as_int("port", v)?;
        c.port = u16::try_from(n)
            .map_err(|_| ConfigError("--port must be between 0 and 65535.".into()))?;
    }
    if let Some(v) = pick("a2a_url", Some("IAC_CODE_AGUI_A2A_URL")) {
        c.a2a_url = Some(as_string("a2a_url", v)?);
    }
    if let Some(v) = pick("state_dir", Some("IAC_CODE_AGUI_STATE_DIR")) {
        let s = as_string("state_dir", v)?;
        if !s.trim().is_empty() {
            c.state_dir = Some(PathBuf::from(s.trim()));
        }
    }
    if let Some(v) = pick("idle_shutdown", None) {
        c.idle_shutdown = as_seconds("idle_shutdown", v, true)?;
    }
    if let Some(v) = pick("agui_protocol", Some("IAC_CODE_AGUI_PROTOCOL")) {
        let s = as_string("agui_protocol", v)?;
        c.agui_protocol = AguiProtocol::parse(&s).ok_or_else(|| {
            ConfigError(format!("--agui-protocol must be 0.1 or 1.0, not {s:?}."))
        })?;
    }
    if let Some(v) = pick("heartbeat_interval", None) {
        c.heartbeat_interval = as_seconds("heartbeat_interval", v, false)?;
    }
    if let Some(v) = pick("max_connections", None) {
        c.max_connections = as_count("max_connections", v)?;
    }
    if let Some(v) = pick("max_runs", None) {
        c.max_runs = as_count("max_runs", v)?;
    }
    if let Some(v) = pick("disconnect_grace", Some("IAC_CODE_AGUI_DISCONNECT_GRACE")) {
        c.disconnect_grace = as_seconds("disconnect_grace", v, true)?;
    }
    if let Some(v) = pick("shutdown_grace", Some("IAC_CODE_AGUI_SHUTDOWN_GRACE")) {
        c.shutdown_grace = as_seconds("shutdown_grace", v, true)?;
    }
    if let Some(v) = pick("replay_retention", Some("IAC_CODE_AGUI_REPLAY_RETENTION")) {
        c.replay_retention = as_seconds("replay_retention", v, true)?;
    }
    if let Some(v) = pick("default_cwd", Some("IAC_CODE_AGUI_DEFAULT_CWD")) {
        let s = as_string("default_cwd", v)?;
        if !s.is_empty() {
            c.default_cwd = Some(s);
        }
    }
    if let Some(v) = pick("a2a_idle_timeout", None) {
        c.a2a_idle_timeout = as_seconds("a2a_idle_timeout", v, false)?;
    }
    if let Some(v) = flags.get("demo_kernel_only") {
        let n = as_int("demo_kernel_only", Scalar::Str(v.clone()))?;
        c.demo_kernel_only = Some(
            u16::try_from(n)
                .map_err(|_| ConfigError("--demo-kernel-only takes a port (0-65535).".into()))?,
        );
    }
    if let Some(url) = &c.a2a_url {
        c.a2a_url = Some(crate::a2a::client::loopback_base_url(url).map_err(ConfigError)?);
    }
    // Secrets: environment first, then the file; never a flag (flags show up in `ps`).
    c.auth_token = env_of("IAC_CODE_AGUI_AUTH_TOKEN")
        .map(Ok)
        .or_else(|| {
            file.get("auth_token")
                .filter(|v| **v != Scalar::Null)
                .cloned()
                .map(|v| as_string("auth_token", v))
        })
        .transpose()?;
    c.a2a_token = env_of("IAC_CODE_AGUI_A2A_TOKEN")
        .map(Ok)
        .or_else(|| {
            file.get("a2a_token")
                .filter(|v| **v != Scalar::Null)
                .cloned()
                .map(|v| as_string("a2a_token", v))
        })
        .transpose()?;
    c.debug = debug || file_bool(&file, "debug")?.unwrap_or(false);
    c.log_stdout = match log_stdout {
        Some(b) => b,
        None => file_bool(&file, "log_stdout")?.unwrap_or(false),
    };
    c.demo = demo || file_bool(&file, "demo")?.unwrap_or(false);
    let console_env = env_of("IAC_CODE_AGUI_CONSOLE").map(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    });
    c.console = console
        || console_env.unwrap_or(false)
        || file_bool(&file, "console")?.unwrap_or(false)
        || c.demo;
    // The demo is where the console's reload-and-re-attach is tried: give runs a grace.
    if c.demo && pick("disconnect_grace", Some("IAC_CODE_AGUI_DISCONNECT_GRACE")).is_none() {
        c.disconnect_grace = limits::DEMO_DISCONNECT_GRACE;
    }
    if c.demo && c.a2a_url.is_some() {
        return Err(ConfigError(
            "--demo and --a2a-url cannot be combined.".into(),
        ));
    }
    c.default_lang = crate::i18n::server_default(env);
    c.env = environ.clone();
    Ok(Command::Serve(Box::new(c)))
}

/// Every key a config file may hold; others get a warning.
const FILE_KEYS: &[&str] = &[
    "host",
    "port",
    "a2a_url",
    "state_dir",
    "idle_shutdown",
    "debug",
    "log_stdout",
    "auth_token",
    "a2a_token",
    "agui_protocol",
    "demo",
    "heartbeat_interval",
    "max_connections",
    "max_runs",
    "a2a_idle_timeout",
    "allowed_hosts",
    "interrupt_ttl",
    "log_format",
    "disconnect_grace",
    "replay_retention",
    "default_cwd",
    "shutdown_grace",
    "console",
];

fn load_file(path: &PathBuf) -> Result<BTreeMap<String, Scalar>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "Unable to load the AG-UI config file {}: {e}",
            path.display()
        ))
    })?;
    yaml::parse_flat(&text).map_err(|e| {
        ConfigError(format!(
            "AG-UI config file {} must contain a flat YAML mapping of scalar values ({e}).",
            path.display()
        ))
    })
}

fn flag_name(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

fn as_string(key: &str, v: Scalar) -> Result<String, ConfigError> {
    match v {
        Scalar::Str(s) => Ok(s),
        Scalar::Int(i) => Ok(i.to_string()),
        Scalar::Float(f) => Ok(f.to_string()),
        other => Err(ConfigError(format!(
            "{} must be a string, not {}.",
            flag_name(key),
            other.describe()
        ))),
    }
}

fn as_int(key: &str, v: Scalar) -> Result<i64, ConfigError> {
    match v {
        Scalar::Int(i) => Ok(i),
        Scalar::Str(s) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| ConfigError(format!("{} must be an integer, not {s:?}.", flag_name(key)))),
        other => Err(ConfigError(format!(
            "{} must be an integer, not {}.",
            flag_name(key),
            other.describe()
        ))),
    }
}

fn as_count(key: &str, v: Scalar) -> Result<usize, ConfigError> {
    let n = as_int(key, v)?;
    if n < 1 {
        return Err(ConfigError(format!(
            "{} must be at least 1.",
            flag_name(key)
        )));
    }
    usize::try_from(n).map_err(|_| ConfigError(format!("{} is too large.", flag_name(key))))
}

fn as_seconds(key: &str, v: Scalar, zero_ok: bool) -> Result<Duration, ConfigError> {
    let f = match v {
        Scalar::Int(i) => i as f64,
        Scalar::Float(f) => f,
        Scalar::Str(s) => s.trim().parse::<f64>().map_err(|_| {
            ConfigError(format!(
                "{} must be a number of seconds, not {s:?}.",
                flag_name(key)
            ))
        })?,
        other => {
            return Err(ConfigError(format!(
                "{} must be a number of seconds, not {}.",
                flag_name(key),
                other.describe()
            )));
        }
    };
    if !f.is_finite() || f < 0.0 || (!zero_ok && f == 0.0) || f > 1e9 {
        return Err(ConfigError(format!(
            "{} must be a {} number of seconds.",
            flag_name(key),
            if zero_ok { "non-negative" } else { "positive" }
        )));
    }
    Ok(Duration::from_secs_f64(f))
}

fn file_bool(file: &BTreeMap<String, Scalar>, key: &str) -> Result<Option<bool>, ConfigError> {
    match file.get(key) {
        None | Some(Scalar::Null) => Ok(None),
        Some(Scalar::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ConfigError(format!(
            "config key {key} must be a boolean, not {}.",
            other.describe()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = Environ::from_pairs(env.iter().copied());
        let mut argv = vec![OsString::from("iac-agui")];
        argv.extend(args.iter().map(OsString::from));
        match parse(argv.into_iter().skip(1), &env)? {
            Command::Serve(c) => Ok(*c),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = run(&[], &[]).unwrap();
        assert_eq!(c.host, "127.0.0.1");
        assert_eq!(c.port, 8000);
        assert_eq!(c.agui_protocol, AguiProtocol::V0_1);
    }

    #[test]
    fn precedence_flag_env_file() {
        let dir = std::env::temp_dir().join(format!("iac-agui-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(&file, "port: 7000\nhost: 10.0.0.1\nauth-token: filetok\n").unwrap();
        let f = file.to_str().unwrap();
        let c = run(&["--config", f], &[]).unwrap();
        assert_eq!((c.port, c.host.as_str()), (7000, "10.0.0.1"));
        assert_eq!(c.auth_token.as_deref(), Some("filetok"));
        let c = run(
            &["--config", f],
            &[
                ("IAC_CODE_AGUI_PORT", "7100"),
                ("IAC_CODE_AGUI_AUTH_TOKEN", "envtok"),
            ],
        )
        .unwrap();
        assert_eq!(c.port, 7100);
        assert_eq!(c.auth_token.as_deref(), Some("envtok"));
        let c = run(
            &["--config", f, "--port", "7200"],
            &[("IAC_CODE_AGUI_PORT", "7100")],
        )
        .unwrap();
        assert_eq!(c.port, 7200);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn invalid_values_are_errors() {
        assert!(run(&["--port", "70000"], &[]).is_err());
        assert!(run(&["--port", "x"], &[]).is_err());
        assert!(run(&["--idle-shutdown", "-1"], &[]).is_err());
        assert!(run(&["--agui-protocol", "2.0"], &[]).is_err());
        assert!(run(&["--bogus"], &[]).is_err());
        assert!(run(&["--config", "/nonexistent/iac-agui.yaml"], &[]).is_err());
        assert!(run(&["--demo", "--a2a-url", "http://127.0.0.1:1/"], &[]).is_err());
        assert!(run(&["--a2a-url", "http://10.1.2.3:8000/"], &[]).is_err());
        assert!(run(&[], &[("IAC_CODE_AGUI_A2A_URL", "http://example.com/")]).is_err());
        assert_eq!(
            run(&["--a2a-url", "http://localhost:9/x"], &[])
                .unwrap()
                .a2a_url
                .as_deref(),
            Some("http://localhost:9/x/")
        );
    }

    #[test]
    fn interrupt_ttl_is_accepted_with_one_warning() {
        // Regression: service files of the reference pass --interrupt-ttl; it made us exit 2.
        for (args, env) in [
            (vec!["--interrupt-ttl", "600"], vec![]),
            (vec![], vec![("IAC_CODE_AGUI_INTERRUPT_TTL", "600")]),
        ] {
            let c = run(&args, &env).unwrap();
            assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
            assert!(c.warnings[0].contains("interrupt"));
        }
        assert!(run(&[], &[]).unwrap().warnings.is_empty());
    }

    #[test]
    fn unknown_config_keys_are_named_in_a_warning() {
        let dir = std::env::temp_dir().join(format!("iac-agui-cfg-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(&file, "port: 7000\nprot: 1\ninterrupt-ttl: 60\n").unwrap();
        let c = run(&["--config", file.to_str().unwrap()], &[]).unwrap();
        assert_eq!(c.port, 7000);
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings.iter().any(|w| w.contains("prot ")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn allowed_hosts_from_flag_env_and_file() {
        let c = run(&["--allowed-hosts", "a.test, b.test"], &[]).unwrap();
        assert_eq!(
            c.allowed_hosts,
            Some(vec!["a.test".to_string(), "b.test".to_string()])
        );
        let c = run(&[], &[("IAC_CODE_AGUI_ALLOWED_HOSTS", "*")]).unwrap();
        assert_eq!(c.allowed_hosts, Some(vec!["*".to_string()]));
        assert_eq!(run(&[], &[]).unwrap().allowed_hosts, None);
        assert!(run(&["--allowed-hosts", " , "], &[]).is_err());
    }

    #[test]
    fn protocol_from_env() {
        let c = run(&[], &[("IAC_CODE_AGUI_PROTOCOL", "1.0")]).unwrap();
        assert_eq!(c.agui_protocol, AguiProtocol::V1_0);
    }
}
