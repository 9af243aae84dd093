//! `POST /extensions/iac-code/v1/executions/{executionId}/cancel` (reference §8.1), with the
//! RECs: 503 JSON envelopes instead of plain 500s, and a running execution is told to stop
//! (its task is cancelled as soon as its id is known).

use std::sync::atomic::Ordering;

use serde_json::json;

use super::shared::Shared;
use crate::app::CancelRequest;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::server::http::Response;
use crate::sync::lock;

fn answer(execution_id: &str, status: &str) -> Response {
    let v = json!({"executionId": execution_id, "status": status});
    Response::json(200, serde_json::to_vec(&v).unwrap_or_default())
}

pub(crate) fn cancel(sh: &Shared, req: CancelRequest) -> Response {
    let not_found =
        ApiError::new(Code::ExecutionNotFound, Msg::ExecutionNotFound).response(req.lang);
    let slot = match sh.registry.slot(&req.thread_id) {
        Ok(s) => s,
        Err(e) => {
            log::error!("thread {}: {e}", req.thread_id);
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(req.lang);
        }
    };
    let Some(doc) = lock(&slot).as_ref().map(|t| t.doc.clone()) else {
        sh.registry.forget_if_absent(&req.thread_id);
        return not_found;
    };
    let exec = &req.execution_id;
    match sh.registry.live_thread(exec) {
        None => {
            return if doc.terminal.contains(exec) {
                answer(exec, "already_terminal")
            } else {
                not_found
            };
        }
        // No hint about which check failed.
        Some(t)
            if t != req.thread_id
                || doc.execution.execution_id != *exec
                || doc.execution.ros_invocation_id != req.ros_invocation_id =>
        {
            return not_found;
        }
        Some(_) => {}
    }
    if let Some(control) = sh.run_control(exec) {
        control.cancel_requested.store(true, Ordering::SeqCst);
    }
    if let Some(task) = &doc.execution.task_id {
        // A JSON-RPC error (for example "not cancelable") is ignored like the reference does;
        // an unreachable kernel is a 503.
        if let Err(e) = sh.kernel.session().cancel_task(task) {
            log::warn!("cancel {exec}: {e}");
            return ApiError::new(Code::A2aUnavailable, Msg::A2aCancelUnavailable)
                .response(req.lang);
        }
    }
    let saved = sh.registry.update(&slot, |current| {
        let mut next = current
            .filter(|t| t.doc.execution.execution_id == *exec)?
            .clone();
        next.doc.execution.pending.clear();
        next.doc.execution.task_id = None;
        next.doc.retire(exec);
        Some((next, ()))
    });
    let saved = saved.map_err(|e| log::error!("cancel {exec}: {e}")).is_ok();
    if !saved {
        return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(req.lang);
    }
    sh.registry.live_remove(exec);
    answer(exec, "cancelled")
}
