//! `RunAgentInput` envelope validation (reference §2.1, ag-ui-protocol 0.1.20 in pydantic lax
//! mode: camelCase or snake_case names, unknown keys allowed, no number→string coercion) and
//! the strict `forwardedProps.iacCode` schema (§2.2).

use serde_json::{Map, Number, Value};

use super::content::Skipped;
pub use super::field::{FieldError, Problem};
use crate::agui::dialect::Dialect;

mod messages;

type R<T> = Result<T, FieldError>;

/// A field by its camelCase alias or its snake_case name (the alias wins when both exist,
/// as with pydantic's `populate_by_name`).
fn field<'a>(o: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    o.get(camel).or_else(|| o.get(snake))
}

/// The `threadId` and `runId` strings of a body that may be invalid (empty when absent), for
/// a terminal event written after a failure; an id that is a string but not one the server
/// keeps (`field::id_ok`) is refused here, before anything holds it.
pub(crate) fn run_ids(body: &Value) -> Result<(String, String), FieldError> {
    let get = |camel: &str, snake: &str| {
        let id = body
            .as_object()
            .and_then(|o| field(o, camel, snake))
            .and_then(Value::as_str)
            .unwrap_or("");
        super::field::check_id(camel, id).map(|()| id.to_string())
    };
    Ok((get("threadId", "thread_id")?, get("runId", "run_id")?))
}

fn opt_str(o: &Map<String, Value>, camel: &str, snake: &str) -> R<Option<String>> {
    match field(o, camel, snake) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(FieldError::new(camel, Problem::Type("string"))),
    }
}

fn req_str(o: &Map<String, Value>, camel: &str, snake: &str) -> R<String> {
    match field(o, camel, snake) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Err(FieldError::new(camel, Problem::Required)),
        Some(_) => Err(FieldError::new(camel, Problem::Type("string"))),
    }
}

/// `v` as an object, or a type error at `path`.
fn object<'a>(v: &'a Value, path: &str) -> R<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| FieldError::new(path, Problem::Type("object")))
}

/// `resume[]` entry status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumeStatus {
    Resolved,
    Cancelled,
}

impl ResumeStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ResumeStatus::Resolved => "resolved",
            ResumeStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) status: ResumeStatus,
    /// `None` when absent or `null` (the same for the digest).
    pub(crate) payload: Option<Value>,
}

/// The parts of a valid envelope the adapter uses.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInput {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    pub(crate) parent_run_id: Option<String>,
    pub messages: Vec<Value>,
    pub(crate) tools_len: usize,
    pub forwarded_props: Value,
    /// Present and not null (including `[]`) means "this is a resume".
    pub(crate) resume: Option<Vec<ResumeEntry>>,
    /// AG-UI 1.0 mode: messages and parts of a kind this server does not know, left out of
    /// `messages` (or of what reaches the kernel) and reported to the client.
    pub skipped: Vec<Skipped>,
    /// `context[]` as (description, value).
    pub(crate) context: Vec<(String, String)>,
}

/// The envelope keys `envelope` reads, in both spellings (and `protocolVersion`, which
/// chooses the request's dialect: `dialect::Declared`).
const ENVELOPE_KEYS: &[&str] = &[
    "threadId",
    "thread_id",
    "runId",
    "run_id",
    "parentRunId",
    "parent_run_id",
    "state",
    "messages",
    "tools",
    "context",
    "forwardedProps",
    "forwarded_props",
    "resume",
    "protocolVersion",
    "protocol_version",
];

/// The body's top-level keys that the envelope does not read.
pub(crate) fn unread_fields(body: &Value) -> impl Iterator<Item = &str> {
    body.as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .map(String::as_str)
        .filter(|k| !ENVELOPE_KEYS.contains(k))
}

/// Validate the envelope by the reference's rules (0.1 mode); the error names the field (the
/// 400 `INVALID_INPUT` message).
pub fn parse_envelope(body: &Value) -> Result<RunInput, FieldError> {
    envelope(body, &Dialect::V0_1)
}

/// Validate the envelope by the rules of `dialect`.
pub fn parse_envelope_as(body: &Value, dialect: &Dialect) -> Result<RunInput, FieldError> {
    envelope(body, dialect)
}

