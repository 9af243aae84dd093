//! The audit log (issue 44): one JSON line per decision that changes what the agent may do or
//! what is kept (a run admitted, a resume's answers, a cancel, a thread deleted, a run's end),
//! written before the decision is acknowledged. This file is the pure part: where a request
//! came from, the record, what a resume's answers decided (read from the stored interrupts by
//! `adapter::reconcile::decided`). `audit/file.rs` is the append-only file.
//! Records are written on worker and call threads only, never on the event loop.

mod file;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::principal::Caller;
pub(crate) use file::{AuditFile, MAX_KEEP};

/// Longest text of one field (ids, an option or a resource): a record stays bounded whatever
/// a client sends.
pub(crate) const MAX_FIELD_CHARS: usize = 256;
/// Interrupts one resume record lists; past them it only counts.
pub(crate) const MAX_INTERRUPTS: usize = 64;
/// Parameter override names one resume record lists (over all its answers); past them each
/// answer only counts its own.
pub(crate) const MAX_OVERRIDES: usize = 32;

/// Where a request came from, as far as the audit record tells it (never a header's value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub(crate) client: Option<SocketAddr>,
    /// The request's W3C trace (the caller's, joined, or one started for it).
    pub(crate) trace_id: Option<String>,
    /// The request's own span id in that trace: one request, whatever it was part of.
    pub(crate) request_id: Option<String>,
}

impl Origin {
    /// The peer address and the request's span (`crate::trace`).
    pub(crate) fn of(peer: Option<SocketAddr>, span: Option<&crate::trace::SpanContext>) -> Origin {
        Origin {
            client: peer,
            trace_id: span.map(crate::trace::SpanContext::trace_id_hex),
            request_id: span.map(|s| crate::ids::hex(&s.span_id)),
        }
    }
}

/// What was decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// A run admitted: `new`, `next_turn` or `guidance`.
    RunAdmitted {
        mode: &'static str,
    },
    /// A resume admitted, with what each of its answers decided.
    Resume {
        interrupts: Vec<Answered>,
    },
    Cancel,
    /// A thread deleted by its caller (`DELETE /threads/{id}`, feature `threads`).
    #[cfg_attr(
        not(feature = "threads"),
        allow(dead_code, reason = "the threads extra's")
    )]
    ThreadDelete,
    /// A thread idle past `--thread-retention`, deleted by the server (feature `threads`).
    #[cfg_attr(
        not(feature = "threads"),
        allow(dead_code, reason = "the threads extra's")
    )]
    ThreadExpire,
    /// A run's end: its outcome label (`success`, `interrupt`, an error code's, …) and usage.
    RunEnd {
        outcome: &'static str,
        usage: crate::quota::Used,
    },
}

impl Action {
    fn event(&self) -> &'static str {
        match self {
            Action::RunAdmitted { .. } => "run.admitted",
            Action::Resume { .. } => "resume",
            Action::Cancel => "cancel",
            Action::ThreadDelete => "thread.delete",
            Action::ThreadExpire => "thread.expire",
            Action::RunEnd { .. } => "run.end",
        }
    }
}

/// Whom and what the decision is about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) caller: &'a Caller,
    pub(crate) thread_id: &'a str,
    pub(crate) run_id: Option<&'a str>,
    pub(crate) execution_id: Option<&'a str>,
}

/// `s` cut to `MAX_FIELD_CHARS` characters.
fn bounded(s: &str) -> String {
    match s.char_indices().nth(MAX_FIELD_CHARS) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// One record: a JSON object on one line, ending in `\n`.
pub(crate) fn record(
    at: SystemTime,
    origin: &Origin,
    subject: &Subject<'_>,
    action: &Action,
) -> Vec<u8> {
    let mut r = Map::new();
    r.insert("time".into(), crate::rfc3339::format_millis(at).into());
    r.insert("event".into(), action.event().into());
    let caller = subject.caller.name().map_or("shared".into(), bounded);
    r.insert("caller".into(), caller.into());
    r.insert("threadId".into(), bounded(subject.thread_id).into());
    if let Some(run) = subject.run_id {
        r.insert("runId".into(), bounded(run).into());
    }
    if let Some(exec) = subject.execution_id.filter(|e| !e.is_empty()) {
        r.insert("executionId".into(), bounded(exec).into());
    }
    if let Some(c) = origin.client {
        r.insert("client".into(), c.to_string().into());
    }
    if let Some(t) = &origin.trace_id {
        r.insert("traceId".into(), bounded(t).into());
    }
    if let Some(id) = &origin.request_id {
        r.insert("requestId".into(), bounded(id).into());
    }
    match action {
        Action::RunAdmitted { mode } => {
            r.insert("mode".into(), (*mode).into());
        }
        Action::Resume { interrupts } => {
            r.insert("mode".into(), "resume".into());
            let mut room = MAX_OVERRIDES;
            let listed: Vec<Value> = interrupts
                .iter()
                .take(MAX_INTERRUPTS)
                .map(|a| answered(a, &mut room))
                .collect();
            if interrupts.len() > MAX_INTERRUPTS {
                r.insert(
                    "interruptsOmitted".into(),
                    (interrupts.len() - MAX_INTERRUPTS).into(),
                );
            }
            r.insert("interrupts".into(), listed.into());
        }
        Action::Cancel | Action::ThreadDelete | Action::ThreadExpire => {}
        Action::RunEnd { outcome, usage } => {
            r.insert("outcome".into(), (*outcome).into());
            r.insert(
                "usage".into(),
                json!({
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "totalTokens": usage.total_tokens,
                    "cachedInputTokens": usage.cached_input_tokens,
                }),
            );
        }
    }
    // Format characters (a right-to-left override in an interrupt id) and line separators
    // as `\uXXXX`: a viewer shows the line as it is (issue 57, 4).
    let line = serde_json::to_string(&Value::Object(r)).unwrap_or_default();
    let mut line = crate::logging::escape_json_extra(&line)
        .into_owned()
        .into_bytes();
    line.push(b'\n');
    line
}

/// One answer of a resume: the interrupt's id, its kind (the stored interrupt's; `None` when
/// nothing is pending under that id) and what it decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answered {
    pub(crate) id: String,
    pub(crate) kind: Option<String>,
    pub(crate) decided: Decided,
}

