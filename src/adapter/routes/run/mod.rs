//! `POST /`: admission, everything before the first SSE byte, as a pipeline of named stages.
//! Each stage is a function that returns what the next one needs, or the refusal to send:
//!
//! `parse` (the envelope, by the rules of the dialect the request declares) → `properties`
//! (iacCode, the workspace, the run's language, tools) → `content` (the user message) →
//! `gates` (the extras' policies, in one list: `state/policies.rs`) → `reserve` (the
//! thread's slot; a departing run waited for) → `commit` (under the thread's lock: the
//! reference's rules, the decision's record, the turn in its conversation, the save, the
//! run's cell registered with the execution it names).
//!
//! The reference's own order of checks (§3.2) is not spread over the stages: it is the pure
//! `rules/admission.rs`, which `commit` applies and a reader holds against the spec.

pub(in crate::adapter) mod commit;
mod content;
mod gates;
mod parse;
mod properties;
mod reserve;

use std::sync::Arc;

use crate::adapter::run::driver::Admitted;
use crate::adapter::state::policies::Refusal;
use crate::adapter::state::shared::Shared;
use crate::agui::dialect::Declared;
use crate::app::RunRequest;

/// Admit a run: the stages in order.
pub(in crate::adapter) fn admit(
    sh: &Shared,
    req: RunRequest,
    declared: Declared,
    cell: Arc<crate::life::Cell>,
) -> Result<Box<Admitted>, Refusal> {
    let mut parsed = parse::parse(sh, req, declared)?;
    let props = properties::properties(sh, &parsed)?;
    let content = content::content(&mut parsed, &props)?;
    let holds = gates::gates(sh, &parsed, &props)?;
    let reserved = reserve::reserve(sh, &parsed, props)?;
    commit::commit(sh, parsed, reserved, content, holds, cell)
}

/// `admit` on a call thread: its depth (the checks, the state write) and the chunks it frees
/// stay off the worker, which lives as long as the stream and then only ever holds the read
/// → parse → project path (docs/performance.md, issue 26).
pub(in crate::adapter) fn admit_on_call_thread(
    sh: &Arc<Shared>,
    req: Box<RunRequest>,
    declared: Declared,
    cell: Arc<crate::life::Cell>,
) -> Result<Box<Admitted>, Refusal> {
    let shared = sh.clone();
    sh.calls.run(move || admit(&shared, *req, declared, cell))
}
