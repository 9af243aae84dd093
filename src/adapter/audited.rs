//! The adapter's audit records (issue 44): each built from what its decision knows and
//! written before the decision is acknowledged (`crate::audit`). A refusal here means nothing
//! was done: the callers write before they act.

use super::admission::{RunKind, Thread};
use super::shared::Shared;
use crate::agui::input::ResumeEntry;
use crate::audit::{Action, Answered, Origin, Subject};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::principal::ThreadKey;
use crate::store::document::PendingInput;
use serde_json::Value;

const UNAVAILABLE: ApiError = ApiError::new(Code::AuditUnavailable, Msg::AuditUnavailable);

fn write(
    sh: &Shared,
    origin: &Origin,
    subject: &Subject<'_>,
    action: &Action,
) -> Result<(), ApiError> {
    sh.policies
        .audit
        .write(sh.env.wall(), origin, subject, action)
        .map_err(|_| {
            crate::metrics::M.audit_failures.inc();
            UNAVAILABLE
        })
}

/// A run admitted (a resume with each interrupt's decision), before its admission is saved.
/// `current` is the thread as it was: its pending interrupts say what each answer was for.
pub(super) fn admission(
    sh: &Shared,
    origin: &Origin,
    key: &ThreadKey,
    (run_id, execution_id): (&str, &str),
    kind: RunKind,
    current: Option<&Thread>,
    resume: Option<&[ResumeEntry]>,
) -> Result<(), ApiError> {
    let action = match kind {
        RunKind::Resume => {
            let pending = current.map_or(&[][..], |t| &t.doc.execution.pending[..]);
            Action::Resume {
                interrupts: answered(pending, resume.unwrap_or_default(), sh.env.now_ms()),
            }
        }
        RunKind::New => Action::RunAdmitted { mode: "new" },
        RunKind::NextTurn => Action::RunAdmitted { mode: "next_turn" },
        RunKind::Guidance => Action::RunAdmitted { mode: "guidance" },
    };
    let subject = Subject {
        caller: &key.caller,
        thread_id: &key.id,
        run_id: Some(run_id),
        execution_id: Some(execution_id),
    };
    write(sh, origin, &subject, &action)
}

/// Each answer of a resume against the thread's pending interrupts as they were: what it
/// decided, or refused when the run's own validation (`reconcile::check`) will refuse it:
/// a caller cannot write into the log a decision the kernel is never sent.
fn answered(
    pending: &[(String, PendingInput)],
    resume: &[ResumeEntry],
    now_ms: u64,
) -> Vec<Answered> {
    resume
        .iter()
        .map(|e| {
            let stored = pending
                .iter()
                .find(|(id, _)| *id == e.interrupt_id)
                .map(|(_, p)| p);
            let kind = stored.map(|p| {
                p.value
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("input_required")
                    .to_string()
            });
            Answered {
                id: e.interrupt_id.clone(),
                kind,
                decided: super::reconcile::decided(e, stored, now_ms),
            }
        })
        .collect()
}

/// A run's end, before its terminal event leaves. It has happened whatever the log says:
/// a failure is logged, not refused.
pub(super) fn run_end(
    sh: &Shared,
    run: &super::driver::RunArgs,
    execution_id: &str,
    outcome: &'static str,
    usage: crate::quota::Used,
) {
    let subject = Subject {
        caller: &run.thread.caller,
        thread_id: &run.thread.id,
        run_id: Some(&run.run_id),
        execution_id: Some(execution_id),
    };
    let action = Action::RunEnd { outcome, usage };
    if write(sh, &run.origin, &subject, &action).is_err() {
        log::error!("run {}: its end is not in the audit log", run.run_id);
    }
}

/// A cancel the route is about to carry out (the execution's run, if one is active).
pub(super) fn cancel(
    sh: &Shared,
    origin: &Origin,
    key: &ThreadKey,
    execution_id: &str,
    run_id: Option<&str>,
) -> Result<(), ApiError> {
    let subject = Subject {
        caller: &key.caller,
        thread_id: &key.id,
        run_id,
        execution_id: Some(execution_id),
    };
    write(sh, origin, &subject, &Action::Cancel)
}

/// A thread about to be deleted.
#[cfg(feature = "threads")]
pub(super) fn delete(sh: &Shared, origin: &Origin, key: &ThreadKey) -> Result<(), ApiError> {
    let subject = Subject {
        caller: &key.caller,
        thread_id: &key.id,
        run_id: None,
        execution_id: None,
    };
    write(sh, origin, &subject, &Action::ThreadDelete)
}

/// A thread about to be deleted by `--thread-retention` (no request: the owner is named, no
/// client).
#[cfg(feature = "threads")]
pub(super) fn expire(sh: &Shared, key: &ThreadKey) -> Result<(), ApiError> {
    let subject = Subject {
        caller: &key.caller,
        thread_id: &key.id,
        run_id: None,
        execution_id: None,
    };
    write(sh, &Origin::default(), &subject, &Action::ThreadExpire)
}
