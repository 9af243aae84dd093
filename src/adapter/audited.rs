//! The adapter's decisions, each handed to the policies' record (`Policies::record`) where it
//! is taken, before it is acknowledged: a refusal here means nothing was done (the callers
//! record before they act). The record is the audit log's (`records.rs`, feature `audit`,
//! issue 44); without one these cost nothing and refuse nothing.

use crate::adapter::rules::admission::{RunKind, Thread};
use crate::adapter::state::policies::{Act, Decision};
use crate::adapter::state::shared::Shared;
use crate::agui::events::RunUsage;
use crate::agui::input::ResumeEntry;
use crate::app::RequestOrigin;
use crate::errors::ApiError;
use crate::principal::ThreadKey;

#[cfg(feature = "audit")]
pub(crate) mod records;

fn record(sh: &Shared, d: Decision<'_>) -> Result<(), ApiError> {
    sh.policies.record(&*sh.env, &d)
}

/// A run admitted (a resume with each interrupt's decision), before its admission is saved.
/// `current` is the thread as it was: its pending interrupts say what each answer was for.
pub(super) fn admission(
    sh: &Shared,
    origin: &RequestOrigin,
    key: &ThreadKey,
    (run_id, execution_id): (&str, &str),
    kind: RunKind,
    current: Option<&Thread>,
    resume: Option<&[ResumeEntry]>,
) -> Result<(), ApiError> {
    let act = Act::Admitted {
        kind,
        current,
        resume,
    };
    record(
        sh,
        Decision {
            origin,
            key,
            run_id: Some(run_id),
            execution_id: Some(execution_id),
            act,
        },
    )
}

/// A run's end, before its terminal event leaves. It has happened whatever the record says:
/// a failure is logged (by the record), not refused.
pub(super) fn run_end(
    sh: &Shared,
    (origin, key, run_id): (&RequestOrigin, &ThreadKey, &str),
    execution_id: &str,
    outcome: &'static str,
    usage: RunUsage,
) {
    let d = Decision {
        origin,
        key,
        run_id: Some(run_id),
        execution_id: Some(execution_id),
        act: Act::RunEnd { outcome, usage },
    };
    let _ = record(sh, d);
}

/// A cancel the route is about to carry out (the execution's run, if one is active).
pub(super) fn cancel(
    sh: &Shared,
    origin: &RequestOrigin,
    key: &ThreadKey,
    execution_id: &str,
    run_id: Option<&str>,
) -> Result<(), ApiError> {
    record(
        sh,
        Decision {
            origin,
            key,
            run_id,
            execution_id: Some(execution_id),
            act: Act::Cancel,
        },
    )
}

/// A thread about to be deleted.
#[cfg(feature = "threads")]
pub(super) fn delete(sh: &Shared, origin: &RequestOrigin, key: &ThreadKey) -> Result<(), ApiError> {
    record(
        sh,
        Decision {
            origin,
            key,
            run_id: None,
            execution_id: None,
            act: Act::Delete,
        },
    )
}

/// A thread about to be deleted by `--thread-retention` (no request: the owner is named, no
/// client).
#[cfg(feature = "threads")]
pub(crate) fn expire(sh: &Shared, key: &ThreadKey) -> Result<(), ApiError> {
    record(
        sh,
        Decision {
            origin: &RequestOrigin::default(),
            key,
            run_id: None,
            execution_id: None,
            act: Act::Expire,
        },
    )
}
