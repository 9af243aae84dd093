//! The audit log as the decisions' record (issue 44): each decision turned into its record
//! (`crate::audit`) and written, fsync'd, before the decision is acknowledged; one that
//! cannot be written is refused with `503 AUDIT_UNAVAILABLE`.

use serde_json::Value;

use crate::adapter::rules::admission::RunKind;
use crate::adapter::rules::env::Env;
use crate::adapter::rules::reconcile;
use crate::adapter::state::policies::{Act, Decision, Record};
use crate::adapter::state::shared::Shared;
use crate::agui::input::ResumeEntry;
use crate::audit::{Action, Answered, Audit, Subject};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::store::document::PendingInput;

const UNAVAILABLE: ApiError = ApiError::new(Code::AuditUnavailable, Msg::AuditUnavailable);

/// The extra's `with_*` builder: every decision the adapter takes recorded in `audit`
/// before it is acknowledged.
pub(crate) fn with_audit(mut sh: Shared, audit: Audit) -> Shared {
    sh.policies.set_record(Box::new(AuditRecord(audit)));
    sh
}

/// `--audit-log` as the decisions' record.
struct AuditRecord(Audit);

impl Record for AuditRecord {
    fn record(&self, env: &dyn Env, d: &Decision<'_>) -> Result<(), ApiError> {
        let action = match &d.act {
            Act::Admitted {
                kind: RunKind::Resume,
                current,
                resume,
            } => {
                let pending = current.map_or(&[][..], |t| &t.doc.execution.pending[..]);
                Action::Resume {
                    interrupts: answered(pending, resume.unwrap_or_default(), env.now_ms()),
                }
            }
            Act::Admitted { kind, .. } => Action::RunAdmitted {
                mode: match kind {
                    RunKind::NextTurn => "next_turn",
                    RunKind::Guidance => "guidance",
                    // (a resume is recorded by the arm above)
                    RunKind::New | RunKind::Resume => "new",
                },
            },
            Act::Cancel => Action::Cancel,
            Act::Delete => Action::ThreadDelete,
            Act::Expire => Action::ThreadExpire,
            Act::RunEnd { outcome, usage } => Action::RunEnd {
                outcome,
                usage: *usage,
            },
        };
        let subject = Subject {
            caller: &d.key.caller,
            thread_id: &d.key.id,
            run_id: d.run_id,
            execution_id: d.execution_id,
        };
        let written = self
            .0
            .write(env.wall(), d.origin, &subject, &action)
            .map_err(|_| {
                crate::metrics::M.audit_failures.inc();
                UNAVAILABLE
            });
        if written.is_err()
            && let (Act::RunEnd { .. }, Some(run)) = (&d.act, d.run_id)
        {
            log::error!("run {run}: its end is not in the audit log");
        }
        written
    }
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
                decided: reconcile::decided::decided(e, stored, now_ms),
            }
        })
        .collect()
}
