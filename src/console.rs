//! `--console` (feature `console`): the browser console at `/console`, one page embedded in the
//! binary (`page.rs`, `console.html`); `--demo` serves it too. Without the feature, or without
//! the option, `/console` is a 404 as any unknown path.

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[opt("console", "Serve the browser console at /console")
    .flag("console", None)
    .env("IAC_CODE_AGUI_CONSOLE")];

#[cfg(feature = "console")]
mod page;

/// The console is served (it has no settings of its own).
#[cfg(feature = "console")]
#[derive(Debug, Clone)]
pub(crate) struct Settings;

/// The extra's settings: `None` when the console is not served. `implied`: another extra
/// serves it (`--demo`).
#[cfg(feature = "console")]
pub(crate) fn configure(
    s: &crate::config::Sources,
    implied: bool,
) -> Result<Option<Settings>, crate::config::ConfigError> {
    // The variable is read as the switch's words (a switch has no variable of its own).
    let env = match s.pick("console").filter(|g| !g.in_file) {
        Some(g) => matches!(
            crate::config::as_string(&g)?
                .trim()
                .to_ascii_lowercase()
                .as_str(),
            "1" | "true" | "yes" | "on"
        ),
        None => false,
    };
    let on = env || s.switch("console")? || implied;
    Ok(on.then_some(Settings))
}

#[cfg(feature = "console")]
impl Settings {
    /// `/console` among the head decision's checks.
    pub(crate) fn route(&self, r: &mut crate::routes::RouteConfig) {
        r.checks.push(std::sync::Arc::new(page::Console::new()));
    }

    /// Once the server listens: where the page is.
    pub(crate) fn listening(&self, local: std::net::SocketAddr) {
        log::info!("browser console on http://{local}/console");
    }
}
