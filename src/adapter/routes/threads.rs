//! The thread routes (issues 39, 45, 47; feature `threads`): a caller's threads from its
//! index, newest activity first, found by title and status; one thread's entry with what it
//! waits for; renaming; a thread's stored conversation in pages, as AG-UI 1.0 `Message`
//! objects; deleting a thread. Only the caller's own threads: anyone else's answers exactly
//! like one that does not exist. Found from the head by [`find`] (an extra's route table,
//! `RouteConfig::extra_routes`), read by `request.rs`, answered by [`answer`].

mod request;

use base64::Engine;
use serde_json::{Value, json};

use crate::adapter::state::shared::Shared;
use crate::app::{BodyError, ExtraRequest};
use crate::catalog::Msg;
use crate::conversation::Transcript;
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::principal::{Caller, ThreadKey};
use crate::routes::ExtraPath;
use crate::server::http::{self, Response};
use crate::store::files::StoreError;
use crate::store::index::{Entry, Filter, Status};
use crate::sync::lock;
use request::ThreadsQuery;

/// The extra the routes are (`Backend::extra` hands them back by it).
pub(crate) const EXTRA: &str = "threads";
/// `GET /threads?limit=N&cursor=C&q=TEXT&status=S`.
const LIST: &str = "/threads";
/// `GET`, `PATCH`, `DELETE /threads/{threadId}`.
const THREAD: &str = "/threads/{threadId}";
/// `GET /threads/{threadId}/messages?limit=N&before=C`.
const MESSAGES: &str = "/threads/{threadId}/messages";

/// The thread route a raw path names (a thread id may hold `/` once decoded, so each segment
/// is decoded on its own). The query is read later, on the worker.
pub(crate) fn find(raw: &str) -> Option<ExtraPath> {
    let rest = raw.strip_prefix("/threads")?;
    let path = |route, allow, body, id| ExtraPath {
        extra: EXTRA,
        route,
        allow,
        body,
        id,
    };
    let Some(rest) = rest.strip_prefix('/') else {
        return rest.is_empty().then(|| path(LIST, "GET", None, None));
    };
    let (seg, messages) = match rest.split_once('/') {
        Some((seg, "messages")) => (seg, true),
        Some(_) => return None,
        None => (rest, false),
    };
    let id = http::percent_decode(seg);
    if id.is_empty() {
        return None;
    }
    Some(if messages {
        path(MESSAGES, "GET", None, Some(id))
    } else {
        let rename = Some(("PATCH", Msg::RenameBodyTooLarge));
        path(THREAD, "GET, PATCH, DELETE", rename, Some(id))
    })
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A thread route's answer.
pub(crate) fn answer(sh: &Shared, req: ExtraRequest) -> Response {
    let lang = req.lang;
    let what = match ThreadsQuery::parse(&req.work, &req.body) {
        Ok(q) => q,
        Err(BodyError::Json) => {
            return ApiError::new(Code::InvalidJson, Msg::RenameInvalidJson).response(lang);
        }
        Err(BodyError::Field(e)) => return e.response(lang),
    };
    let key = |thread_id: &str| ThreadKey::new(&req.caller, thread_id);
    match what {
        ThreadsQuery::List {
            limit,
            cursor,
            filter,
        } => list(sh, &req.caller, limit, cursor, filter, lang),
        ThreadsQuery::Get { thread_id } => get(sh, &key(&thread_id), lang),
        ThreadsQuery::Rename { thread_id, title } => rename(sh, &key(&thread_id), title, lang),
        ThreadsQuery::Messages {
            thread_id,
            limit,
            before,
        } => messages(sh, &key(&thread_id), limit, before, lang),
        ThreadsQuery::Delete { thread_id } => delete(sh, &key(&thread_id), &req.origin, lang),
    }
}

fn json_response(status: u16, v: &Value) -> Response {
    Response::json(status, serde_json::to_vec(v).unwrap_or_default())
}

fn bad_cursor(field: &str, lang: Lang) -> Response {
    let e = crate::agui::field::FieldError::new(field, crate::agui::field::Problem::Value);
    e.response(lang)
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

/// A thread as a listing shows it. A running one gives its run and execution ids (to
/// re-attach with); an interrupted one its pending interrupts whole, each with its kind and a
/// one-line summary (to answer from anywhere).
fn entry_json(sh: &Shared, key: &ThreadKey, e: &Entry) -> Value {
    let mut v = json!({
        "threadId": e.thread_id,
        "title": e.title,
        "createdAt": iso(e.created_at),
        "updatedAt": iso(e.updated_at),
        "status": e.status.as_str(),
        "messageCount": e.messages,
    });
    let state = match e.status {
        Status::Idle => None,
        // A running thread is cached (a slot with an active run is never evicted); an
        // interrupted one's state file is read for its interrupts.
        Status::Running => sh.registry.cached_slot(key),
        Status::Interrupted => sh.registry.slot(key).ok(),
    };
    let Some(slot) = state else {
        return v;
    };
    let g = lock(&slot);
    if let Some(t) = g.as_ref() {
        let ex = &t.doc.execution;
        match e.status {
            Status::Running => {
                if let Some(run) = t.active_run.as_ref().or(e.run.as_ref()) {
                    v["runId"] = json!(run);
                }
                v["executionId"] = json!(ex.execution_id);
            }
            _ => {
                v["executionId"] = json!(ex.execution_id);
                // As the run that raised them showed them (issue 57): its dialect while the
                // thread is remembered, else `--agui-protocol`'s.
                let dialect = t.dialect.unwrap_or(sh.default_dialect);
                v["interrupts"] = Value::Array(
                    crate::adapter::rules::interrupts::pending(ex, &dialect)
                        .into_iter()
                        .map(with_summary)
                        .collect(),
                );
            }
        }
    }
    drop(g);
    sh.registry.forget_if_absent(key);
    v
}

/// An interrupt with its `kind` (the kernel's input kind) and a one-line `summary` beside it.
fn with_summary(mut i: Value) -> Value {
    let kind = i["metadata"]["kind"]
        .as_str()
        .unwrap_or("input_required")
        .to_string();
    let line = i["message"]
        .as_str()
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("");
    let summary: String = line
        .chars()
        .take(crate::conversation::limits::HISTORY_TITLE_CHARS)
        .collect();
    i["kind"] = json!(kind);
    i["summary"] = json!(summary);
    i
}

fn list(
    sh: &Shared,
    caller: &Caller,
    limit: usize,
    cursor: Option<String>,
    filter: Filter,
    lang: Lang,
) -> Response {
    let after = match cursor.as_deref().map(read_list_cursor) {
        None => None,
        Some(Some(c)) => Some(c),
        Some(None) => return bad_cursor("cursor", lang),
    };
    let (page, more) = match sh.registry.page(caller, after, limit, filter) {
        Ok(p) => p,
        Err(e) => {
            log::error!("thread listing: {e}");
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang);
        }
    };
    let threads: Vec<Value> = page
        .iter()
        .map(|e| entry_json(sh, &ThreadKey::new(caller, &e.thread_id), e))
        .collect();
    let next = match (more, page.last()) {
        (true, Some(e)) => json!(list_cursor(e.updated_at, &e.thread_id)),
        _ => Value::Null,
    };
    json_response(200, &json!({"threads": threads, "nextCursor": next}))
}

/// The index's entry of the caller's thread, or the answer to send instead.
fn listed(sh: &Shared, key: &ThreadKey, lang: Lang) -> Result<Entry, Response> {
    match sh.registry.listed(key) {
        Ok(Some(e)) => Ok(e),
        Ok(None) => Err(ApiError::new(Code::ThreadNotFound, Msg::ThreadNotFound).response(lang)),
        Err(e) => {
            log::error!("thread {}: {e}", key.id);
            Err(ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang))
        }
    }
}