fn envelope(body: &Value, dialect: &Dialect) -> R<RunInput> {
    let o = object(body, "")?;
    let thread_id = req_str(o, "threadId", "thread_id")?;
    // REC (D8): an empty thread id is an envelope error, not a state error.
    if thread_id.is_empty() {
        return Err(FieldError::new("threadId", Problem::Required));
    }
    super::field::check_id("threadId", &thread_id)?;
    let run_id = req_str(o, "runId", "run_id")?;
    super::field::check_id("runId", &run_id)?;
    let parent_run_id = opt_str(o, "parentRunId", "parent_run_id")?;
    if let Some(p) = &parent_run_id {
        super::field::check_id("parentRunId", p)?;
    }
    // AG-UI 1.0 makes `state`, `tools` and `context` optional and its SDKs omit them when
    // empty: absent means empty (the reference rejects it; docs/protocol.md). Present, they
    // are checked as before.
    let messages = match field(o, "messages", "messages") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => return Err(FieldError::new("messages", Problem::Required)),
        Some(_) => return Err(FieldError::new("messages", Problem::Type("array"))),
    };
    let mut rules = messages::Rules::new(dialect);
    let mut kept = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if rules
            .message(m)
            .map_err(|e| e.within(&format!("messages[{i}]")))?
        {
            kept.push(m.clone());
        }
    }
    let no_list = Vec::new();
    let list = |key: &str| -> R<&Vec<Value>> {
        match field(o, key, key) {
            None => Ok(&no_list),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(FieldError::new(key, Problem::Type("array"))),
        }
    };
    let tools = list("tools")?;
    strings_in_each(tools, "tools", ["name", "description"])?;
    let context = list("context")?;
    strings_in_each(context, "context", ["description", "value"])?;
    let context = context
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("description"), s("value"))
        })
        .collect();
    // Optional in AG-UI 1.0 (its SDKs omit it when unset): absent is `{}`, which then needs
    // the server's --default-cwd (or names `forwardedProps.iacCode` as required).
    let forwarded_props = field(o, "forwardedProps", "forwarded_props")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let resume = match field(o, "resume", "resume") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .enumerate()
                .map(|(i, e)| parse_resume_entry(e).map_err(|x| x.within(&format!("resume[{i}]"))))
                .collect::<R<_>>()?,
        ),
        Some(_) => return Err(FieldError::new("resume", Problem::Type("array"))),
    };
    Ok(RunInput {
        thread_id,
        run_id,
        parent_run_id,
        messages: kept,
        tools_len: tools.len(),
        forwarded_props,
        resume,
        skipped: rules.skipped,
        context,
    })
}

/// Every element of list `name` is an object with the string fields `keys`.
fn strings_in_each(list: &[Value], name: &str, keys: [&str; 2]) -> R<()> {
    for (i, v) in list.iter().enumerate() {
        let at = format!("{name}[{i}]");
        let o = object(v, &at)?;
        for k in keys {
            req_str(o, k, k).map_err(|e| e.within(&at))?;
        }
    }
    Ok(())
}

fn parse_resume_entry(v: &Value) -> R<ResumeEntry> {
    let o = object(v, "")?;
    let interrupt_id = req_str(o, "interruptId", "interrupt_id")?;
    let status = match field(o, "status", "status") {
        Some(Value::String(s)) if s == "resolved" => ResumeStatus::Resolved,
        Some(Value::String(s)) if s == "cancelled" => ResumeStatus::Cancelled,
        None | Some(Value::Null) => return Err(FieldError::new("status", Problem::Required)),
        Some(_) => return Err(FieldError::new("status", Problem::Value)),
    };
    let payload = match o.get("payload") {
        None | Some(Value::Null) => None,
        Some(p) => Some(p.clone()),
    };
    Ok(ResumeEntry {
        interrupt_id,
        status,
        payload,
    })
}

/// `forwardedProps.iacCode.thinking`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Thinking {
    pub(crate) enabled: bool,
    pub(crate) effort: Option<String>,
    /// A positive JSON integer of any size, kept as written.
    pub(crate) budget: Option<Number>,
}

/// `forwardedProps.iacCode.alibabaCloud`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct AlibabaCloud {
    pub(crate) access_key_id: Option<String>,
    pub(crate) access_key_secret: Option<String>,
    pub(crate) security_token: Option<String>,
    pub(crate) region_id: Option<String>,
}

/// The validated iac-code extension. Secrets live here only for the request's lifetime.
#[derive(Debug, Clone, PartialEq)]
pub struct IacProps {
    pub(crate) ros_invocation_id: String,
    pub(crate) cwd: String,
    pub(crate) user_id: Option<String>,
    pub(crate) preferred_language: Option<String>,
    pub(crate) run_mode: Option<String>,
    pub(crate) cleanup_only: bool,
    pub(crate) active_guidance: bool,
    /// What most requests leave out, allocated only when one of it is given: a run holds its
    /// properties for its stream's whole life, and eight empty options were ~300 B of each
    /// open stream (docs/performance.md, issue 26).
    pub(crate) rare: Option<Box<RareProps>>,
}

