//! Stage 6: under the thread's lock, the reference's rules decide (`rules/admission.rs`:
//! §3.2's order, pure), the decision is recorded (the audit log, before anything is saved),
//! the turn is begun in the thread's stored conversation (when the registry keeps them), the
//! state saved, and — still under the lock — the execution made findable with the run's cell
//! registered, so a Stop that finds the one finds the other (issue 56). Then the run's replay
//! log and tap.

use std::sync::Arc;

use crate::adapter::audited;
use crate::adapter::rules::admission::{self, RunKind};
use crate::adapter::run::driver::Admitted;
use crate::adapter::run::driver::{Opening, RunArgs};
use crate::adapter::run::tee;
use crate::adapter::state::policies::Hold;
use crate::adapter::state::replay;
use crate::adapter::state::shared::Shared;
use crate::adapter::state::threads;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::sync::lock;

use super::content::Content;
use super::parse::Parsed;
use super::reserve::Reserved;
use crate::adapter::state::policies::Refusal;

pub(super) fn commit(
    sh: &Shared,
    p: Parsed,
    r: Reserved,
    content: Content,
    holds: Vec<Box<dyn Hold>>,
    cell: Arc<crate::life::Cell>,
) -> Result<Box<Admitted>, Refusal> {
    let Parsed {
        inp,
        key,
        dialect,
        lang,
        digest,
        origin,
    } = p;
    let Reserved { slot, props } = r;
    let strict = dialect.strict_resume_ids;
    let resume_ids: Vec<&str> = match (&inp.resume, strict) {
        (Some(r), true) => r.iter().map(|e| e.interrupt_id.as_str()).collect(),
        _ => Vec::new(),
    };
    let areq = admission::Request {
        thread: &key,
        run_id: &inp.run_id,
        digest: &digest,
        cwd: &props.cwd,
        user_id: props.props.user_id.as_deref(),
        ros_invocation_id: &props.props.ros_invocation_id,
        run_mode: props.props.run_mode.as_deref(),
        resume: inp.resume.is_some(),
        guidance: props.props.active_guidance,
        resume_ids: (strict && inp.resume.is_some()).then_some(&resume_ids[..]),
        dialect,
    };
    let mut refused = None;
    let mut unknown_id = None;
    let grace = sh.retention.disconnect_grace;
    // The request restates the conversation (AG-UI 1.0: `messages` is the whole history);
    // a stored conversation keeps only what it does not hold yet, from its admission.
    let turn_of = threads::TurnOf {
        key: &key,
        run_id: &inp.run_id,
        now_ms: sh.env.now_ms(),
        messages: &inp.messages,
        dialect: &dialect,
    };
    let admitted = sh.registry.admit(
        &slot,
        turn_of,
        |current| match admission::admit(current, &areq, &*sh.env) {
            Ok(a) => {
                let exec = a.thread.doc.execution.execution_id.clone();
                // Recorded before the admission is saved: a refusal leaves nothing behind.
                let ids = (&inp.run_id[..], &exec[..]);
                let resume = inp.resume.as_deref();
                if let Err(e) = audited::admission(sh, &origin, &key, ids, a.kind, current, resume)
                {
                    refused = Some(e);
                    return None;
                }
                let task = a.thread.doc.execution.task_id.clone();
                Some((a.thread, (a.kind, a.retired, exec, task)))
            }
            Err(e) => {
                if e.msg == Msg::ResumeUnknownInterruptId {
                    unknown_id = current
                        .and_then(|t| admission::unknown_resume_id(t, &areq))
                        .map(str::to_string);
                }
                refused = Some(e);
                None
            }
        },
        |(kind, ..)| *kind != RunKind::Guidance,
        // Under the thread's lock, the state saved: the execution becomes findable with the
        // run's cell registered, so a Stop that finds the one finds the other (issue 56).
        |(kind, retired, exec, task)| {
            if let Some(old) = retired {
                sh.registry.live_remove(old);
            }
            if *kind == RunKind::Guidance {
                return;
            }
            if matches!(kind, RunKind::New | RunKind::NextTurn) {
                sh.registry.live_insert(exec, &key);
            }
            sh.register_run(exec, &cell);
            cell.register(grace, task.as_deref(), &inp.run_id);
        },
    );
    let admitted = match (admitted, refused) {
        (Ok(Some(x)), _) => Ok(x),
        (_, Some(e)) => Err(e),
        (Ok(None), None) => Err(ApiError::new(Code::StateUnavailable, Msg::StateUnavailable)),
        (Err(e), None) => {
            log::error!("thread {}: admission write failed: {e}", inp.thread_id);
            // /health should say so now, not at the next probe.
            sh.readiness.kick();
            Err(ApiError::new(Code::StateUnavailable, Msg::StateUnavailable))
        }
    };
    let ((kind, _, execution_id, _), snapshot) = match admitted {
        Ok(x) => x,
        // THREAD_BUSY says which run is active, so the client can subscribe to it or
        // cancel it (both routes take the execution id).
        Err(e) if e.code == Code::ThreadBusy => return Err(busy(&slot, lang).into()),
        Err(e) if e.code == Code::ResumeRequired => {
            return Err(resume_required(&slot, e, lang).into());
        }
        Err(e) if e.msg == Msg::ResumeUnknownInterruptId => {
            let id = unknown_id.as_deref().unwrap_or("");
            return Err(unknown_interrupt(e, id, lang).into());
        }
        Err(e) => {
            sh.registry.forget_if_absent(&key);
            return Err(Refusal::of(e, lang));
        }
    };
    sh.point("admission.committed");
    sh.registry.touch();
    let log = sh.retention.replay.open(
        replay::RunKey {
            thread: key.clone(),
            run_id: inp.run_id.clone(),
        },
        &execution_id,
        &props.props.ros_invocation_id,
        dialect,
    );
    let tap = Arc::new(tee::RunTee::new(
        log,
        sh.env.clone(),
        cell.clone(),
        sh.registry.run_ops(),
    ));
    let args = RunArgs {
        kind,
        slot,
        thread: key,
        run_id: inp.run_id,
        parent_run_id: inp.parent_run_id,
        props: props.props,
        lang: props.lang,
        opening: Some(Box::new(Opening {
            user: content.user,
            resume: inp.resume.unwrap_or_default(),
            snapshot,
            skipped: content.skipped,
        })),
        cell,
        holds,
        origin,
        dialect,
    };
    Ok(Box::new(Admitted {
        args,
        tap,
        session: sh.kernel.session(),
    }))
}

