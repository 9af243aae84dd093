//! Command line, environment and config file → [`Config`].
//! Precedence is the reference's: flag > environment > config file > default.

mod options;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::limits;
use crate::yaml::{self, Scalar};
pub(crate) use options::{Extra, Opt, help, opt};

pub use crate::agui::dialect::AguiProtocol;

/// The process environment, read once at start-up: nothing else reads environment variables
/// (`clippy.toml`), so every setting has one source and tests inject their own.
#[derive(Debug, Clone, Default)]
pub struct Environ(Vec<(OsString, OsString)>);

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
        self.0.retain(|(k, _)| k != key);
        self.0.push((key.into(), value.into()));
        self
    }

    /// A variable that is set and valid UTF-8 (like `std::env::var(k).ok()`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.get_os(key)?.into_string().ok()
    }

    pub fn get_os(&self, key: &str) -> Option<OsString> {
        // A few dozen variables, read a few times at start-up: a list is enough.
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) a2a_url: Option<String>,
    pub(crate) a2a_token: Option<String>,
    pub(crate) auth_token: Option<String>,
    /// `IAC_CODE_AGUI_METRICS_TOKEN`: a bearer token that reads `/metrics` (a secret).
    pub(crate) metrics_token: Option<String>,
    pub(crate) state_dir: Option<PathBuf>,
    /// Zero disables idle shutdown.
    pub(crate) idle_shutdown: Duration,
    pub(crate) debug: bool,
    pub(crate) log_stdout: bool,
    pub(crate) agui_protocol: AguiProtocol,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_runs: usize,
    /// Output held for all clients together (`--output-budget`).
    pub(crate) output_budget: usize,
    /// An upstream silent for this long (not even a keep-alive comment) is unavailable.
    pub(crate) a2a_idle_timeout: Duration,
    /// `--allowed-hosts`: Host names answered (`*` = any); None = the listener's default.
    pub(crate) allowed_hosts: Option<Vec<String>>,
    /// Where every setting came from: each extra reads its own there (`crate::extras`).
    pub(crate) sources: Sources,
    /// `--log-format text|json`.
    pub(crate) log_format: crate::logging::LogFormat,
    /// How long a run goes on after its client disconnected (0: stop at once).
    pub(crate) disconnect_grace: Duration,
    pub(crate) replay_retention: Duration,
    /// The workspace of requests without `forwardedProps.iacCode` (generic AG-UI clients).
    pub(crate) default_cwd: Option<String>,
    /// Where `default_cwd` was set (`--default-cwd`, the variable, or the file and line).
    pub(crate) default_cwd_origin: String,
    /// How long a drain lets running runs finish (0: stop at once).
    pub(crate) shutdown_grace: Duration,
    /// Things to tell the operator once logging is up (accepted but ignored settings).
    pub(crate) warnings: Vec<String>,
    /// The language of answers that have no request language (`LANGUAGE`/`LC_*`/`LANG`).
    pub(crate) default_lang: crate::i18n::Lang,
    /// The environment the settings came from (the kernel child's, paths, roots).
    pub(crate) env: Environ,
    /// The allowed workspace roots (`IAC_CODE_AGUI_ALLOWED_CWDS`, else the current and the
    /// temporary directory), decided once.
    pub(crate) allowed_roots: Vec<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8000,
            a2a_url: None,
            a2a_token: None,
            auth_token: None,
            metrics_token: None,
            state_dir: None,
            idle_shutdown: Duration::ZERO,
            debug: false,
            log_stdout: false,
            agui_protocol: AguiProtocol::V0_1,
            heartbeat_interval: limits::HEARTBEAT_INTERVAL,
            max_connections: limits::MAX_CONNECTIONS,
            max_runs: limits::MAX_JOBS,
            output_budget: limits::OUTPUT_BUDGET,
            a2a_idle_timeout: limits::A2A_IDLE_TIMEOUT,
            allowed_hosts: None,
            sources: Sources::default(),
            log_format: crate::logging::LogFormat::Text,
            disconnect_grace: limits::DISCONNECT_GRACE,
            replay_retention: limits::REPLAY_RETENTION,
            default_cwd: None,
            default_cwd_origin: "--default-cwd".into(),
            shutdown_grace: limits::SHUTDOWN_GRACE,
            warnings: Vec::new(),
            default_lang: crate::i18n::Lang::En,
            env: Environ::default(),
            allowed_roots: Vec::new(),
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

/// Where each setting can come from, read once: the flags, the environment and the config
/// file, with the reference's precedence (flag > variable > file, per key). The core's
/// settings and each extra's (`crate::extras::configure`) are read through it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sources {
    flags: BTreeMap<&'static str, String>,
    switches: BTreeSet<&'static str>,
    file: BTreeMap<String, yaml::Entry>,
    config_path: Option<PathBuf>,
    environ: Environ,
    extras: &'static [Extra],
}

