//! `RunAgentInput` envelope validation (reference §2.1, ag-ui-protocol 0.1.20 in pydantic lax
//! mode: camelCase or snake_case names, unknown keys allowed, no number→string coercion) and
//! the strict `forwardedProps.iacCode` schema (§2.2).

use serde_json::{Map, Number, Value};

pub use super::field::{FieldError, Problem};

type R<T> = Result<T, FieldError>;

/// A field by its camelCase alias or its snake_case name (the alias wins when both exist,
/// as with pydantic's `populate_by_name`).
fn field<'a>(o: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    o.get(camel).or_else(|| o.get(snake))
}

/// The `threadId` and `runId` strings of a body that may be invalid (empty when absent), for
/// a terminal event written after a failure.
pub(crate) fn run_ids(body: &Value) -> (String, String) {
    let get = |camel: &str, snake: &str| {
        body.as_object()
            .and_then(|o| field(o, camel, snake))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (get("threadId", "thread_id"), get("runId", "run_id"))
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
}

/// Validate the envelope; the error names the field (the 400 `INVALID_INPUT` message).
pub fn parse_envelope(body: &Value) -> Result<RunInput, FieldError> {
    envelope(body)
}

fn envelope(body: &Value) -> R<RunInput> {
    let o = object(body, "")?;
    let thread_id = req_str(o, "threadId", "thread_id")?;
    // REC (D8): an empty thread id is an envelope error, not a state error.
    if thread_id.is_empty() {
        return Err(FieldError::new("threadId", Problem::Required));
    }
    let run_id = req_str(o, "runId", "run_id")?;
    let parent_run_id = opt_str(o, "parentRunId", "parent_run_id")?;
    // AG-UI 1.0 makes `state`, `tools` and `context` optional and its SDKs omit them when
    // empty: absent means empty (the reference rejects it; docs/protocol.md). Present, they
    // are checked as before.
    let messages = match field(o, "messages", "messages") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => return Err(FieldError::new("messages", Problem::Required)),
        Some(_) => return Err(FieldError::new("messages", Problem::Type("array"))),
    };
    for (i, m) in messages.iter().enumerate() {
        check_message(m).map_err(|e| e.within(&format!("messages[{i}]")))?;
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
        messages: messages.clone(),
        tools_len: tools.len(),
        forwarded_props,
        resume,
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

fn check_common(o: &Map<String, Value>) -> R<()> {
    req_str(o, "id", "id")?;
    opt_str(o, "name", "name")?;
    opt_str(o, "encryptedValue", "encrypted_value")?;
    Ok(())
}

fn check_message(m: &Value) -> R<()> {
    let o = object(m, "")?;
    match o.get("role").and_then(Value::as_str) {
        Some("developer" | "system" | "reasoning") => {
            check_common(o)?;
            req_str(o, "content", "content")?;
        }
        Some("assistant") => {
            check_common(o)?;
            opt_str(o, "content", "content")?;
            match field(o, "toolCalls", "tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for (i, c) in calls.iter().enumerate() {
                        let at = format!("toolCalls[{i}]");
                        check_tool_call(c).map_err(|e| e.within(&at))?;
                    }
                }
                Some(_) => return Err(FieldError::new("toolCalls", Problem::Type("array"))),
            }
        }
        Some("user") => {
            check_common(o)?;
            match o.get("content") {
                Some(Value::String(_)) => {}
                Some(Value::Array(parts)) => {
                    for (i, p) in parts.iter().enumerate() {
                        check_content(p).map_err(|e| e.within(&format!("content[{i}]")))?;
                    }
                }
                None | Some(Value::Null) => {
                    return Err(FieldError::new("content", Problem::Required));
                }
                Some(_) => {
                    return Err(FieldError::new("content", Problem::Type("string or array")));
                }
            }
        }
        Some("tool") => {
            check_common(o)?;
            req_str(o, "content", "content")?;
            req_str(o, "toolCallId", "tool_call_id")?;
            opt_str(o, "error", "error")?;
        }
        Some("activity") => {
            req_str(o, "id", "id")?;
            req_str(o, "activityType", "activity_type")?;
            if !o.get("content").is_some_and(Value::is_object) {
                return Err(FieldError::new("content", Problem::Type("object")));
            }
        }
        None => return Err(FieldError::new("role", Problem::Required)),
        Some(_) => return Err(FieldError::new("role", Problem::Value)),
    }
    Ok(())
}