fn get(sh: &Shared, key: &ThreadKey, lang: Lang) -> Response {
    match listed(sh, key, lang) {
        Ok(e) => json_response(200, &entry_json(sh, key, &e)),
        Err(r) => r,
    }
}

/// A title of the caller's choosing; it touches no run (never a 409), and survives restarts
/// and later turns.
fn rename(sh: &Shared, key: &ThreadKey, title: Option<String>, lang: Lang) -> Response {
    let slot = match sh.registry.slot(key) {
        Ok(s) => s,
        Err(e) => {
            log::error!("thread {}: {e}", key.id);
            return ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang);
        }
    };
    let renamed = sh.registry.rename(&slot, key, title);
    drop(slot);
    sh.registry.forget_if_absent(key);
    match renamed {
        Ok(Some(e)) => json_response(200, &entry_json(sh, key, &e)),
        Ok(None) => ApiError::new(Code::ThreadNotFound, Msg::ThreadNotFound).response(lang),
        Err(e) => {
            log::error!("thread {}: rename failed: {e}", key.id);
            ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang)
        }
    }
}

/// The caller's thread's conversation, or the answer to send instead.
fn transcript(sh: &Shared, key: &ThreadKey, lang: Lang) -> Result<Transcript, Response> {
    match sh.registry.transcript(key) {
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

fn delete(
    sh: &Shared,
    key: &ThreadKey,
    origin: &crate::app::RequestOrigin,
    lang: Lang,
) -> Response {
    // Recorded before any file goes; a refusal deletes nothing.
    let recorded =
        || crate::adapter::audited::delete(sh, origin, key).map_err(|e| e.response(lang));
    let slot = match sh.registry.slot(key) {
        Ok(s) => s,
        // A thread whose state file cannot be read can still be deleted.
        Err(StoreError::Invalid(why)) => {
            log::warn!(
                "thread {}: deleting a state file that is refused ({why})",
                key.id
            );
            if let Err(r) = recorded() {
                return r;
            }
            return match sh.registry.delete_files(key) {
                Ok(()) => {
                    sh.retention.replay.forget_thread(key);
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
    // Recorded under the thread's lock once it is known not busy: a record is a deletion.
    let mut refused = None;
    let deleted = sh.registry.delete_if(&slot, key, |_| match recorded() {
        Ok(()) => true,
        Err(r) => {
            refused = Some(r);
            false
        }
    });
    match deleted.map(|d| d.ok_or(refused)) {
        Ok(Err(refused)) => refused.unwrap_or_else(|| {
            ApiError::new(Code::AuditUnavailable, Msg::AuditUnavailable).response(lang)
        }),
        Ok(Ok(true)) => {
            // What was deleted is not served again: its runs' replay logs go too.
            sh.retention.replay.forget_thread(key);
            Response::new(204, "", Vec::new())
        }
        Ok(Ok(false)) => crate::adapter::routes::run::commit::busy(&slot, lang),
        Err(e) => {
            log::error!("thread {}: delete failed: {e}", key.id);
            ApiError::new(Code::StateUnavailable, Msg::StateUnavailable).response(lang)
        }
    }
}
