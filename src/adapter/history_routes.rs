//! The thread routes (issue 39): a caller's threads, newest activity first; a thread's
//! stored conversation in pages, as AG-UI 1.0 `Message` objects; deleting a thread. Only the
//! caller's own threads: anyone else's answers exactly like one that does not exist.

use base64::Engine;
use serde_json::{Value, json};

use super::Shared;
use crate::app::{ThreadsQuery, ThreadsRequest};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::history::Transcript;
use crate::i18n::Lang;
use crate::principal::{Caller, ThreadKey};
use crate::server::http::Response;
use crate::store::files::StoreError;
use crate::store::index::Entry;
use crate::sync::lock;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub(crate) fn threads(sh: &Shared, req: ThreadsRequest) -> Response {
    let lang = req.lang;
    match req.what {
        ThreadsQuery::List { limit, cursor } => list(sh, &req.caller, limit, cursor, lang),
        ThreadsQuery::Messages {
            thread_id,
            limit,
            before,
        } => messages(
            sh,
            &ThreadKey::new(&req.caller, &thread_id),
            limit,
            before,
            lang,
        ),
        ThreadsQuery::Delete { thread_id } => {
            delete(sh, &ThreadKey::new(&req.caller, &thread_id), lang)
        }
    }
}

fn json_response(status: u16, v: &Value) -> Response {
    Response::json(status, serde_json::to_vec(v).unwrap_or_default())
}

fn bad_cursor(field: &str, lang: Lang) -> Response {
    let e = crate::agui::field::FieldError::new(field, crate::agui::field::Problem::Value);
    ApiError::invalid_field(&e, lang)
}

fn iso(ms: u64) -> String {
    crate::rfc3339::format_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

/// Where a listing page starts: after (updatedAt, threadId) in newest-first order.
fn list_cursor(updated: u64, id: &str) -> String {
    B64.encode(format!("{updated}\n{id}"))
}

fn read_list_cursor(c: &str) -> Option<(u64, String)> {
    let raw = String::from_utf8(B64.decode(c).ok()?).ok()?;
    let (t, id) = raw.split_once('\n')?;
    Some((t.parse().ok()?, id.to_string()))
}

/// A listed thread's status: the live one when the thread is cached (a run in progress,
/// its client gone within the grace included), else the index's; and the run to re-attach
/// to while it runs.
fn live(sh: &Shared, key: &ThreadKey, e: &Entry) -> (&'static str, Option<(String, String)>) {
    let Some(slot) = sh.registry.cached_slot(key) else {
        return (e.status.as_str(), None);
    };
    let g = lock(&slot);
    match g.as_ref() {
        Some(t) if t.active_run.is_some() => {
            let run = t.active_run.clone().unwrap_or_default();
            ("running", Some((run, t.doc.execution.execution_id.clone())))
        }
        Some(t) if !t.doc.execution.pending.is_empty() => ("interrupted", None),
        Some(_) => ("idle", None),
        None => (e.status.as_str(), None),
    }
}

fn list(
    sh: &Shared,
    caller: &Caller,
    limit: usize,
    cursor: Option<String>,
    lang: Lang,
) -> Response {
    let after = match cursor.as_deref().map(read_list_cursor) {
        None => None,
        Some(Some(c)) => Some(c),
        Some(None) => return bad_cursor("cursor", lang),
    };
    let (page, more) = match sh.registry.page(caller, after, limit) {
        Ok(p) => p,
        Err(e) => {
            log::error!("thread listing: {e}");
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang);
        }
    };
    let threads: Vec<Value> = page
        .iter()
        .map(|e| {
            let (status, run) = live(sh, &ThreadKey::new(caller, &e.thread_id), e);
            let mut v = json!({
                "threadId": e.thread_id,
                "title": e.title,
                "createdAt": iso(e.created_at),
                "updatedAt": iso(e.updated_at),
                "status": status,
                "messageCount": e.messages,
            });
            if let Some((run_id, execution_id)) = run {
                v["runId"] = json!(run_id);
                v["executionId"] = json!(execution_id);
            }
            v
        })
        .collect();
    let next = match (more, page.last()) {
        (true, Some(e)) => json!(list_cursor(e.updated_at, &e.thread_id)),
        _ => Value::Null,
    };
    json_response(200, &json!({"threads": threads, "nextCursor": next}))
}