fn check_tool_call(c: &Value) -> R<()> {
    let c = object(c, "")?;
    req_str(c, "id", "id")?;
    if c.get("type").and_then(Value::as_str) != Some("function") {
        return Err(FieldError::new("type", Problem::Value));
    }
    let f = c
        .get("function")
        .ok_or_else(|| FieldError::new("function", Problem::Required))
        .and_then(|f| object(f, "function"))?;
    (|| -> R<()> {
        req_str(f, "name", "name")?;
        req_str(f, "arguments", "arguments")?;
        Ok(())
    })()
    .map_err(|e| e.within("function"))?;
    opt_str(c, "encryptedValue", "encrypted_value")?;
    Ok(())
}

fn check_content(p: &Value) -> R<()> {
    let o = object(p, "")?;
    match o.get("type").and_then(Value::as_str) {
        Some("text") => {
            req_str(o, "text", "text")?;
        }
        Some("image" | "audio" | "video" | "document") => {
            let src = o
                .get("source")
                .ok_or_else(|| FieldError::new("source", Problem::Required))
                .and_then(|s| object(s, "source"))?;
            (|| -> R<()> {
                req_str(src, "value", "value")?;
                match src.get("type").and_then(Value::as_str) {
                    Some("data") => {
                        req_str(src, "mimeType", "mime_type")?;
                    }
                    Some("url") => {
                        opt_str(src, "mimeType", "mime_type")?;
                    }
                    None => return Err(FieldError::new("type", Problem::Required)),
                    Some(_) => return Err(FieldError::new("type", Problem::Value)),
                }
                Ok(())
            })()
            .map_err(|e| e.within("source"))?;
        }
        Some("binary") => {
            req_str(o, "mimeType", "mime_type")?;
            let mut any = false;
            for k in ["id", "url", "data"] {
                if opt_str(o, k, k)?.is_some() {
                    any = true;
                }
            }
            opt_str(o, "filename", "filename")?;
            if !any {
                return Err(FieldError::new("url", Problem::Required));
            }
        }
        None => return Err(FieldError::new("type", Problem::Required)),
        Some(_) => return Err(FieldError::new("type", Problem::Value)),
    }
    Ok(())
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
    pub(crate) model: Option<String>,
    pub(crate) llm_api_key: Option<String>,
    /// `Some` exactly when the request had the key (`{}` means "clear").
    pub(crate) llm_headers: Option<Map<String, Value>>,
    pub(crate) thinking: Option<Thinking>,
    pub(crate) user_id: Option<String>,
    pub(crate) channel: Option<String>,
    pub(crate) preferred_language: Option<String>,
    pub(crate) candidate_presentation: Option<String>,
    pub(crate) run_mode: Option<String>,
    pub(crate) pipeline_name: Option<String>,
    pub(crate) cleanup_only: bool,
    pub(crate) active_guidance: bool,
    pub(crate) alibaba_cloud: Option<AlibabaCloud>,
}

/// Strict lookup: a key under its alias or its name, never both; records consumed keys.
struct Strict<'a> {
    o: &'a Map<String, Value>,
    seen: Vec<String>,
}