/// `409 THREAD_BUSY` naming the thread's active run, so its owner can subscribe to it or
/// cancel it (both routes take the execution id).
pub(crate) fn busy(slot: &threads::Slot, lang: Lang) -> crate::server::http::Response {
    let active = lock(slot)
        .as_ref()
        .map(|t| (t.doc.execution.execution_id.clone(), t.active_run.clone()));
    let mut extra = serde_json::Map::new();
    if let Some((execution_id, run_id)) = active {
        extra.insert("executionId".into(), execution_id.into());
        if let Some(r) = run_id {
            extra.insert("runId".into(), r.into());
        }
    }
    ApiError::new(Code::ThreadBusy, Msg::ThreadBusy).response_with(lang, extra)
}

/// `409 RESUME_REQUIRED` naming the execution and the interrupts it waits for, so a client
/// that lost them (another device, a cleared tab) can answer them (`GET /threads/{id}` has
/// them whole).
fn resume_required(slot: &threads::Slot, e: ApiError, lang: Lang) -> crate::server::http::Response {
    let mut extra = serde_json::Map::new();
    if let Some(t) = lock(slot).as_ref() {
        let ex = &t.doc.execution;
        extra.insert("executionId".into(), ex.execution_id.clone().into());
        let ids: Vec<serde_json::Value> =
            ex.pending.iter().map(|(id, _)| id.clone().into()).collect();
        extra.insert("interruptIds".into(), ids.into());
    }
    e.response_with(lang, extra)
}

/// 409 `UNKNOWN_INTERRUPT` before the stream, naming the id in its message and as
/// `interruptId`, so a client can tell which answer to drop.
fn unknown_interrupt(e: ApiError, id: &str, lang: Lang) -> crate::server::http::Response {
    let mut extra = serde_json::Map::new();
    extra.insert(
        "message".into(),
        e.msg
            .text(lang)
            .replace("{id}", &crate::logging::escape(id))
            .into(),
    );
    extra.insert("interruptId".into(), id.into());
    e.response_with(lang, extra)
}