impl Sources {
    /// A variable that is set and not empty.
    fn env(&self, name: &str) -> Option<String> {
        self.environ.get(name).filter(|v| !v.is_empty())
    }

    /// `key`'s variable, its name with its value: an error names the variable, not the flag.
    fn env_of_key(&self, key: &str) -> Option<(&'static str, String)> {
        let name = options::option(self.extras, key).and_then(|o| o.env)?;
        Some((name, self.env(name)?))
    }

    /// `key` as the config file has it.
    pub(crate) fn in_file(&self, key: &str) -> Option<Given> {
        let e = self.file.get(key).filter(|e| e.value != Scalar::Null)?;
        let path = self
            .config_path
            .as_deref()
            .unwrap_or(std::path::Path::new(""));
        Some(Given {
            value: e.value.clone(),
            written: e.raw.clone(),
            origin: format!("{key} (config file {}, line {})", path.display(), e.line),
            in_file: true,
        })
    }

    /// `key`'s value: flag > variable > config file.
    pub(crate) fn pick(&self, key: &str) -> Option<Given> {
        if let Some(v) = self.flags.get(key) {
            return Some(Given::text(flag_name(key), v));
        }
        if let Some((name, v)) = self.env_of_key(key) {
            return Some(Given::text(name.to_string(), &v));
        }
        self.in_file(key)
    }

    /// A flag's value, from the command line only (an option without variable or file key).
    #[allow(
        dead_code,
        reason = "read by the extras with such an option; the sidecar has none"
    )]
    pub(crate) fn flag(&self, key: &str) -> Option<Given> {
        self.flags.get(key).map(|v| Given::text(flag_name(key), v))
    }

    /// A switch: given as a flag, or `true` in the config file (switches have no variable).
    pub(crate) fn switch(&self, key: &str) -> Result<bool, ConfigError> {
        Ok(self.switches.contains(key) || file_bool(self.in_file(key))?.unwrap_or(false))
    }

    /// Where a switch or setting that is set came from, for errors about combinations.
    #[allow(
        dead_code,
        reason = "read by the extras whose options combine; the sidecar has none"
    )]
    pub(crate) fn origin(&self, key: &str) -> String {
        if self.switches.contains(key) {
            return flag_name(key);
        }
        self.pick(key).map_or_else(|| flag_name(key), |g| g.origin)
    }

    /// A secret: the environment first, then the file; never a flag (flags show up in `ps`).
    pub(crate) fn secret(&self, key: &str) -> Result<Option<String>, ConfigError> {
        self.env_of_key(key)
            .map(|(_, v)| Ok(v))
            .or_else(|| self.in_file(key).map(|v| as_string(&v)))
            .transpose()
    }

    /// A setting of an extra this build lacks, given anyhow: never silently ignored (an
    /// operator who asked for an audit log must not run without one).
    fn lacking(&self) -> Option<ConfigError> {
        let refuse = |given: String, feature: &str| {
            ConfigError(format!(
                "{given} needs the `{feature}` feature, which this build of iac-agui lacks."
            ))
        };
        if let Some((o, feature)) = options::lacking(self.extras, |o| {
            o.env.is_some_and(|e| self.env(e).is_some())
        }) {
            return Some(refuse(o.env.unwrap_or(o.key).to_string(), feature));
        }
        self.file.keys().find_map(|key| {
            let (_, feature) = options::lacking(self.extras, |o| o.file && o.key == key.as_str())?;
            let origin = self.in_file(key).map_or_else(|| key.clone(), |g| g.origin);
            Some(refuse(origin, feature))
        })
    }
}

