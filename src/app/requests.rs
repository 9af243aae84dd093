//! The three bodies the workers take (run, cancel, subscribe), parsed into typed requests
//! (what a refused request looks like on the wire is `ApiError`'s, in `errors.rs`); an
//! extra's route as it came (`ExtraRequest`), for the extra to read.

use serde_json::Value;

use crate::agui::field::{FieldError, Problem};
use crate::i18n::{self, Lang};
use crate::limits;
use crate::principal::Caller;

/// Where a request came from: the peer's address and the request's place in a W3C trace
/// (never a header's value). The decisions' record says it (the audit log), so a run, a
/// cancel and a deletion carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestOrigin {
    pub client: Option<std::net::SocketAddr>,
    /// The request's W3C trace (the caller's, joined, or one started for it).
    pub trace_id: Option<String>,
    /// The request's own span id in that trace: one request, whatever it was part of.
    pub request_id: Option<String>,
}

impl RequestOrigin {
    /// The peer address and the request's span (`crate::trace`).
    pub(crate) fn of(
        peer: Option<std::net::SocketAddr>,
        span: Option<&crate::trace::SpanContext>,
    ) -> RequestOrigin {
        RequestOrigin {
            client: peer,
            trace_id: span.map(crate::trace::SpanContext::trace_id_hex),
            request_id: span.map(|s| crate::ids::hex(&s.span_id)),
        }
    }
}

/// A `POST /` body that is a JSON object, with the languages decided so far. The envelope
/// itself is validated by the backend.
pub struct RunRequest {
    pub body: Value,
    /// The body's `threadId` / `runId` as far as they are strings (the stream's own ids
    /// before validation; empty when absent).
    pub thread_id: String,
    pub run_id: String,
    /// From Accept-Language (or the server default).
    pub header_lang: Lang,
    /// `forwardedProps.iacCode.preferredLanguage`, else the header language.
    pub payload_lang: Lang,
    /// Who the run is for (set from the head's decision; `Shared` from `parse`).
    pub caller: Caller,
    /// Where it came from, for the decisions' record (set from the request; empty from
    /// `parse`).
    pub origin: RequestOrigin,
}

/// Why a `POST /` body is refused before the backend sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunBodyError {
    /// Not JSON (400 `INVALID_JSON`).
    Json,
    /// JSON, but not an object (400 `INVALID_INPUT`).
    NotObject,
    /// A `threadId` or `runId` the server does not keep (`agui::field::id_ok`; 400
    /// `INVALID_INPUT` naming it, in the payload language): refused before the stream, the
    /// access log or a span holds it.
    Id(FieldError, Lang),
}

impl RunRequest {
    pub fn parse(body: &[u8], header_lang: Lang) -> Result<RunRequest, RunBodyError> {
        let body = parse_json(body).ok_or(RunBodyError::Json)?;
        if !body.is_object() {
            return Err(RunBodyError::NotObject);
        }
        let payload_lang = i18n::payload_language(&body, header_lang);
        let (thread_id, run_id) =
            crate::agui::input::run_ids(&body).map_err(|e| RunBodyError::Id(e, payload_lang))?;
        Ok(RunRequest {
            body,
            thread_id,
            run_id,
            header_lang,
            payload_lang,
            caller: Caller::Shared,
            origin: Default::default(),
        })
    }
}

/// A validated cancel request (reference §1.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    pub execution_id: String,
    pub thread_id: String,
    pub ros_invocation_id: String,
    pub(crate) lang: Lang,
    /// Who asks (set from the head's decision; `Shared` from `parse`).
    pub caller: Caller,
    /// Where it came from, for the decisions' record (set from the request; empty from
    /// `parse`).
    pub origin: RequestOrigin,
}

impl CancelRequest {
    /// `{threadId, rosInvocationId}` (non-empty strings; other keys are ignored, like the
    /// reference).
    pub fn parse(execution_id: String, body: &[u8], lang: Lang) -> Result<Self, BodyError> {
        let v = parse_json(body).ok_or(BodyError::Json)?;
        let obj = object(&v)?;
        Ok(CancelRequest {
            execution_id,
            thread_id: id(obj, "threadId")?,
            ros_invocation_id: identity(obj, "rosInvocationId")?,
            lang,
            caller: Caller::Shared,
            origin: Default::default(),
        })
    }
}

/// A validated subscribe request (upstream's body, or `Last-Event-ID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeRequest {
    pub execution_id: String,
    pub thread_id: String,
    pub run_id: String,
    pub ros_invocation_id: String,
    /// The last event id the client saw (−1: none); `None`: snapshot.
    pub after_sequence: Option<i64>,
    /// The AG-UI version the subscriber declares (`protocolVersion`, as a run's): the dialect a
    /// snapshot is built in (a replay is the run's own events, in the run's dialect).
    pub declared: crate::agui::dialect::Declared,
    pub(crate) lang: Lang,
    /// Who asks (set from the head's decision; `Shared` from `parse`).
    pub caller: Caller,
}