/// What an answer decided (`adapter::reconcile::decided` reads it from the stored interrupt).
/// Only words of the interrupt's schema, its own option ids, a selected resource and the
/// names of parameter overrides ever reach the record: never free text or other values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decided {
    /// The answer did not reach the kernel: none of its values are kept.
    Refused(Refused),
    Cancelled,
    /// A permission's answer, a word of its schema's enum (`allow_once`, `deny`).
    Word(String),
    /// A deployment confirmation's action (a word of its schema's enum) and the names of
    /// its parameter overrides (never their values).
    Action {
        action: String,
        overrides: Vec<String>,
    },
    /// A question's option, by its id.
    Option(String),
    /// A cloud resource selection's chosen value.
    Resource(String),
    /// Free text (never kept).
    FreeText,
    /// Valid, of no shape above.
    Answered,
}

/// Why an answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Nothing pending under its id (never raised, or already answered).
    NotPending,
    /// Not valid against the stored interrupt's `responseSchema` (or no payload).
    Invalid,
    /// The interrupt's `expiresAt` has passed.
    Expired,
}

impl Refused {
    fn word(self) -> &'static str {
        match self {
            Refused::NotPending => "not_pending",
            Refused::Invalid => "invalid",
            Refused::Expired => "expired",
        }
    }
}

/// One answer as the record lists it: `id`, `kind`, `decision`, and what the decision names;
/// `room` is the number of override names the record may still list.
fn answered(a: &Answered, room: &mut usize) -> Value {
    let mut d = Map::new();
    d.insert("id".into(), bounded(&a.id).into());
    d.insert(
        "kind".into(),
        a.kind.as_deref().map_or("unknown".into(), bounded).into(),
    );
    let decision = match &a.decided {
        Decided::Refused(why) => {
            d.insert("reason".into(), why.word().into());
            "refused".to_string()
        }
        Decided::Cancelled => "cancelled".into(),
        Decided::Word(w) => bounded(w),
        Decided::Action { action, overrides } => {
            let names: Vec<Value> = overrides
                .iter()
                .take(*room)
                .map(|n| bounded(n).into())
                .collect();
            *room -= names.len();
            if overrides.len() > names.len() {
                d.insert(
                    "overridesOmitted".into(),
                    (overrides.len() - names.len()).into(),
                );
            }
            if !names.is_empty() {
                d.insert("overrides".into(), names.into());
            }
            bounded(action)
        }
        Decided::Option(id) => {
            d.insert("option".into(), bounded(id).into());
            "selected".into()
        }
        Decided::Resource(v) => {
            d.insert("resource".into(), bounded(v).into());
            "selected".into()
        }
        Decided::FreeText => "free_text".into(),
        Decided::Answered => "answered".into(),
    };
    d.insert("decision".into(), decision.into());
    Value::Object(d)
}

/// Why a decision could not be recorded (the request is then refused, nothing done).
#[derive(Debug)]
pub struct AuditUnavailable(pub(crate) std::io::Error);

impl std::fmt::Display for AuditUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the audit log cannot be written: {}", self.0)
    }
}

/// The server's audit log, or none (`--audit-log` not given): cheap to clone.
#[derive(Clone, Default)]
pub struct Audit(Option<Arc<AuditFile>>);

impl Audit {
    pub(crate) fn to(file: Arc<AuditFile>) -> Audit {
        Audit(Some(file))
    }

    /// Append the decision's record, fsync'd, before it is acknowledged. Off: `Ok` at once.
    pub(crate) fn write(
        &self,
        at: SystemTime,
        origin: &Origin,
        subject: &Subject<'_>,
        action: &Action,
    ) -> Result<(), AuditUnavailable> {
        let Some(file) = &self.0 else {
            return Ok(());
        };
        file.append(&record(at, origin, subject, action))
            .map_err(|e| {
                log::error!("audit log: {e}");
                AuditUnavailable(e)
            })
    }
}

#[cfg(test)]
mod tests;