impl<'a> Strict<'a> {
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
    let mut s = Strict {
        o: iac,
        seen: Vec::new(),
    };
    match s.get("schemaVersion", "schema_version")? {
        // REC: the integer 1 (and 1.0); never `true`.
        Some(Value::Number(n)) if n.as_f64() == Some(1.0) => {}
        None | Some(Value::Null) => {
            return Err(FieldError::new("schemaVersion", Problem::Required));
        }
        Some(_) => return Err(FieldError::new("schemaVersion", Problem::Value)),
    }
    let ros_invocation_id = s
        .opt_str("rosInvocationId", "ros_invocation_id")?
        .ok_or_else(|| FieldError::new("rosInvocationId", Problem::Required))?;
    let n = ros_invocation_id.chars().count();
    if !(1..=256).contains(&n) {
        return Err(FieldError::new("rosInvocationId", Problem::Value));
    }
    let cwd = s
        .opt_str("cwd", "cwd")?
        .ok_or_else(|| FieldError::new("cwd", Problem::Required))?;
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
    s.finish()?;
    Ok(IacProps {
        ros_invocation_id,
        cwd,
        model,
        llm_api_key,
        llm_headers,
        thinking,
        user_id,
        channel,
        preferred_language,
        candidate_presentation,
        run_mode,
        pipeline_name,
        cleanup_only,
        active_guidance,
        alibaba_cloud,
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
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"threadId":"t","runId":"r","state":{},"messages":[{"id":"m","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"ros","cwd":"/tmp"}}})
    }

    fn with(mut v: Value, f: impl FnOnce(&mut Map<String, Value>)) -> Value {
        f(v.as_object_mut().unwrap());
        v
    }

    #[test]
    fn envelope_rules() {
        assert!(parse_envelope(&base()).is_ok());
        let bad = [
            with(base(), |o| {
                o.insert("tools".into(), json!({}));
            }),
            with(base(), |o| {
                o.insert("context".into(), json!("x"));
            }),
            with(base(), |o| {
                o.insert("threadId".into(), json!(5));
            }),
            with(base(), |o| {
                o.insert("threadId".into(), json!(""));
            }),
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id":"m","content":"x"}]));
            }),
            with(base(), |o| {
                o.insert(
                    "messages".into(),
                    json!([{"id":"m","role":"user","content":5}]),
                );
            }),
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id":"m","role":"user","content":[{"type":"image","source":{"type":"data","value":"x"}}]}]));
            }),
            with(base(), |o| {
                o.insert(
                    "resume".into(),
                    json!([{"interruptId":"i","status":"maybe"}]),
                );
            }),
            with(base(), |o| {
                o.insert("tools".into(), json!([{"name":"x"}]));
            }),
        ];
        for b in bad {
            assert!(parse_envelope(&b).is_err(), "{b}");
        }
        let ok = [
            with(base(), |o| {
                o.insert("state".into(), Value::Null);
            }),
            // AG-UI 1.0 SDKs omit empty state, tools and context.
            with(base(), |o| {
                o.remove("state");
                o.remove("tools");
                o.remove("context");
            }),
            with(base(), |o| {
                let t = o.remove("threadId").unwrap();
                o.insert("thread_id".into(), t);
                o.insert("foo".into(), json!(1));
            }),
            with(base(), |o| {
                o.insert("runId".into(), json!(""));
            }),
            with(base(), |o| {
                o.insert("messages".into(), json!([{"id":"a","role":"assistant","content":null,"toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"id":"b","role":"tool","content":"x","tool_call_id":"c"},{"id":"c","role":"activity","activityType":"x","content":{}},{"id":"d","role":"user","content":[{"type":"binary","mimeType":"a/b","url":"u"},{"type":"audio","source":{"type":"url","value":"u"}}]}]));
            }),
        ];
        for b in ok {
            assert!(parse_envelope(&b).is_ok(), "{b}");
        }
        let r = parse_envelope(&with(base(), |o| {
            o.insert("resume".into(), json!([]));
        }))
        .unwrap();
        assert_eq!(r.resume, Some(vec![]));
        let r = parse_envelope(&with(base(), |o| {
            o.insert("resume".into(), Value::Null);
        }))
        .unwrap();
        assert_eq!(r.resume, None);
    }

    fn props(iac: Value) -> Result<IacProps, FieldError> {
        parse_iac_props(&json!({"iacCode": iac}))
    }

    #[test]
    fn forwarded_props_rules() {
        let ok = json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/tmp"});
        assert!(props(ok.clone()).is_ok());
        assert!(parse_iac_props(&json!({"iac_code":{"schema_version":1,"ros_invocation_id":"r","cwd":"/w","llm_headers":{"a":"b"}}})).is_ok());
        assert!(parse_iac_props(&json!({"iacCode":ok.clone(),"other":1})).is_err());
        assert!(parse_iac_props(&Value::Null).is_err());
        assert!(parse_iac_props(&json!({})).is_err());
        let emoji = "😀".repeat(256);
        let mut cases_ok = vec![
            json!({"schemaVersion":1.0,"rosInvocationId":"r","cwd":"/w"}),
            json!({"schemaVersion":1,"rosInvocationId":emoji,"cwd":"/w"}),
            json!({"schemaVersion":1,"rosInvocationId":"x".repeat(256),"cwd":"/w"}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"enabled":true,"effort":"high","budget":123456789012345678901234567890u128.to_string().parse::<Value>().unwrap()}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","activeGuidance":true,"runMode":"pipeline","llmHeaders":{}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","alibabaCloud":{"accessKeyId":"a","access_key_secret":"s","securityToken":null}}),
        ];
        for c in cases_ok.drain(..) {
            assert!(props(c.clone()).is_ok(), "{c}");
        }
        let bad = [
            json!({"schemaVersion":"1","rosInvocationId":"r","cwd":"/w"}),
            json!({"schemaVersion":2,"rosInvocationId":"r","cwd":"/w"}),
            json!({"schemaVersion":true,"rosInvocationId":"r","cwd":"/w"}),
            json!({"rosInvocationId":"r","cwd":"/w"}),
            json!({"schemaVersion":1,"schema_version":1,"rosInvocationId":"r","cwd":"/w"}),
            json!({"schemaVersion":1,"rosInvocationId":"","cwd":"/w"}),
            json!({"schemaVersion":1,"rosInvocationId":"x".repeat(257),"cwd":"/w"}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"budget":0}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"budget":5.0}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"enabled":1}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"enabled":null}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","thinking":{"x":1}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","cleanupOnly":null}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","llmHeaders":{"a":1}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","expiresAt":"x"}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","runMode":"fast"}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","candidatePresentation":"fancy"}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","alibabaCloud":{"x":"y"}}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":5}),
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","userId":7}),
        ];
        for c in bad {
            assert!(props(c.clone()).is_err(), "{c}");
        }
        let p = props(
            json!({"schemaVersion":1,"rosInvocationId":"r","cwd":"/w","preferred_language":"ja"}),
        )
        .unwrap();
        assert_eq!(p.preferred_language.as_deref(), Some("ja"));
    }

    #[test]
    fn every_validation_failure_names_its_field_in_every_language() {
        use crate::i18n::Lang;
        let iac = |f: fn(&mut Map<String, Value>)| {
            with(base(), |o| {
                f(o["forwardedProps"]["iacCode"].as_object_mut().unwrap())
            })
        };
        // (body, the path the message must name)
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "body"),
            (
                with(base(), |o| {
                    o.remove("threadId");
                }),
                "threadId",
            ),
            (
                with(base(), |o| {
                    o.insert("threadId".into(), json!(5));
                }),
                "threadId",
            ),
            (
                with(base(), |o| {
                    o.remove("runId");
                }),
                "runId",
            ),
            (
                with(base(), |o| {
                    o.insert("parentRunId".into(), json!(1));
                }),
                "parentRunId",
            ),
            (
                with(base(), |o| {
                    o.remove("messages");
                }),
                "messages",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!({}));
                }),
                "messages",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!([5]));
                }),
                "messages[0]",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!([{"id": "m", "content": "x"}]));
                }),
                "messages[0].role",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!([{"id": "m", "role": "user"}]));
                }),
                "messages[0].content",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!([{"role": "user", "content": "x"}]));
                }),
                "messages[0].id",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!([{"id": "m", "role": "user", "content": [{"type": "image", "source": {"type": "data", "value": "x"}}]}]));
                }),
                "messages[0].content[0].source.mimeType",
            ),
            (
                with(base(), |o| {
                    o.insert("messages".into(), json!([{"id": "a", "role": "assistant", "toolCalls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}]));
                }),
                "messages[0].toolCalls[0].function.arguments",
            ),
            (
                with(base(), |o| {
                    o.insert("tools".into(), json!([{"name": "x"}]));
                }),
                "tools[0].description",
            ),
            (
                with(base(), |o| {
                    o.insert("context".into(), json!([{"value": "x"}]));
                }),
                "context[0].description",
            ),
            (
                with(base(), |o| {
                    o.insert("resume".into(), json!({}));
                }),
                "resume",
            ),
            (
                with(base(), |o| {
                    o.insert(
                        "resume".into(),
                        json!([{"interruptId": "i", "status": "maybe"}]),
                    );
                }),
                "resume[0].status",
            ),
            (
                with(base(), |o| {
                    o.insert("resume".into(), json!([{"status": "resolved"}]));
                }),
                "resume[0].interruptId",
            ),
        ];
        let iac_cases: Vec<(Value, &str)> = vec![
            (
                with(base(), |o| {
                    o.insert("forwardedProps".into(), json!({}));
                }),
                "forwardedProps.iacCode",
            ),
            (
                with(base(), |o| {
                    o.remove("forwardedProps");
                }),
                "forwardedProps.iacCode",
            ),
            (
                with(base(), |o| {
                    o.insert("forwardedProps".into(), json!([]));
                }),
                "forwardedProps",
            ),
            (
                with(base(), |o| {
                    o["forwardedProps"]["other"] = json!(1);
                }),
                "forwardedProps.other",
            ),
            (
                with(base(), |o| {
                    o.insert("forwardedProps".into(), json!({"iacCode": 5}));
                }),
                "forwardedProps.iacCode",
            ),
            (
                iac(|o| {
                    o.remove("schemaVersion");
                }),
                "forwardedProps.iacCode.schemaVersion",
            ),
            (
                iac(|o| {
                    o.insert("schemaVersion".into(), json!(true));
                }),
                "forwardedProps.iacCode.schemaVersion",
            ),
            (
                iac(|o| {
                    o.remove("rosInvocationId");
                }),
                "forwardedProps.iacCode.rosInvocationId",
            ),
            (
                iac(|o| {
                    o.insert("rosInvocationId".into(), json!(""));
                }),
                "forwardedProps.iacCode.rosInvocationId",
            ),
            (
                iac(|o| {
                    o.remove("cwd");
                }),
                "forwardedProps.iacCode.cwd",
            ),
            (
                iac(|o| {
                    o.insert("cwd".into(), json!(1));
                }),
                "forwardedProps.iacCode.cwd",
            ),
            (
                iac(|o| {
                    o.insert("colour".into(), json!("red"));
                }),
                "forwardedProps.iacCode.colour",
            ),
            (
                iac(|o| {
                    o.insert("run_mode".into(), json!("x"));
                    o.insert("runMode".into(), json!("x"));
                }),
                "forwardedProps.iacCode.runMode",
            ),
            (
                iac(|o| {
                    o.insert("runMode".into(), json!("fast"));
                }),
                "forwardedProps.iacCode.runMode",
            ),
            (
                iac(|o| {
                    o.insert("candidatePresentation".into(), json!("x"));
                }),
                "forwardedProps.iacCode.candidatePresentation",
            ),
            (
                iac(|o| {
                    o.insert("llmHeaders".into(), json!({"a": 1}));
                }),
                "forwardedProps.iacCode.llmHeaders.a",
            ),
            (
                iac(|o| {
                    o.insert("thinking".into(), json!({"budget": 0}));
                }),
                "forwardedProps.iacCode.thinking.budget",
            ),
            (
                iac(|o| {
                    o.insert("thinking".into(), json!({"enabled": 1}));
                }),
                "forwardedProps.iacCode.thinking.enabled",
            ),
            (
                iac(|o| {
                    o.insert("thinking".into(), json!({"x": 1}));
                }),
                "forwardedProps.iacCode.thinking.x",
            ),
            (
                iac(|o| {
                    o.insert("alibabaCloud".into(), json!({"region": "x"}));
                }),
                "forwardedProps.iacCode.alibabaCloud.region",
            ),
            (
                iac(|o| {
                    o.insert("cleanupOnly".into(), json!("yes"));
                }),
                "forwardedProps.iacCode.cleanupOnly",
            ),
        ];
        let check = |e: FieldError, want: &str, body: &Value| {
            assert_eq!(
                e.path.replace("body", ""),
                want.replace("body", ""),
                "{body}"
            );
            for lang in Lang::ALL {
                let m = e.message(lang);
                assert!(m.contains(&format!("`{want}`")), "{lang:?}: {m} ({body})");
            }
        };
        for (body, want) in cases {
            check(parse_envelope(&body).unwrap_err(), want, &body);
        }
        for (body, want) in iac_cases {
            let inp = parse_envelope(&body).unwrap();
            check(
                parse_iac_props(&inp.forwarded_props).unwrap_err(),
                want,
                &body,
            );
        }
    }
}
