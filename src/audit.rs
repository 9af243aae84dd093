//! `--audit-log` (feature `audit`, issue 44): one JSON line per decision that changes what the
//! agent may do or what is kept (a run admitted, a resume's answers, a cancel, a thread
//! deleted, a run's end), written before the decision is acknowledged; one that cannot be
//! written is refused with `503 AUDIT_UNAVAILABLE`. This face is in every build: the options
//! and settings. `record.rs` is the record, `file.rs` the append-only file, and the adapter's
//! decisions reach them through `adapter/audited/records.rs` (the policies' record). Without
//! the feature no decision is recorded and none is refused for want of a record.

use crate::config::{Opt, opt};

/// The extra's rows of the option table.
pub(crate) const OPTIONS: &[Opt] = &[
    opt(
        "audit_log",
        "Append a JSON line per decision (run admitted, resume answers, cancel, thread \
         deleted, run end) to this file, fsync'd before the decision is acknowledged; when it \
         cannot be written the decision is refused with 503 AUDIT_UNAVAILABLE",
    )
    .flag("audit-log", Some("PATH"))
    .env("IAC_CODE_AGUI_AUDIT_LOG")
    .default("none: no audit log"),
    opt(
        "audit_max_bytes",
        "Rotate the audit log before a record would make it larger than this",
    )
    .flag("audit-max-bytes", Some("BYTES"))
    .env("IAC_CODE_AGUI_AUDIT_MAX_BYTES")
    .default("104857600"),
    opt(
        "audit_keep",
        "Rotated audit files kept (PATH.1 the newest; 0 = a full file is dropped)",
    )
    .flag("audit-keep", Some("N"))
    .env("IAC_CODE_AGUI_AUDIT_KEEP")
    .default("5"),
];

#[cfg(feature = "audit")]
mod file;
#[cfg(feature = "audit")]
mod record;

#[cfg(feature = "audit")]
pub use file::AuditFile;
#[cfg(feature = "audit")]
pub use record::*;

/// `--audit-log` with its rotation: the decisions' file, its size bound and the rotated
/// files kept.
#[cfg(feature = "audit")]
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) path: std::path::PathBuf,
    pub(crate) max_bytes: u64,
    pub(crate) keep: usize,
}

/// The extra's settings: `None` when no audit log is asked for (its rotation options are
/// checked all the same).
#[cfg(feature = "audit")]
pub(crate) fn configure(
    s: &crate::config::Sources,
) -> Result<Option<Settings>, crate::config::ConfigError> {
    use crate::config::{as_count, as_int, as_string};
    let mut path = None;
    if let Some(v) = s.pick("audit_log") {
        let s = as_string(&v)?;
        if !s.trim().is_empty() {
            path = Some(std::path::PathBuf::from(s.trim()));
        }
    }
    let mut max_bytes = file::DEFAULT_MAX_BYTES;
    if let Some(v) = s.pick("audit_max_bytes") {
        max_bytes = as_count(&v)? as u64;
    }
    let mut keep = file::DEFAULT_KEEP;
    if let Some(v) = s.pick("audit_keep") {
        let n = as_int(&v)?;
        let max = file::MAX_KEEP;
        keep = usize::try_from(n)
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| v.err(format_args!("must be from 0 to {max}, not {}.", v.shown())))?;
    }
    Ok(path.map(|path| Settings {
        path,
        max_bytes,
        keep,
    }))
}

#[cfg(feature = "audit")]
impl Settings {
    /// The log, opened before anything is served: a torn last line (a crash during a write)
    /// is set aside to `PATH.torn` first, so the file reads as JSON Lines.
    pub(crate) fn open(&self) -> std::io::Result<Audit> {
        let path = &self.path;
        let (file, recovered) = AuditFile::open(path, self.max_bytes, self.keep)?;
        if recovered.torn_bytes > 0 {
            log::warn!(
                "audit log {}: a torn last line ({} bytes) moved to {}.torn",
                path.display(),
                recovered.torn_bytes,
                path.display()
            );
        }
        log::info!("audit log {}", file.path().display());
        Ok(Audit::to(std::sync::Arc::new(file)))
    }
}
