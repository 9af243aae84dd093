//! `RunAgentInput` envelope validation (reference §2.1, ag-ui-protocol 0.1.20 in pydantic lax
//! mode: camelCase or snake_case names, unknown keys allowed, no number→string coercion) and
//! the strict `forwardedProps.iacCode` schema (§2.2).

use serde_json::{Map, Number, Value};

/// The input does not have the required shape (the caller picks the 400 message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

impl From<()> for Invalid {
    fn from(_: ()) -> Invalid {
        Invalid
    }
}

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

fn opt_str(o: &Map<String, Value>, camel: &str, snake: &str) -> Result<Option<String>, ()> {
    match field(o, camel, snake) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

fn req_str(o: &Map<String, Value>, camel: &str, snake: &str) -> Result<String, ()> {
    match field(o, camel, snake) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(()),
    }
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

/// Validate the envelope. `Err(())` is the generic "invalid envelope" 400.
pub fn parse_envelope(body: &Value) -> Result<RunInput, Invalid> {
    Ok(envelope(body)?)
}

fn envelope(body: &Value) -> Result<RunInput, ()> {
    let o = body.as_object().ok_or(())?;
    let thread_id = req_str(o, "threadId", "thread_id")?;
    // REC (D8): an empty thread id is an envelope error, not a state error.
    if thread_id.is_empty() {
        return Err(());
    }
    let run_id = req_str(o, "runId", "run_id")?;
    let parent_run_id = opt_str(o, "parentRunId", "parent_run_id")?;
    // AG-UI 1.0 makes `state`, `tools` and `context` optional and its SDKs omit them when
    // empty: absent means empty (the reference rejects it; docs/protocol.md). Present, they
    // are checked as before.
    let messages = field(o, "messages", "messages")
        .and_then(Value::as_array)
        .ok_or(())?;
    for m in messages {
        check_message(m)?;
    }
    let no_list = Vec::new();
    let tools = match field(o, "tools", "tools") {
        None => &no_list,
        Some(v) => v.as_array().ok_or(())?,
    };
    for t in tools {
        let t = t.as_object().ok_or(())?;
        req_str(t, "name", "name")?;
        req_str(t, "description", "description")?;
    }
    let context = match field(o, "context", "context") {
        None => &no_list,
        Some(v) => v.as_array().ok_or(())?,
    };
    for c in context {
        let c = c.as_object().ok_or(())?;
        req_str(c, "description", "description")?;
        req_str(c, "value", "value")?;
    }
    let forwarded_props = field(o, "forwardedProps", "forwarded_props")
        .ok_or(())?
        .clone();
    let resume = match field(o, "resume", "resume") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(a.iter().map(parse_resume_entry).collect::<Result<_, _>>()?),
        Some(_) => return Err(()),
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

fn parse_resume_entry(v: &Value) -> Result<ResumeEntry, ()> {
    let o = v.as_object().ok_or(())?;
    let interrupt_id = req_str(o, "interruptId", "interrupt_id")?;
    let status = match field(o, "status", "status") {
        Some(Value::String(s)) if s == "resolved" => ResumeStatus::Resolved,
        Some(Value::String(s)) if s == "cancelled" => ResumeStatus::Cancelled,
        _ => return Err(()),
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

fn check_common(o: &Map<String, Value>) -> Result<(), ()> {
    req_str(o, "id", "id")?;
    opt_str(o, "name", "name")?;
    opt_str(o, "encryptedValue", "encrypted_value")?;
    Ok(())
}

fn check_message(m: &Value) -> Result<(), ()> {
    let o = m.as_object().ok_or(())?;
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
                    for c in calls {
                        let c = c.as_object().ok_or(())?;
                        req_str(c, "id", "id")?;
                        if c.get("type").and_then(Value::as_str) != Some("function") {
                            return Err(());
                        }
                        let f = c.get("function").and_then(Value::as_object).ok_or(())?;
                        req_str(f, "name", "name")?;
                        req_str(f, "arguments", "arguments")?;
                        opt_str(c, "encryptedValue", "encrypted_value")?;
                    }
                }
                Some(_) => return Err(()),
            }
        }
        Some("user") => {
            check_common(o)?;
            match o.get("content") {
                Some(Value::String(_)) => {}
                Some(Value::Array(parts)) => {
                    for p in parts {
                        check_content(p)?;
                    }
                }
                _ => return Err(()),
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
                return Err(());
            }
        }
        _ => return Err(()),
    }
    Ok(())
}

fn check_content(p: &Value) -> Result<(), ()> {
    let o = p.as_object().ok_or(())?;
    match o.get("type").and_then(Value::as_str) {
        Some("text") => {
            req_str(o, "text", "text")?;
        }
        Some("image" | "audio" | "video" | "document") => {
            let src = o.get("source").and_then(Value::as_object).ok_or(())?;
            req_str(src, "value", "value")?;
            match src.get("type").and_then(Value::as_str) {
                Some("data") => {
                    req_str(src, "mimeType", "mime_type")?;
                }
                Some("url") => {
                    opt_str(src, "mimeType", "mime_type")?;
                }
                _ => return Err(()),
            }
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
                return Err(());
            }
        }
        _ => return Err(()),
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
    seen: usize,
}