/// Parse everything from the arguments, the environment and the config file: the core's
/// settings, and the sources each of `extras` reads its own from (`Config::sources`).
pub(crate) fn parse(
    args: impl IntoIterator<Item = OsString>,
    environ: &Environ,
    extras: &'static [Extra],
) -> Result<Command, ConfigError> {
    let env = |k: &str| environ.get(k);
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut flags: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut switches: BTreeSet<&'static str> = BTreeSet::new();
    let mut log_stdout: Option<bool> = None;
    let err = |e: lexopt::Error| ConfigError(e.to_string());
    while let Some(arg) = p.next().map_err(err)? {
        let found = match &arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            Long("no-log-stdout") => {
                log_stdout = Some(false);
                continue;
            }
            Short(c) => options::all(extras).find(|o| o.short == Some(*c)),
            Long(name) => options::all(extras).find(|o| o.flag == Some(*name)),
            Value(_) => None,
        };
        let Some(o) = found else {
            if let Long(name) = &arg
                && let Some((_, feature)) = options::lacking(extras, |o| o.flag == Some(*name))
            {
                return Err(ConfigError(format!(
                    "--{name} needs the `{feature}` feature, which this build of iac-agui lacks."
                )));
            }
            return Err(err(arg.unexpected()));
        };
        if o.value.is_none() {
            if o.key == "log_stdout" {
                log_stdout = Some(true);
            }
            switches.insert(o.key);
            continue;
        }
        let value = p.value().map_err(err)?;
        let value = value
            .into_string()
            .map_err(|_| ConfigError(format!("{} must be valid UTF-8", flag_name(o.key))))?;
        flags.insert(o.key, value);
    }
    let config_path = flags.get("config").map(PathBuf::from);
    let file = match &config_path {
        Some(path) => load_file(path)?,
        None => BTreeMap::new(),
    };
    let sources = Sources {
        flags,
        switches,
        file,
        config_path,
        environ: environ.clone(),
        extras,
    };
    if let Some(e) = sources.lacking() {
        return Err(e);
    }
    let file = &sources.file;
    let in_file = |key: &str| sources.in_file(key);
    let pick = |key: &str| sources.pick(key);

    let mut c = Config::default();
    for key in file
        .keys()
        .filter(|k| !options::file_keys(extras).any(|f| f == k.as_str()))
    {
        c.warnings.push(format!(
            "unknown config file key {} ignored",
            crate::logging::escape(key)
        ));
    }
    if pick("interrupt_ttl").is_some() {
        c.warnings.push(
            "interrupt_ttl is accepted for compatibility and ignored: interrupts have no \
             adapter deadline (the kernel's own expiry applies)"
                .into(),
        );
    }
    if let Some(v) = pick("log_format") {
        let s = as_string(&v)?;
        c.log_format = crate::logging::LogFormat::parse(&s)
            .ok_or_else(|| v.err(format_args!("must be text or json, not {}.", v.shown())))?;
    }
    if let Some(v) = pick("allowed_hosts") {
        let s = as_string(&v)?;
        let names: Vec<String> = s
            .split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return Err(v.err(format_args!(
                "needs at least one host name (or *), not {}.",
                v.shown()
            )));
        }
        c.allowed_hosts = Some(names);
    }
    if let Some(v) = pick("host") {
        c.host = as_string(&v)?;
    }
    if let Some(v) = pick("port") {
        c.port = as_port(&v)?;
    }
    if let Some(v) = pick("a2a_url") {
        let url = as_string(&v)?;
        let url = crate::authority::loopback_base_url(&url)
            // Not quoted: a URL may carry credentials.
            .map_err(|e| v.err(format_args!("cannot be used: {e}")))?;
        c.a2a_url = Some(url);
    }
    if let Some(v) = pick("state_dir") {
        let s = as_string(&v)?;
        if !s.trim().is_empty() {
            c.state_dir = Some(PathBuf::from(s.trim()));
        }
    }
    if let Some(v) = pick("idle_shutdown") {
        c.idle_shutdown = as_seconds(&v, true)?;
    }
    if let Some(v) = pick("agui_protocol") {
        let s = as_string(&v)?;
        c.agui_protocol = AguiProtocol::parse(&s)
            .ok_or_else(|| v.err(format_args!("must be 0.1 or 1.0, not {}.", v.shown())))?;
    }
    if let Some(v) = pick("heartbeat_interval") {
        c.heartbeat_interval = as_seconds(&v, false)?;
    }
    if let Some(v) = pick("max_connections") {
        c.max_connections = as_count(&v)?;
    }
    if let Some(v) = pick("max_runs") {
        c.max_runs = as_count(&v)?;
    }
    if let Some(v) = pick("output_budget") {
        c.output_budget = as_count(&v)?;
    }
    if let Some(v) = pick("disconnect_grace") {
        c.disconnect_grace = as_seconds(&v, true)?;
    }
    if let Some(v) = pick("shutdown_grace") {
        c.shutdown_grace = as_seconds(&v, true)?;
    }
    if let Some(v) = pick("replay_retention") {
        c.replay_retention = as_seconds(&v, true)?;
    }
    if let Some(v) = pick("default_cwd") {
        let s = as_string(&v)?;
        if !s.is_empty() {
            c.default_cwd = Some(s);
            c.default_cwd_origin = v.origin;
        }
    }
    if let Some(v) = pick("a2a_idle_timeout") {
        c.a2a_idle_timeout = as_seconds(&v, false)?;
    }
    let secret = |key: &str| sources.secret(key);
    c.auth_token = secret("auth_token")?;
    c.a2a_token = secret("a2a_token")?;
    c.metrics_token = secret("metrics_token")?;
    c.debug = sources.switch("debug")?;
    c.log_stdout = match log_stdout {
        Some(b) => b,
        None => file_bool(in_file("log_stdout"))?.unwrap_or(false),
    };
    c.default_lang = crate::i18n::server_default(env);
    c.allowed_roots = crate::agui::cwd::allowed_roots(env);
    c.env = environ.clone();
    c.sources = sources;
    Ok(Command::Serve(Box::new(c)))
}

