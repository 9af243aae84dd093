//! Every option in one table: the flag parser, the config-file keys, the environment names and
//! the help text are all read from it (and a test holds the README's table to it). The core's
//! rows are here; each extra's rows live with the extra (`crate::extras`), and are in every
//! build, so a build without the extra can name what it refuses.

/// One setting and every way to give it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opt {
    /// The setting's name; also its config-file key when `file` is set.
    pub(crate) key: &'static str,
    /// `--flag` (without the dashes); `None`: no flag (secrets: flags show up in `ps`).
    pub(crate) flag: Option<&'static str>,
    pub(crate) short: Option<char>,
    /// The value's placeholder in the help (`None`: a switch).
    pub(crate) value: Option<&'static str>,
    pub(crate) env: Option<&'static str>,
    /// A config file may set it.
    pub(crate) file: bool,
    pub(crate) help: &'static str,
    /// Shown as `(default …)` in the help; empty: nothing shown.
    pub(crate) default: &'static str,
}

pub(crate) const fn opt(key: &'static str, help: &'static str) -> Opt {
    Opt {
        key,
        flag: None,
        short: None,
        value: None,
        env: None,
        file: true,
        help,
        default: "",
    }
}

impl Opt {
    pub(crate) const fn flag(mut self, flag: &'static str, value: Option<&'static str>) -> Opt {
        self.flag = Some(flag);
        self.value = value;
        self
    }
    pub(crate) const fn short(mut self, c: char) -> Opt {
        self.short = Some(c);
        self
    }
    pub(crate) const fn env(mut self, name: &'static str) -> Opt {
        self.env = Some(name);
        self
    }
    pub(crate) const fn no_file(mut self) -> Opt {
        self.file = false;
        self
    }
    pub(crate) const fn default(mut self, d: &'static str) -> Opt {
        self.default = d;
        self
    }
}

