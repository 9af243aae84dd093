//! `POST /extensions/iac-code/v1/executions/{executionId}/cancel` (reference §8.1), with the
//! RECs: 503 JSON envelopes instead of plain 500s, and a running execution is told to stop
//! (its task is cancelled as soon as its id is known). Stop answers at once: the run's stream
//! ends immediately, `CancelTask` goes on in the background, and the route waits for the
//! kernel's answer only up to `CANCEL_ANSWER_BOUND` (then `202 {"status":"cancelling"}`).

use std::sync::{Arc, mpsc};

use serde_json::json;

use crate::a2a::A2aError;
use crate::adapter::state::shared::Shared;
use crate::app::CancelRequest;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::life::{Cell, Effect, Effects, Event as LifeEvent};
use crate::limits;
use crate::server::http::Response;

/// What the cancel route found, under the thread's lock.
enum Decision {
    NotFound,
    /// The audit log refused the cancel's record: nothing was done.
    Unrecorded(ApiError),
    AlreadyTerminal,
    Cancel {
        task_id: Option<String>,
        context_id: String,
    },
}

fn answer(status: u16, execution_id: &str, state: &str) -> Response {
    let v = json!({"executionId": execution_id, "status": state});
    Response::json(status, serde_json::to_vec(&v).unwrap_or_default())
}

pub(crate) fn cancel(sh: &Shared, req: CancelRequest) -> Response {
    let not_found =
        ApiError::new(Code::ExecutionNotFound, Msg::ExecutionNotFound).response(req.lang);
    // Only the caller's own threads: another principal's thread of this id is not looked at.
    let key = crate::principal::ThreadKey::new(&req.caller, &req.thread_id);
    let slot = match sh.registry.slot(&key) {
        Ok(s) => s,
        Err(e) => {
            log::error!("thread {}: {e}", req.thread_id);
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(req.lang);
        }
    };
    let exec = &req.execution_id;
    // One read decides and writes: the checks see the state the write replaces (a copy taken
    // before could be a turn behind).
    let mut decision = Decision::NotFound;
    // What the claim's outcome asked for, published under the thread's lock.
    let mut published = Effects::NONE;
    let saved = sh.registry.update_then(
        &slot,
        |current| {
            let doc = &current?.doc;
            match sh.registry.live_thread(exec) {
                None => {
                    if doc.terminal.contains(exec) {
                        decision = Decision::AlreadyTerminal;
                    }
                    return None;
                }
                // No hint about which check failed.
                Some(t)
                    if t != key
                        || doc.execution.execution_id != *exec
                        || doc.execution.ros_invocation_id != req.ros_invocation_id =>
                {
                    return None;
                }
                Some(_) => {}
            }
            // A running run is registered under this lock with the save that made its
            // execution findable: found here, or not running.
            let cell = sh.run_cell(exec);
            // The running run's cell, when this call made the claim on it (a second cancel
            // joins the first's claim and takes nothing back).
            let mut claimed: Option<Arc<Cell>> = None;
            if let Some(c) = &cell {
                let fx = c.send(LifeEvent::Cancel);
                // Its own end is on its way: say so instead of contradicting the stream.
                if fx.has(Effect::AlreadyTerminal) {
                    decision = Decision::AlreadyTerminal;
                    return None;
                }
                // Registered under this lock: never, but never a `cancelled` nobody carries out.
                if fx.has(Effect::NotFound) {
                    return None;
                }
                if fx.has(Effect::CancelClaimed) {
                    claimed = Some(c.clone());
                }
            }
            // Recorded before anything changes (a refusal takes the claim back).
            let run = current.and_then(|t| t.active_run.as_deref());
            if let Err(e) = crate::adapter::audited::cancel(sh, &req.origin, &key, exec, run) {
                if let Some(c) = claimed.take() {
                    c.send(LifeEvent::CancelUnsaved);
                }
                decision = Decision::Unrecorded(e);
                return None;
            }
            decision = Decision::Cancel {
                // A paused execution's task; a running run's is its cell's (it may be named
                // but not saved yet).
                task_id: if cell.is_some() {
                    None
                } else {
                    doc.execution.task_id.clone()
                },
                context_id: doc.context_id.clone(),
            };
            // The AG-UI execution ends now: terminal, nothing pending (reference §8.1).
            let mut next = Box::new(current?.clone());
            next.doc.execution.pending.clear();
            next.doc.execution.task_id = None;
            next.doc.retire(exec);
            Some((next, claimed))
        },
        // Still under the thread's lock: the claim's outcome is published before anyone who
        // takes the lock (the run's end, the next cancel) can look.
        |claimed, saved| {
            if saved {
                sh.registry.live_remove(exec);
            }
            if let Some(c) = claimed {
                published = c.send(if saved {
                    LifeEvent::CancelSaved
                } else {
                    LifeEvent::CancelUnsaved
                });
            }
        },
    );
    sh.point("cancel.published");
    let (task_id, context_id) = match decision {
        Decision::NotFound => {
            sh.registry.forget_if_absent(&key);
            return not_found;
        }
        Decision::AlreadyTerminal => return answer(200, exec, "already_terminal"),
        Decision::Unrecorded(e) => return e.response(req.lang),
        Decision::Cancel {
            task_id,
            context_id,
        } => (task_id, context_id),
    };
    let claimed = match saved {
        Ok(claimed) => claimed.flatten(),
        Err(e) => {
            log::error!("cancel {exec}: {e}");
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(req.lang);
        }
    };
    // The task to cancel here: a paused execution's, or the running run's when its table
    // says this route learnt second (the run cut at once by the same transition). A run whose
    // task is not named yet cancels it the moment it is (the claim is saved, so `cancelled`
    // is owed and answered now).
    let task = match (&claimed, task_id) {
        (Some(c), _) if published.has(Effect::CancelTask) => c.task_id().map(str::to_string),
        (_, t) => t,
    };
    // The kernel's confirmation comes on its own thread: a busy kernel can hold `CancelTask`
    // for many seconds. Until it answers, the next turn on this thread waits (`winddown`).
    let Some(task) = task else {
        return answer(200, exec, "cancelled");
    };
    let confirmed = confirm_in_background(sh, &context_id, task);
    match confirmed.recv_timeout(sh.cancel_answer_bound) {
        // A JSON-RPC error (for example "not cancelable") is ignored like the reference does.
        Ok(Ok(())) => answer(200, exec, "cancelled"),
        Ok(Err(e)) => {
            log::warn!("cancel {exec}: {e}");
            ApiError::new(Code::A2aUnavailable, Msg::A2aCancelUnavailable).response(req.lang)
        }
        Err(_) => answer(202, exec, "cancelling"),
    }
}

/// `CancelTask` on a worker of its own; its answer (or failure) arrives on the channel.
fn confirm_in_background(
    sh: &Shared,
    context_id: &str,
    task: String,
) -> mpsc::Receiver<Result<(), A2aError>> {
    let (tx, rx) = mpsc::channel();
    let stopping = sh.wind_downs.begin(context_id);
    let kernel = sh.kernel.clone();
    // The cancel request's trace goes on with its CancelTask.
    let trace = crate::trace::current();
    let spawned = std::thread::Builder::new()
        .name("cancel-task".into())
        .stack_size(limits::SMALL_WORKER_STACK_BYTES)
        .spawn(move || {
            let r = crate::trace::with_current(trace, || kernel.session().cancel_task(&task))
                .map(|_| ());
            drop(stopping);
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        log::error!("cannot start a worker thread for CancelTask: {e}");
    }
    rx
}