fn load_file(path: &PathBuf) -> Result<BTreeMap<String, yaml::Entry>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "Unable to load the AG-UI config file {}: {e}",
            path.display()
        ))
    })?;
    yaml::parse_entries(&text).map_err(|e| {
        ConfigError(format!(
            "AG-UI config file {} must contain a flat YAML mapping of scalar values ({e}).",
            path.display()
        ))
    })
}

fn flag_name(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// A setting's value as written and where: errors about it name that place (the flag, the
/// variable, or the config file and line) and quote the value as it was written.
#[derive(Debug, Clone)]
pub(crate) struct Given {
    value: Scalar,
    /// The flag's or variable's text, or the config file's text after `key:`.
    written: String,
    /// `--port`, `IAC_CODE_AGUI_PORT`, or `port (config file PATH, line N)`.
    pub(crate) origin: String,
    pub(crate) in_file: bool,
}

impl Given {
    /// A value from a flag or a variable: always text.
    fn text(origin: String, s: &str) -> Given {
        Given {
            value: Scalar::Str(s.to_string()),
            written: s.to_string(),
            origin,
            in_file: false,
        }
    }

    /// The value for a message: as the file has it (`2.0`), a flag's or variable's quoted.
    pub(crate) fn shown(&self) -> String {
        if self.in_file {
            crate::logging::escape(&self.written).into_owned()
        } else {
            format!("{:?}", self.written)
        }
    }

    pub(crate) fn err(&self, what: impl std::fmt::Display) -> ConfigError {
        ConfigError(format!("{} {what}", self.origin))
    }
}

/// Never quotes the value: secrets come this way.
pub(crate) fn as_string(v: &Given) -> Result<String, ConfigError> {
    match &v.value {
        Scalar::Str(s) => Ok(s.clone()),
        // A number in the file is the text it was written as (`0123`, `1.50` stay so).
        Scalar::Int(_) | Scalar::Float(_) => Ok(v.written.clone()),
        other => Err(v.err(format_args!("must be a string, not {}.", other.describe()))),
    }
}

pub(crate) fn as_int(v: &Given) -> Result<i64, ConfigError> {
    let n = match &v.value {
        Scalar::Int(i) => Some(*i),
        Scalar::Str(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    n.ok_or_else(|| v.err(format_args!("must be an integer, not {}.", v.shown())))
}

pub(crate) fn as_port(v: &Given) -> Result<u16, ConfigError> {
    u16::try_from(as_int(v)?).map_err(|_| {
        v.err(format_args!(
            "must be a port from 0 to 65535, not {}.",
            v.shown()
        ))
    })
}

pub(crate) fn as_count(v: &Given) -> Result<usize, ConfigError> {
    let n = as_int(v)?;
    if n < 1 {
        return Err(v.err(format_args!("must be at least 1, not {}.", v.shown())));
    }
    usize::try_from(n).map_err(|_| v.err(format_args!("is too large: {}.", v.shown())))
}

pub(crate) fn as_seconds(v: &Given, zero_ok: bool) -> Result<Duration, ConfigError> {
    let f = match &v.value {
        Scalar::Int(i) => Some(*i as f64),
        Scalar::Float(f) => Some(*f),
        Scalar::Str(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        v.err(format_args!(
            "must be a number of seconds, not {}.",
            v.shown()
        ))
    })?;
    if !f.is_finite() || f < 0.0 || (!zero_ok && f == 0.0) || f > 1e9 {
        return Err(v.err(format_args!(
            "must be a {} number of seconds, not {}.",
            if zero_ok { "non-negative" } else { "positive" },
            v.shown()
        )));
    }
    Ok(Duration::from_secs_f64(f))
}

/// A switch's config-file key (switches have no variable).
pub(crate) fn file_bool(v: Option<Given>) -> Result<Option<bool>, ConfigError> {
    match v {
        None => Ok(None),
        Some(Given {
            value: Scalar::Bool(b),
            ..
        }) => Ok(Some(b)),
        Some(v) => Err(v.err(format_args!("must be true or false, not {}.", v.shown()))),
    }
}

#[cfg(test)]
mod tests;