/// The properties of [`IacProps`] that most requests leave out.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RareProps {
    pub(crate) model: Option<String>,
    pub(crate) llm_api_key: Option<String>,
    /// `Some` exactly when the request had the key (`{}` means "clear").
    pub(crate) llm_headers: Option<Map<String, Value>>,
    pub(crate) thinking: Option<Thinking>,
    pub(crate) channel: Option<String>,
    pub(crate) candidate_presentation: Option<String>,
    pub(crate) pipeline_name: Option<String>,
    pub(crate) alibaba_cloud: Option<AlibabaCloud>,
    /// The front end can answer cloud resource selections (issue 47): sent to the kernel as
    /// `iac_code.capabilities.resourceSelector`, without which it never raises one.
    pub(crate) resource_selector: Option<ResourceSelector>,
}

/// A front end's resource-selector capability, as the kernel's `request_capability` reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceSelector {
    pub(crate) query_mode: String,
    pub(crate) profile_hash: String,
}

/// Strict lookup: a key under its alias or its name, never both; records consumed keys.
struct Strict<'a> {
    o: &'a Map<String, Value>,
    seen: Vec<String>,
}

impl<'a> Strict<'a> {
    /// A strict object whose `schemaVersion` is 1 (REC: the integer 1, and 1.0; never `true`).
    fn schema_v1(o: &'a Map<String, Value>) -> R<Strict<'a>> {
        let mut s = Strict {
            o,
            seen: Vec::new(),
        };
        match s.get("schemaVersion", "schema_version")? {
            Some(Value::Number(n)) if n.as_f64() == Some(1.0) => Ok(s),
            None | Some(Value::Null) => Err(FieldError::new("schemaVersion", Problem::Required)),
            Some(_) => Err(FieldError::new("schemaVersion", Problem::Value)),
        }
    }

    fn get(&mut self, alias: &str, name: &str) -> R<Option<&'a Value>> {
        let a = self.o.get(alias);
        let n = if alias == name {
            None
        } else {
            self.o.get(name)
        };
        match (a, n) {
            (Some(_), Some(_)) => Err(FieldError::new(alias, Problem::Duplicate)),
            (Some(v), None) | (None, Some(v)) => {
                self.seen
                    .push(if a.is_some() { alias } else { name }.to_string());
                Ok(Some(v))
            }
            (None, None) => Ok(None),
        }
    }

    fn opt_str(&mut self, alias: &str, name: &str) -> R<Option<String>> {
        match self.get(alias, name)? {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(FieldError::new(alias, Problem::Type("string"))),
        }
    }

    fn bool_default_false(&mut self, alias: &str, name: &str) -> R<bool> {
        match self.get(alias, name)? {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(FieldError::new(alias, Problem::Type("boolean"))),
        }
    }

    /// Every key of the object was consumed (strict `extra="forbid"`); else the first one
    /// that was not is named.
    fn finish(self) -> R<()> {
        match self.o.keys().find(|k| !self.seen.iter().any(|s| s == *k)) {
            None => Ok(()),
            Some(k) => Err(FieldError::new(k, Problem::Unknown)),
        }
    }
}

/// Validate `forwardedProps`; the error names the field (paths from `forwardedProps`).
pub fn parse_iac_props(forwarded: &Value) -> Result<IacProps, FieldError> {
    let fp = object(forwarded, "forwardedProps")?;
    let iac = match fp.get("iacCode").or_else(|| fp.get("iac_code")) {
        Some(v) => v,
        None => {
            return Err(FieldError::new(
                "forwardedProps.iacCode",
                Problem::IacCodeRequired,
            ));
        }
    };
    if let Some(k) = fp.keys().find(|k| *k != "iacCode" && *k != "iac_code") {
        return Err(FieldError::new(k, Problem::Unknown).within("forwardedProps"));
    }
    if fp.len() != 1 {
        return Err(FieldError::new(
            "forwardedProps.iacCode",
            Problem::Duplicate,
        ));
    }
    let iac = object(iac, "").map_err(|e| e.within("forwardedProps.iacCode"))?;
    iac_props(iac).map_err(|e| e.within("forwardedProps.iacCode"))
}