/// The caller's thread's conversation, or the answer to send instead.
fn transcript(sh: &Shared, key: &ThreadKey, lang: Lang) -> Result<Transcript, Response> {
    match sh.registry.history(key) {
        Ok(Some(t)) => Ok(t),
        Ok(None) => {
            // A thread that ran before conversations were kept has none yet: empty.
            let exists = sh
                .registry
                .slot(key)
                .map(|s| lock(&s).is_some())
                .unwrap_or(false);
            sh.registry.forget_if_absent(key);
            if exists {
                Ok(Transcript::new(&key.id, 0))
            } else {
                Err(ApiError::new(Code::ThreadNotFound, Msg::ThreadNotFound).response(lang))
            }
        }
        // Refused for what the file is (damaged, foreign, newer, a symlink, not a regular
        // file, too large): retrying will not help, so not a 503.
        Err(StoreError::Invalid(why)) => {
            log::error!("thread {}: {why}", key.id);
            Err(ApiError::new(Code::HistoryUnreadable, Msg::HistoryUnavailable).response(lang))
        }
        Err(e) => {
            log::error!("thread {}: {e}", key.id);
            Err(ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang))
        }
    }
}

/// The newest `limit` messages before the one `before` names (chronological within the
/// page); `nextCursor` names the page's first message while earlier ones remain.
fn messages(
    sh: &Shared,
    key: &ThreadKey,
    limit: usize,
    before: Option<String>,
    lang: Lang,
) -> Response {
    let t = match transcript(sh, key, lang) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let end = match before {
        None => t.messages.len(),
        Some(c) => {
            let id = B64.decode(&c).ok().and_then(|b| String::from_utf8(b).ok());
            match id.and_then(|id| t.messages.iter().position(|m| m["id"] == *id)) {
                Some(i) => i,
                None => return bad_cursor("before", lang),
            }
        }
    };
    let start = end.saturating_sub(limit);
    let page = &t.messages[start..end];
    let next = match page.first() {
        Some(m) if start > 0 => json!(B64.encode(m["id"].as_str().unwrap_or_default())),
        _ => Value::Null,
    };
    json_response(
        200,
        &json!({"threadId": key.id, "messages": page, "dropped": t.dropped, "nextCursor": next}),
    )
}

fn delete(sh: &Shared, key: &ThreadKey, lang: Lang) -> Response {
    let slot = match sh.registry.slot(key) {
        Ok(s) => s,
        // A thread whose state file cannot be read can still be deleted.
        Err(StoreError::Invalid(why)) => {
            log::warn!(
                "thread {}: deleting a state file that is refused ({why})",
                key.id
            );
            return match sh.registry.delete_files(key) {
                Ok(()) => {
                    sh.replay.forget_thread(key);
                    Response::new(204, "", Vec::new())
                }
                Err(e) => {
                    log::error!("thread {}: delete failed: {e}", key.id);
                    ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang)
                }
            };
        }
        Err(e) => {
            log::error!("thread {}: {e}", key.id);
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang);
        }
    };
    let listed = !matches!(sh.registry.listed(key), Ok(None));
    if lock(&slot).is_none() && !listed {
        drop(slot);
        sh.registry.forget_if_absent(key);
        return ApiError::new(Code::ThreadNotFound, Msg::ThreadNotFound).response(lang);
    }
    match sh.registry.delete(&slot, key) {
        Ok(true) => {
            // What was deleted is not served again: its runs' replay logs go too.
            sh.replay.forget_thread(key);
            Response::new(204, "", Vec::new())
        }
        Ok(false) => super::busy(&slot, lang),
        Err(e) => {
            log::error!("thread {}: delete failed: {e}", key.id);
            ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang)
        }
    }
}
