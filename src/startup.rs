//! Why iac-agui could not start, and the exit statuses it says so with: shared by the start-up
//! (`cli`), the health check and the extras' wiring (`extras`), none of which depends on
//! another for it.

/// Why iac-agui could not start, or stopped on an error: one fatal log line, exit status 1.
#[derive(Debug)]
pub(crate) enum StartError {
    /// An OS call failed while doing something ("listen on 127.0.0.1:8000").
    Io { doing: String, err: std::io::Error },
    /// The kernel (managed or an extra's) did not come up, in its own words.
    Kernel(String),
    /// The state directory cannot be used, in the store's words.
    State(String),
    /// The caller identity settings cannot be used (tokens file, identity header).
    #[cfg_attr(
        not(feature = "identity"),
        allow(dead_code, reason = "the identity extra's")
    )]
    Identity(String),
    /// No secure randomness: no token or id could be made.
    Random(crate::ids::RandomUnavailable),
    /// `--default-cwd` is not an allowed workspace, in the option's terms.
    DefaultCwd(String),
}

impl StartError {
    /// `map_err` for an OS call: what was being done.
    pub(crate) fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
        let doing = doing.into();
        move |err| StartError::Io { doing, err }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Io { doing, err } => write!(f, "cannot {doing}: {err}"),
            StartError::Kernel(m)
            | StartError::State(m)
            | StartError::Identity(m)
            | StartError::DefaultCwd(m) => f.write_str(m),
            StartError::Random(e) => write!(f, "refusing to start: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Io { err, .. } => Some(err),
            StartError::Random(e) => Some(e),
            _ => None,
        }
    }
}

/// The version every banner and answer names.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Exit status for usage and configuration errors.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status for start-up failures (bind, kernel, state lock).
pub(crate) const EXIT_FAILURE: u8 = 1;
