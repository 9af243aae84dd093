//! `POST /extensions/iac-code/v1/executions/{executionId}/cancel` (reference §8.1), with the
//! RECs: 503 JSON envelopes instead of plain 500s, and a running execution is told to stop
//! (its task is cancelled as soon as its id is known). Stop answers at once: the run's stream
//! ends immediately, `CancelTask` goes on in the background, and the route waits for the
//! kernel's answer only up to `CANCEL_ANSWER_BOUND` (then `202 {"status":"cancelling"}`).

use std::sync::mpsc;

use serde_json::json;

use crate::a2a::client::A2aError;
use crate::adapter::shared::Shared;
use crate::app::CancelRequest;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
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
    let control = sh.run_control(exec);
    // One read decides and writes: the checks see the state the write replaces (a copy taken
    // before could be a turn behind).
    let mut decision = Decision::NotFound;
    // This call made the claim (cancels of one thread are serialised by its lock).
    let mut claimed_here = false;
    let saved = sh.registry.update(&slot, |current| {
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
        // A streaming run that already decided its own end (its terminal event is on its
        // way) is not cancelled any more: say so instead of contradicting the stream.
        if let Some(c) = control.as_ref() {
            claimed_here = c.end_open();
            if !c.claim_cancel() {
                decision = Decision::AlreadyTerminal;
                return None;
            }
        }
        // Recorded before anything changes (a refusal takes the claim back).
        let run = current.and_then(|t| t.active_run.as_deref());
        if let Err(e) = crate::adapter::audited::cancel(sh, &req.origin, &key, exec, run) {
            if let Some(c) = control.as_ref().filter(|_| claimed_here) {
                c.unclaim_cancel();
            }
            decision = Decision::Unrecorded(e);
            return None;
        }
        decision = Decision::Cancel {
            task_id: doc.execution.task_id.clone(),
            context_id: doc.context_id.clone(),
        };
        // The AG-UI execution ends now: terminal, nothing pending (reference §8.1).
        let mut next = Box::new(current?.clone());
        next.doc.execution.pending.clear();
        next.doc.execution.task_id = None;
        next.doc.retire(exec);
        Some((next, ()))
    });
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
    if let Err(e) = saved {
        log::error!("cancel {exec}: {e}");
        // Not cancelled: the run must not end `CANCELLED` after the client was told so.
        if let Some(c) = control.as_ref().filter(|_| claimed_here) {
            c.unclaim_cancel();
        }
        return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(req.lang);
    }
    sh.registry.live_remove(exec);
    // The kernel's confirmation comes on its own thread: a busy kernel can hold `CancelTask`
    // for many seconds. Until it answers, the next turn on this thread waits (`winddown`).
    let running = task_id.is_some();
    let confirmed = task_id.map(|task| confirm_in_background(sh, &context_id, task));
    if let Some(control) = control {
        if running {
            // The run ends at once with its one terminal event.
            control.cancel();
        } else {
            // No task id yet: the run cancels the task the moment the kernel names it.
            control.cancel_saved();
        }
    }
    let Some(confirmed) = confirmed else {
        return answer(200, exec, "cancelled");
    };
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