/// The core's options, in the order of the help (the extras' follow).
pub(crate) const CORE: &[Opt] = &[
    opt("host", "Address to listen on")
        .flag("host", Some("HOST"))
        .env("IAC_CODE_AGUI_HOST")
        .default("127.0.0.1"),
    opt("port", "Port to listen on, 0 for any free port")
        .flag("port", Some("PORT"))
        .env("IAC_CODE_AGUI_PORT")
        .default("8000"),
    opt(
        "a2a_url",
        "Loopback A2A kernel to use instead of starting `iac-code a2a`",
    )
    .flag("a2a-url", Some("URL"))
    .env("IAC_CODE_AGUI_A2A_URL"),
    opt("state_dir", "Thread state directory")
        .flag("state-dir", Some("DIR"))
        .env("IAC_CODE_AGUI_STATE_DIR")
        .default("$IAC_CODE_CONFIG_DIR/agui or ~/.iac-code/agui"),
    opt(
        "idle_shutdown",
        "Exit after this long with no active run or pending interrupt (0 = never)",
    )
    .flag("idle-shutdown", Some("SECS"))
    .default("0"),
    opt(
        "agui_protocol",
        "AG-UI dialect of requests that declare no protocolVersion: 0.1 or 1.0",
    )
        .flag("agui-protocol", Some("VERSION"))
        .env("IAC_CODE_AGUI_PROTOCOL")
        .default("0.1"),
    opt(
        "allowed_hosts",
        "Host header names answered, comma-separated, `*` = any",
    )
    .flag("allowed-hosts", Some("NAMES"))
    .env("IAC_CODE_AGUI_ALLOWED_HOSTS")
    .default("on a loopback address only localhost, 127.0.0.1 and [::1]; elsewhere any"),
    opt(
        "interrupt_ttl",
        "Accepted for compatibility and ignored: interrupts have no adapter deadline",
    )
    .flag("interrupt-ttl", Some("SECS"))
    .env("IAC_CODE_AGUI_INTERRUPT_TTL"),
    opt(
        "config",
        "Flat YAML file with any of the config keys (`iac-agui --help` lists them)",
    )
    .flag("config", Some("PATH"))
    .no_file(),
    opt(
        "disconnect_grace",
        "Keep a run going this long after its client disconnected, so it can re-attach (0 = a \
         disconnect stops the run at once)",
    )
    .flag("disconnect-grace", Some("SECS"))
    .env("IAC_CODE_AGUI_DISCONNECT_GRACE")
    .default("0"),
    opt(
        "shutdown_grace",
        "On SIGTERM/SIGINT, let running runs finish for this long; a second signal stops at once",
    )
    .flag("shutdown-grace", Some("SECS"))
    .env("IAC_CODE_AGUI_SHUTDOWN_GRACE")
    .default("30"),
    opt(
        "replay_retention",
        "Keep a finished run's replay log (for re-attaching) this long",
    )
    .flag("replay-retention", Some("SECS"))
    .env("IAC_CODE_AGUI_REPLAY_RETENTION")
    .default("600"),
    opt(
        "default_cwd",
        "Workspace for requests without forwardedProps.iacCode (stock AG-UI clients); must lie \
         under an allowed root",
    )
    .flag("default-cwd", Some("DIR"))
    .env("IAC_CODE_AGUI_DEFAULT_CWD")
    // The help follows the build: the demo's choice only where there is a demo.
    .default(if cfg!(feature = "demo") { "none; --demo: its workspace" } else { "none" }),
    opt(
        "heartbeat_interval",
        "Seconds of silence before an SSE heartbeat",
    )
    .flag("heartbeat-interval", Some("SECS"))
    .default("15"),
    opt(
        "max_connections",
        "Open client connections before new ones get 503",
    )
    .flag("max-connections", Some("N"))
    .default("4096"),
    opt(
        "max_runs",
        "Concurrent requests in workers before new ones get 503",
    )
    .flag("max-runs", Some("N"))
    .default("2048"),
    opt(
        "output_budget",
        "Bytes of output all connections together may hold for clients that read slowly; past it \
         new runs and re-attachments get 503 and runs whose client is behind stop reading upstream",
    )
    .flag("output-budget", Some("BYTES"))
    .default("134217728"),
    opt(
        "a2a_idle_timeout",
        "Upstream silence after which the kernel counts as unavailable",
    )
    .flag("a2a-idle-timeout", Some("SECS"))
    .default("120"),
    opt("debug", "Debug logging (RUST_LOG overrides)")
        .flag("debug", None)
        .short('d'),
    opt(
        "log_stdout",
        "Log to stdout instead of stderr (--no-log-stdout: stderr)",
    )
    .flag("log-stdout", None),
    opt(
        "log_format",
        "One line per record; json: ts, level, target, msg and each field as its own key",
    )
    .flag("log-format", Some("text|json"))
    .env("IAC_CODE_AGUI_LOG_FORMAT")
    .default("text"),
    opt(
        "auth_token",
        "Bearer token required on POST routes and /capabilities, /metrics (unset or empty: no auth)",
    )
    .env("IAC_CODE_AGUI_AUTH_TOKEN"),
    opt(
        "metrics_token",
        "Bearer token that reads /metrics in every identity mode (once callers are told apart, \
         /metrics needs it or a caller listed to read it)",
    )
    .env("IAC_CODE_AGUI_METRICS_TOKEN"),
    opt("a2a_token", "Bearer token for an external A2A kernel").env("IAC_CODE_AGUI_A2A_TOKEN"),
    opt("allowed_cwds", "Allowed workspace roots (':'-separated)")
        .env("IAC_CODE_AGUI_ALLOWED_CWDS")
        .no_file()
        .default("the current directory and the temporary directory"),
    opt("kernel_cmd", "Command that starts the kernel")
        .env("IAC_CODE_AGUI_KERNEL_CMD")
        .no_file()
        .default("iac-code beside this binary, else from PATH"),
];

/// An extra's place in the option table: its cargo feature, its rows (which live with the
/// extra, `crate::extras`, and are in every build), and whether this build has it. The list
/// is given to [`parse`](super::parse) by its caller: the configuration names no extra.
#[derive(Debug)]
pub(crate) struct Extra {
    pub(crate) feature: &'static str,
    pub(crate) options: &'static [Opt],
    pub(crate) built: bool,
}