impl SubscribeRequest {
    /// Upstream's subscribe body: exactly `threadId`, `runId`, `rosInvocationId` (non-empty
    /// strings), an optional integer `afterSequence` ≥ −1 (or `Last-Event-ID: N`; the body
    /// wins when both are given) and an optional `protocolVersion` (a run's rule,
    /// `dialect::Declared`).
    pub fn parse(
        execution_id: String,
        body: &[u8],
        last_event_id: Option<&str>,
        lang: Lang,
    ) -> Result<Self, BodyError> {
        let v = parse_json(body).ok_or(BodyError::Json)?;
        let obj = object(&v)?;
        const KEYS: [&str; 5] = [
            "threadId",
            "runId",
            "rosInvocationId",
            "afterSequence",
            "protocolVersion",
        ];
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(BodyError::Field(FieldError::new(k, Problem::Unknown)));
        }
        let (thread_id, run_id, ros_invocation_id) = (
            id(obj, "threadId")?,
            id(obj, "runId")?,
            identity(obj, "rosInvocationId")?,
        );
        let sequence = |n: Option<i64>, field: &str| match n {
            Some(n) if n >= -1 => Ok(Some(n)),
            _ => Err(BodyError::Field(FieldError::new(field, Problem::Value))),
        };
        let after_sequence = match obj.get("afterSequence") {
            None => match last_event_id.map(str::trim) {
                None => None,
                Some(h) => sequence(h.parse::<i64>().ok(), "Last-Event-ID")?,
            },
            Some(v) => sequence(v.as_i64(), "afterSequence")?,
        };
        let declared = crate::agui::dialect::Declared::read(&v).map_err(BodyError::Field)?;
        if declared == crate::agui::dialect::Declared::Unread {
            crate::agui::dialect::warn_unread(&v, "subscribe", &thread_id);
        }
        Ok(SubscribeRequest {
            execution_id,
            thread_id,
            run_id,
            ros_invocation_id,
            after_sequence,
            declared,
            lang,
            caller: Caller::Shared,
        })
    }
}

/// A request on a route of an extra's (`routes::ExtraWork`), for the extra to read: the
/// route as the head decided it, the body as it came, who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraRequest {
    pub work: crate::routes::ExtraWork,
    pub body: Vec<u8>,
    pub caller: Caller,
    /// Where it came from, for the audit log (a deletion's record).
    pub origin: RequestOrigin,
    /// From Accept-Language (or the server default).
    pub lang: Lang,
}

/// The query's `key=value` pairs, percent-decoded; a key given twice is refused. Keys this
/// route does not read are ignored (caches and browsers add their own).
#[allow(dead_code, reason = "read by the extras' routes; the sidecar has none")]
pub(crate) fn query_pairs(query: &str) -> Result<Vec<(String, String)>, FieldError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (
            crate::server::http::percent_decode(k),
            crate::server::http::percent_decode(v),
        );
        if out.iter().any(|(x, _)| *x == k) {
            return Err(FieldError::new(&k, Problem::Duplicate));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// Why a subscribe or cancel body is refused: not JSON (400 `INVALID_JSON`), or a field
/// (400 `INVALID_INPUT`, the message names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    Json,
    Field(FieldError),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Json => f.write_str("the body is not JSON"),
            BodyError::Field(e) => f.write_str(&e.message(Lang::En)),
        }
    }
}

impl std::error::Error for BodyError {}

/// A subscribe or cancel body is a JSON object.
fn object(v: &Value) -> Result<&serde_json::Map<String, Value>, BodyError> {
    v.as_object().ok_or(BodyError::Field(FieldError::new(
        "",
        Problem::Type("object"),
    )))
}

/// The identity strings of a subscribe or cancel body: present, strings, not empty.
fn identity(obj: &serde_json::Map<String, Value>, key: &str) -> Result<String, BodyError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            Err(BodyError::Field(FieldError::new(key, Problem::Required)))
        }
        Some(_) => Err(BodyError::Field(FieldError::new(
            key,
            Problem::Type("string"),
        ))),
    }
}

/// `threadId` or `runId` of a subscribe or cancel body: an identity string the server could
/// have kept (`agui::field::id_ok`).
fn id(obj: &serde_json::Map<String, Value>, key: &str) -> Result<String, BodyError> {
    let s = identity(obj, key)?;
    crate::agui::field::check_id(key, &s).map_err(BodyError::Field)?;
    Ok(s)
}

/// Parse a request body the way the project documents (reference §1.4 step 5, REC): UTF-8
/// with an optional BOM, no NaN/Infinity, nesting at most [`limits::MAX_JSON_DEPTH`].
pub fn parse_json(body: &[u8]) -> Option<Value> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    // A linear pre-scan: hostile nesting is refused before the recursive parser runs.
    if !crate::scan::json_depth_at_most(body, limits::MAX_JSON_DEPTH) {
        return None;
    }
    serde_json::from_slice(body).ok()
}

#[cfg(test)]
mod tests;
