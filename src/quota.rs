//! Per-caller quotas and usage (feature `quotas`, issue 44, part 3).
//!
//! Two quotas, checked at admission before anything is written: concurrent runs
//! (`--caller-max-runs`) and run admissions per minute (`--caller-rate`). A tokens-file line
//! may set its principal's own (`max_runs=N`, `rate=N`). Over either one the request gets
//! `429 RATE_LIMITED` with `Retry-After`, before the stream. Usage is the kernel's token
//! counts of each finished run (`RUN_FINISHED.usage`), summed per caller and UTC day, kept in
//! the caller's directory and answered by `GET /usage`.
//!
//! This face is in every build: the options, [`Limits`] (the tokens file reads a principal's
//! own in every build, `auth/tokens.rs`) and [`OwnLimits`], how the gate asks for them.
//! `book.rs` keeps the books; `gate.rs` wires them in (admission's gate, `GET /usage`, the
//! usage flush, their metrics). Without the feature no run is refused for a quota, `/usage`
//! is not found and no usage file is written.

use crate::config::{Opt, opt};
use crate::principal::Caller;

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[
    opt(
        "caller_max_runs",
        "Runs one caller may have going at once before its next gets 429 (0 = no limit; a \
         tokens-file line's max_runs=N is that caller's own)",
    )
    .flag("caller-max-runs", Some("N"))
    .env("IAC_CODE_AGUI_CALLER_MAX_RUNS")
    .default("0"),
    opt(
        "caller_rate",
        "Runs one caller may start per minute (bursts up to it) before 429 (0 = no limit; a \
         tokens-file line's rate=N is that caller's own)",
    )
    .flag("caller-rate", Some("N"))
    .env("IAC_CODE_AGUI_CALLER_RATE")
    .default("0"),
];

/// One caller's quotas; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_runs: Option<u32>,
    /// Run admissions per minute.
    pub rate_per_min: Option<u32>,
}

impl Limits {
    /// `own` where it says something, else `self` (a tokens-file line over the options).
    pub fn over(self, own: Limits) -> Limits {
        Limits {
            max_runs: own.max_runs.or(self.max_runs),
            rate_per_min: own.rate_per_min.or(self.rate_per_min),
        }
    }
}

/// A caller's own quotas, as the operator gave them for it (a tokens-file line's), which the
/// gate puts over the options': how the quotas meet the identity that names the callers.
pub trait OwnLimits: Send + Sync {
    /// `caller`'s own (nothing said: none of its own).
    fn own_limits(&self, caller: &Caller) -> Limits;
}

/// A caller's own quotas are what its credentials say (a tokens-file line, `auth`), put over
/// the options; callers not told apart have none.
impl OwnLimits for crate::auth::Identity {
    fn own_limits(&self, caller: &crate::principal::Caller) -> Limits {
        let own = crate::auth::Identity::own_limits(self, caller);
        Limits {
            max_runs: own.max_runs,
            rate_per_min: own.rate_per_min,
        }
    }
}

#[cfg(feature = "quotas")]
mod book;
#[cfg(feature = "quotas")]
pub(crate) mod gate;

#[cfg(feature = "quotas")]
pub use book::*;

/// `--caller-max-runs`, `--caller-rate`: every caller's quotas but those its own line sets.
#[cfg(feature = "quotas")]
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    pub(crate) limits: Limits,
}

/// The extra's settings. The quotas hold whether or not a limit is given: runs are counted
/// (a limit a tokens-file reload gives sees them) and usage is kept.
#[cfg(feature = "quotas")]
pub(crate) fn configure(
    s: &crate::config::Sources,
) -> Result<Settings, crate::config::ConfigError> {
    let mut limits = Limits::default();
    if let Some(v) = s.pick("caller_max_runs") {
        limits.max_runs = as_quota(&v)?;
    }
    if let Some(v) = s.pick("caller_rate") {
        limits.rate_per_min = as_quota(&v)?;
    }
    Ok(Settings { limits })
}

/// A quota: 0 is none; at most `limits::MAX_QUOTA_VALUE`.
#[cfg(feature = "quotas")]
fn as_quota(v: &crate::config::Given) -> Result<Option<u32>, crate::config::ConfigError> {
    let n = crate::config::as_int(v)?;
    if !(0..=i64::from(crate::limits::MAX_QUOTA_VALUE)).contains(&n) {
        return Err(v.err(format_args!(
            "must be from 0 (no limit) to {}, not {}.",
            crate::limits::MAX_QUOTA_VALUE,
            v.shown()
        )));
    }
    Ok(u32::try_from(n).ok().filter(|&n| n > 0))
}