/// Every option of this build: the core's, then each built extra's.
pub(crate) fn all(extras: &'static [Extra]) -> impl Iterator<Item = &'static Opt> {
    CORE.iter().chain(
        extras
            .iter()
            .filter(|e| e.built)
            .flat_map(|e| e.options.iter()),
    )
}

/// Every option of every build: the core's, then each extra's, built or not (the README's
/// table lists them all).
#[cfg(test)]
pub(crate) fn every(extras: &'static [Extra]) -> impl Iterator<Item = &'static Opt> {
    CORE.iter()
        .chain(extras.iter().flat_map(|e| e.options.iter()))
}

/// The option `key` of this build.
pub(crate) fn option(extras: &'static [Extra], key: &str) -> Option<&'static Opt> {
    all(extras).find(|o| o.key == key)
}

/// An option of an extra this build lacks that `given` picks out, and that extra's feature.
pub(crate) fn lacking(
    extras: &'static [Extra],
    given: impl Fn(&Opt) -> bool,
) -> Option<(&'static Opt, &'static str)> {
    extras
        .iter()
        .filter(|e| !e.built)
        .find_map(|e| e.options.iter().find(|o| given(o)).map(|o| (o, e.feature)))
}

/// The keys a config file may hold.
pub(crate) fn file_keys(extras: &'static [Extra]) -> impl Iterator<Item = &'static str> {
    all(extras).filter(|o| o.file).map(|o| o.key)
}

const WIDTH: usize = 104;
const COLUMN: usize = 32;

/// `text` wrapped at [`WIDTH`], every line but the first indented to `indent`.
fn wrap(out: &mut String, first: &str, text: &str, indent: usize) {
    let mut line = format!("{first:<indent$}");
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.len() + 1 + word.len() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

/// The `--help` text.
pub(crate) fn help(extras: &'static [Extra]) -> String {
    let mut out = String::from(
        "iac-agui — AG-UI (HTTP + SSE) adapter for the iac-code A2A kernel\n\nUSAGE:\n    \
         iac-agui [OPTIONS]\n",
    );
    wrap(
        &mut out,
        "    iac-agui healthcheck [URL] [OPTIONS]",
        "GET /health under URL (a base URL, or one ending in /health; default: the server the \
         OPTIONS, environment and --config describe); exit 0 on 200, else 1 (for container \
         health checks)",
        COLUMN,
    );
    out.push_str("\nOPTIONS:\n");
    for o in all(extras) {
        let Some(flag) = o.flag else { continue };
        let mut name = match o.short {
            Some(c) => format!("    -{c}, --{flag}"),
            None => format!("    --{flag}"),
        };
        if let Some(v) = o.value {
            name = format!("{name} {v}");
        }
        if name.len() >= COLUMN {
            name.push(' ');
        }
        let mut text = o.help.to_string();
        if let Some(env) = o.env {
            text += &format!(" [env {env}]");
        }
        if !o.default.is_empty() {
            text += &format!(" (default {})", o.default);
        }
        wrap(&mut out, &name, &text, COLUMN);
    }
    wrap(&mut out, "    -V, --version", "Print the version", COLUMN);
    wrap(&mut out, "    -h, --help", "Print this help", COLUMN);
    out.push_str("\nENVIRONMENT (no flag):\n");
    for o in all(extras).filter(|o| o.flag.is_none()) {
        let mut text = o.help.to_string();
        if !o.default.is_empty() {
            text += &format!(" (default {})", o.default);
        }
        wrap(
            &mut out,
            &format!("    {}", o.env.unwrap_or(o.key)),
            &text,
            COLUMN,
        );
    }
    wrap(
        &mut out,
        "    RUST_LOG",
        "Log filter, e.g. `info` or `iac_agui=debug`",
        COLUMN,
    );
    out.push_str("\nCONFIG FILE KEYS:\n");
    let keys: Vec<&str> = file_keys(extras).collect();
    wrap(&mut out, "   ", &keys.join(", "), 4);
    out
}