impl<'a> Strict<'a> {
    fn get(&mut self, alias: &str, name: &str) -> Result<Option<&'a Value>, ()> {
        let a = self.o.get(alias);
        let n = if alias == name {
            None
        } else {
            self.o.get(name)
        };
        match (a, n) {
            (Some(_), Some(_)) => Err(()),
            (Some(v), None) | (None, Some(v)) => {
                self.seen += 1;
                Ok(Some(v))
            }
            (None, None) => Ok(None),
        }
    }

    fn opt_str(&mut self, alias: &str, name: &str) -> Result<Option<String>, ()> {
        match self.get(alias, name)? {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(()),
        }
    }

    fn bool_default_false(&mut self, alias: &str, name: &str) -> Result<bool, ()> {
        match self.get(alias, name)? {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(()),
        }
    }

    /// Every key of the object was consumed (strict `extra="forbid"`).
    fn finish(self) -> Result<(), ()> {
        if self.seen == self.o.len() {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// Validate `forwardedProps` (the generic forwarded-props 400 on any failure).
pub fn parse_iac_props(forwarded: &Value) -> Result<IacProps, Invalid> {
    Ok(iac_props(forwarded)?)
}

fn iac_props(forwarded: &Value) -> Result<IacProps, ()> {
    let fp = forwarded.as_object().ok_or(())?;
    if fp.len() != 1 {
        return Err(());
    }
    let iac = fp
        .get("iacCode")
        .or_else(|| fp.get("iac_code"))
        .and_then(Value::as_object)
        .ok_or(())?;
    let mut s = Strict { o: iac, seen: 0 };
    match s.get("schemaVersion", "schema_version")? {
        // REC: the integer 1 (and 1.0); never `true`.
        Some(Value::Number(n)) if n.as_f64() == Some(1.0) => {}
        _ => return Err(()),
    }
    let ros_invocation_id = s
        .opt_str("rosInvocationId", "ros_invocation_id")?
        .ok_or(())?;
    let n = ros_invocation_id.chars().count();
    if !(1..=256).contains(&n) {
        return Err(());
    }
    let cwd = s.opt_str("cwd", "cwd")?.ok_or(())?;
    let model = s.opt_str("model", "model")?;
    let llm_api_key = s.opt_str("llmApiKey", "llm_api_key")?;
    let llm_headers = match s.get("llmHeaders", "llm_headers")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => {
            if !m.values().all(Value::is_string) {
                return Err(());
            }
            Some(m.clone())
        }
        Some(_) => return Err(()),
    };
    let thinking = match s.get("thinking", "thinking")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => Some(parse_thinking(t)?),
        Some(_) => return Err(()),
    };
    let user_id = s.opt_str("userId", "user_id")?;
    let channel = s.opt_str("channel", "channel")?;
    let preferred_language = s.opt_str("preferredLanguage", "preferred_language")?;
    let candidate_presentation = s.opt_str("candidatePresentation", "candidate_presentation")?;
    if !matches!(
        candidate_presentation.as_deref(),
        None | Some("standard" | "rich")
    ) {
        return Err(());
    }
    let run_mode = s.opt_str("runMode", "run_mode")?;
    if !matches!(run_mode.as_deref(), None | Some("normal" | "pipeline")) {
        return Err(());
    }
    let pipeline_name = s.opt_str("pipelineName", "pipeline_name")?;
    let cleanup_only = s.bool_default_false("cleanupOnly", "cleanup_only")?;
    let active_guidance = s.bool_default_false("activeGuidance", "active_guidance")?;
    let alibaba_cloud = match s.get("alibabaCloud", "alibaba_cloud")? {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            let mut s2 = Strict { o: a, seen: 0 };
            let c = AlibabaCloud {
                access_key_id: s2.opt_str("accessKeyId", "access_key_id")?,
                access_key_secret: s2.opt_str("accessKeySecret", "access_key_secret")?,
                security_token: s2.opt_str("securityToken", "security_token")?,
                region_id: s2.opt_str("regionId", "region_id")?,
            };
            s2.finish()?;
            Some(c)
        }
        Some(_) => return Err(()),
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

fn parse_thinking(t: &Map<String, Value>) -> Result<Thinking, ()> {
    let mut s = Strict { o: t, seen: 0 };
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
                return Err(());
            }
            Some(n.clone())
        }
        Some(_) => return Err(()),
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
                o.remove("forwardedProps");
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

    fn props(iac: Value) -> Result<IacProps, Invalid> {
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
}