fn iac_props(iac: &Map<String, Value>) -> R<IacProps> {
    let mut s = Strict::schema_v1(iac)?;
    let ros_invocation_id = s
        .opt_str("rosInvocationId", "ros_invocation_id")?
        .ok_or_else(|| FieldError::new("rosInvocationId", Problem::Required))?;
    let n = ros_invocation_id.chars().count();
    if !(1..=256).contains(&n) {
        return Err(FieldError::new("rosInvocationId", Problem::Value));
    }
    let cwd = s
        .opt_str("cwd", "cwd")?
        .ok_or_else(|| FieldError::new("cwd", Problem::CwdRequired))?;
    let model = s.opt_str("model", "model")?;
    let llm_api_key = s.opt_str("llmApiKey", "llm_api_key")?;
    let llm_headers = match s.get("llmHeaders", "llm_headers")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => {
            if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                return Err(FieldError::new(k, Problem::Type("string")).within("llmHeaders"));
            }
            Some(m.clone())
        }
        Some(_) => return Err(FieldError::new("llmHeaders", Problem::Type("object"))),
    };
    let thinking = match s.get("thinking", "thinking")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => Some(parse_thinking(t).map_err(|e| e.within("thinking"))?),
        Some(_) => return Err(FieldError::new("thinking", Problem::Type("object"))),
    };
    let user_id = s.opt_str("userId", "user_id")?;
    let channel = s.opt_str("channel", "channel")?;
    let preferred_language = s.opt_str("preferredLanguage", "preferred_language")?;
    let candidate_presentation = s.opt_str("candidatePresentation", "candidate_presentation")?;
    if !matches!(
        candidate_presentation.as_deref(),
        None | Some("standard" | "rich")
    ) {
        return Err(FieldError::new("candidatePresentation", Problem::Value));
    }
    let run_mode = s.opt_str("runMode", "run_mode")?;
    if !matches!(run_mode.as_deref(), None | Some("normal" | "pipeline")) {
        return Err(FieldError::new("runMode", Problem::Value));
    }
    let pipeline_name = s.opt_str("pipelineName", "pipeline_name")?;
    let cleanup_only = s.bool_default_false("cleanupOnly", "cleanup_only")?;
    let active_guidance = s.bool_default_false("activeGuidance", "active_guidance")?;
    let alibaba_cloud = match s.get("alibabaCloud", "alibaba_cloud")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => Some(parse_alibaba(a).map_err(|e| e.within("alibabaCloud"))?),
        Some(_) => return Err(FieldError::new("alibabaCloud", Problem::Type("object"))),
    };
    let resource_selector = match s.get("resourceSelector", "resource_selector")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(r)) => {
            Some(parse_resource_selector(r).map_err(|e| e.within("resourceSelector"))?)
        }
        Some(_) => return Err(FieldError::new("resourceSelector", Problem::Type("object"))),
    };
    s.finish()?;
    let rare = RareProps {
        model,
        llm_api_key,
        llm_headers,
        thinking,
        channel,
        candidate_presentation,
        pipeline_name,
        alibaba_cloud,
        resource_selector,
    };
    Ok(IacProps {
        ros_invocation_id,
        cwd,
        user_id,
        preferred_language,
        run_mode,
        cleanup_only,
        active_guidance,
        rare: (rare != RareProps::default()).then(|| Box::new(rare)),
    })
}

fn parse_resource_selector(r: &Map<String, Value>) -> R<ResourceSelector> {
    let mut s = Strict::schema_v1(r)?;
    let mut required = |alias: &str, name: &str| -> R<String> {
        s.opt_str(alias, name)?
            .filter(|v| !v.is_empty())
            .ok_or_else(|| FieldError::new(alias, Problem::Required))
    };
    let query_mode = required("queryMode", "query_mode")?;
    let profile_hash = required("profileHash", "profile_hash")?;
    s.finish()?;
    Ok(ResourceSelector {
        query_mode,
        profile_hash,
    })
}

fn parse_alibaba(a: &Map<String, Value>) -> R<AlibabaCloud> {
    let mut s = Strict {
        o: a,
        seen: Vec::new(),
    };
    let c = AlibabaCloud {
        access_key_id: s.opt_str("accessKeyId", "access_key_id")?,
        access_key_secret: s.opt_str("accessKeySecret", "access_key_secret")?,
        security_token: s.opt_str("securityToken", "security_token")?,
        region_id: s.opt_str("regionId", "region_id")?,
    };
    s.finish()?;
    Ok(c)
}

fn parse_thinking(t: &Map<String, Value>) -> R<Thinking> {
    let mut s = Strict {
        o: t,
        seen: Vec::new(),
    };
    let enabled = s.bool_default_false("enabled", "enabled")?;
    let effort = s.opt_str("effort", "effort")?;
    let budget = match s.get("budget", "budget")? {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => {
            let text = n.to_string();
            let digits = text.strip_prefix('-').unwrap_or(&text);
            // Strict int: no fraction or exponent; positive; no upper bound.
            if !digits.bytes().all(|b| b.is_ascii_digit())
                || text.starts_with('-')
                || digits.bytes().all(|b| b == b'0')
            {
                return Err(FieldError::new("budget", Problem::Value));
            }
            Some(n.clone())
        }
        Some(_) => return Err(FieldError::new("budget", Problem::Type("integer"))),
    };
    s.finish()?;
    Ok(Thinking {
        enabled,
        effort,
        budget,
    })
}

#[cfg(test)]
mod tests;
