//! What a thread route asks: its path's thread id, its query, a rename's body (field errors
//! name the field).

use serde_json::Value;

use super::{LIST, MESSAGES, THREAD};
use crate::agui::field::{FieldError, Problem};
use crate::app::requests::query_pairs;
use crate::app::{BodyError, parse_json};
use crate::conversation::limits;
use crate::routes::ExtraWork;
use crate::store::index::Filter;

/// What a thread route asks (the body-less routes: their input is the path and query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ThreadsQuery {
    /// `GET /threads?limit=N&cursor=C&q=TEXT&status=S`.
    List {
        limit: usize,
        cursor: Option<String>,
        filter: Filter,
    },
    /// `GET /threads/{threadId}`.
    Get { thread_id: String },
    /// `PATCH /threads/{threadId}` `{"title": "…"}` (`null` or `""`: the first message's
    /// title again).
    Rename {
        thread_id: String,
        title: Option<String>,
    },
    /// `GET /threads/{threadId}/messages?limit=N&before=C`.
    Messages {
        thread_id: String,
        limit: usize,
        before: Option<String>,
    },
    /// `DELETE /threads/{threadId}`.
    Delete { thread_id: String },
}

impl ThreadsQuery {
    /// The query of a thread route: `limit` 1..=`limits::MAX_PAGE` (default
    /// `limits::DEFAULT_PAGE`); the cursor is opaque here (the route reads it).
    pub(super) fn parse(work: &ExtraWork, body: &[u8]) -> Result<ThreadsQuery, BodyError> {
        let page = |pairs: &[(String, String)], key: &'static str| {
            let get = |k: &str| pairs.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
            let limit = match get("limit") {
                None => limits::DEFAULT_PAGE,
                Some(v) => v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=limits::MAX_PAGE).contains(n))
                    .ok_or_else(|| FieldError::new("limit", Problem::Value))?,
            };
            let cursor = get(key);
            if cursor.as_deref().is_some_and(str::is_empty) {
                return Err(FieldError::new(key, Problem::Value));
            }
            Ok((limit, cursor))
        };
        // The path's thread id: a thread with another could not have been made.
        let path_id = || {
            let id = work.id.clone().unwrap_or_default();
            crate::agui::field::check_id("threadId", &id)
                .map(|()| id)
                .map_err(BodyError::Field)
        };
        let pairs = || query_pairs(&work.query).map_err(BodyError::Field);
        Ok(match (work.route, work.method) {
            (LIST, "GET") => {
                let pairs = pairs()?;
                let (limit, cursor) = page(&pairs, "cursor").map_err(BodyError::Field)?;
                let filter = list_filter(&pairs).map_err(BodyError::Field)?;
                ThreadsQuery::List {
                    limit,
                    cursor,
                    filter,
                }
            }
            (THREAD, "GET") => ThreadsQuery::Get {
                thread_id: path_id()?,
            },
            (THREAD, "PATCH") => ThreadsQuery::Rename {
                thread_id: path_id()?,
                title: rename_title(body)?,
            },
            (MESSAGES, "GET") => {
                let pairs = pairs()?;
                let (limit, before) = page(&pairs, "before").map_err(BodyError::Field)?;
                ThreadsQuery::Messages {
                    thread_id: path_id()?,
                    limit,
                    before,
                }
            }
            (THREAD, "DELETE") => ThreadsQuery::Delete {
                thread_id: path_id()?,
            },
            _ => return Err(BodyError::Field(FieldError::new("", Problem::Value))),
        })
    }
}

/// A title or search text: at most `limits::THREAD_TITLE_MAX_CHARS` characters, no control
/// characters and no bidirectional controls (a title is shown in lists and logs, and an
/// override or isolate would make a viewer show what follows it reversed; issue 57, 4).
fn title_text(v: &str) -> bool {
    v.chars().count() <= limits::THREAD_TITLE_MAX_CHARS
        && !v.chars().any(|c| c.is_control() || is_bidi_control(c))
}

/// Unicode's `Bidi_Control` characters: the marks, embeddings, overrides and isolates. Other
/// format characters stay allowed in a title: the joiners and tags that emoji and scripts
/// need (a log still escapes them).
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// `q` (on titles, under Unicode case folding) and `status` (`idle`, `running`,
/// `interrupted`).
fn list_filter(pairs: &[(String, String)]) -> Result<Filter, FieldError> {
    let get = |k: &str| pairs.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
    let q = match get("q") {
        None => None,
        Some(q) if q.trim().is_empty() || !title_text(q) => {
            return Err(FieldError::new("q", Problem::Value));
        }
        Some(q) => Some(crate::store::index::fold_case(q.trim())),
    };
    let status = match get("status") {
        None => None,
        Some(s) => Some(
            crate::store::index::Status::named(s)
                .ok_or_else(|| FieldError::new("status", Problem::Value))?,
        ),
    };
    Ok(Filter { q, status })
}

/// A rename's body: exactly `{"title": string | null}`; an empty title is none.
fn rename_title(body: &[u8]) -> Result<Option<String>, BodyError> {
    let v = parse_json(body).ok_or(BodyError::Json)?;
    let o = v.as_object().ok_or(BodyError::Field(FieldError::new(
        "",
        Problem::Type("object"),
    )))?;
    if let Some(k) = o.keys().find(|k| *k != "title") {
        return Err(BodyError::Field(FieldError::new(k, Problem::Unknown)));
    }
    match o.get("title") {
        None => Err(BodyError::Field(FieldError::new(
            "title",
            Problem::Required,
        ))),
        Some(Value::Null) => Ok(None),
        Some(Value::String(t)) if !title_text(t) => {
            Err(BodyError::Field(FieldError::new("title", Problem::Value)))
        }
        Some(Value::String(t)) => Ok(Some(t.trim().to_string()).filter(|t| !t.is_empty())),
        Some(_) => Err(BodyError::Field(FieldError::new(
            "title",
            Problem::Type("string"),
        ))),
    }
}

#[cfg(test)]
mod tests;
