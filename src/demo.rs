//! `--demo` and `--demo-kernel-only` (feature `demo`): the scripted demo kernel
//! (`kernel/demo/`) in place of `iac-code a2a`, with the console, a private state directory
//! and a disconnect grace; or the demo kernel alone (the benchmarks' and client tests'
//! upstream). Here: the options, the settings and the start paths.

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[
    opt(
        "demo",
        "Serve with the built-in scripted demo kernel (no LLM, no cloud); implies --console and a \
         30 s --disconnect-grace unless one is given",
    )
    .flag("demo", None),
    opt(
        "demo_kernel_only",
        "Serve only the scripted demo A2A kernel on 127.0.0.1:PORT (token from \
         IACCODE_A2A_HTTP_TOKEN), for benchmarks and client tests",
    )
    .flag("demo-kernel-only", Some("PORT"))
    .no_file(),
];

#[cfg(feature = "demo")]
use crate::kernel::demo::{DemoConfig, DemoKernel};
#[cfg(feature = "demo")]
use crate::startup::StartError;

/// What was asked of the demo.
#[cfg(feature = "demo")]
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `--demo`: the server in front of the demo kernel.
    serve: bool,
    /// `--demo-kernel-only PORT`: the demo kernel alone.
    kernel_only: Option<u16>,
}

/// The extra's settings: `None` when neither option is given.
#[cfg(feature = "demo")]
pub(crate) fn configure(
    s: &crate::config::Sources,
) -> Result<Option<Settings>, crate::config::ConfigError> {
    let kernel_only = s
        .flag("demo_kernel_only")
        .map(|v| crate::config::as_port(&v))
        .transpose()?;
    let serve = s.switch("demo")?;
    if serve && s.pick("a2a_url").is_some() {
        return Err(crate::config::ConfigError(format!(
            "{} and {} cannot be combined.",
            s.origin("demo"),
            s.origin("a2a_url")
        )));
    }
    Ok((serve || kernel_only.is_some()).then_some(Settings { serve, kernel_only }))
}

#[cfg(feature = "demo")]
impl Settings {
    /// `--demo` serves the console.
    pub(crate) fn serves_console(&self) -> bool {
        self.serve
    }

    /// What `--demo` changes of the core's settings, once `--default-cwd` is checked.
    pub(crate) fn amend(&self, c: &mut crate::config::Config) {
        if !self.serve {
            return;
        }
        // A config file's `state_dir` is the real server's: a demo run with that file keeps its
        // threads in its private temporary directory, unless the command line or the
        // environment names a directory for them.
        if let Some(g) = c.sources.pick("state_dir").filter(|g| g.in_file)
            && c.state_dir.take().is_some()
        {
            c.warnings.push(format!(
                "{} is not used by {}, whose threads stay in a temporary directory of their own \
                 (--state-dir or IAC_CODE_AGUI_STATE_DIR puts them elsewhere)",
                g.origin,
                c.sources.origin("demo")
            ));
        }
        // The demo is where the console's reload-and-re-attach is tried: give runs a grace.
        if c.sources.pick("disconnect_grace").is_none() {
            c.disconnect_grace = crate::limits::DEMO_DISCONNECT_GRACE;
        }
        // Without --default-cwd, the first allowed root (the console's workspace too): best
        // effort, never a reason not to start.
        if c.default_cwd.is_none() {
            let home = c.env.get("HOME");
            c.default_cwd = c.allowed_roots.first().and_then(|r| {
                crate::agui::cwd::resolve_cwd(
                    &r.display().to_string(),
                    &c.allowed_roots,
                    home.as_deref(),
                )
                .ok()
            });
        }
    }

    /// A demo without an explicit state directory never touches the real one: its threads
    /// live in a private temporary directory that goes away at exit, so the walkthrough can
    /// be repeated.
    pub(crate) fn private_state(&self, c: &crate::config::Config) -> bool {
        self.serve && c.state_dir.is_none()
    }

    /// With `--demo`, the demo kernel in place of `iac-code a2a`, with a token of its own.
    pub(crate) fn kernel(&self) -> Result<Option<crate::kernel::OwnKernel>, StartError> {
        if !self.serve {
            return Ok(None);
        }
        let token = crate::ids::token_urlsafe().map_err(StartError::Random)?;
        let demo = DemoKernel::start(DemoConfig {
            token: Some(token.clone()),
            ..Default::default()
        })
        .map_err(StartError::io("start the demo kernel"))?;
        let url = demo.base_url();
        log::info!(
            "demo kernel on {url}; scripts by keyword in the message: {}",
            crate::kernel::demo::listed_keywords().join(", ")
        );
        Ok(Some(crate::kernel::OwnKernel {
            url,
            token: Some(token),
            held: Box::new(demo),
        }))
    }

    /// With `--demo-kernel-only PORT`, what is served instead of the server.
    pub(crate) fn instead(
        &self,
    ) -> Option<impl FnOnce(&crate::config::Environ) -> Result<(), StartError> + use<>> {
        let port = self.kernel_only?;
        Some(move |env: &crate::config::Environ| serve_kernel_alone(port, env))
    }
}

/// Serve only the scripted demo kernel (for benchmarks and client tests) until a signal.
#[cfg(feature = "demo")]
fn serve_kernel_alone(port: u16, env: &crate::config::Environ) -> Result<(), StartError> {
    let token = env.get("IACCODE_A2A_HTTP_TOKEN").filter(|t| !t.is_empty());
    let kernel = DemoKernel::start_on(
        port,
        DemoConfig {
            token,
            ..Default::default()
        },
    )
    .map_err(StartError::io("start the demo kernel"))?;
    crate::logging::ready(
        Some("demo kernel"),
        crate::startup::VERSION,
        kernel.base_url().trim_end_matches('/'),
    );
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(StartError::io("install signal handlers"))?;
    signals.forever().next();
    Ok(())
}
